package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// d4b02ab: holders read a status that keeps its revision "whatever the tag
// names now: its pods are of a migration that ended, not ones meshwave
// will move". A rollback paused (a gate failed while it rolled back:
// Paused, waveState RollingBack) keeps 1-26 while canary names 1-27; the
// classifier reads it, but only a phase RollingBack is taken as a
// rollback, so the pods still on 1-26, which resuming returns to 1-25, are
// reported as "meshwave moves this Deployment to 1-27 in wave 3, once
// namespace shop resumes": a move meshwave never makes.
func TestAttack3HoldersOfAPausedRollbackAfterARepointSayItRollsBack(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.now = s.now.Add(time.Minute)
	s.decide(failRollout("a", "bad"))
	require.Equal(t, PhasePaused, s.status.Phase)
	require.Equal(t, WaveRollingBack, s.status.WaveState)
	s.snap.Mesh.Tags["canary"] = "1-27"
	s.decide(nil)
	require.Equal(t, "1-26", s.status.TargetRevision)
	hs := holdersIn("1-26", s.snap, s.status)
	require.Len(t, hs.Holders, 3)
	for _, h := range hs.Holders {
		assert.NotEqual(t, ReasonWillMove, h.Code, "%s: %s", h.Name, h.Reason)
		assert.NotContains(t, h.Reason, "1-27", h.Name)
	}
}

// The same read, of a Completed status: the reason names the revision the
// tag names now, not the one the migration went to, on pods that run the
// latter: "the migration of namespace shop to 1-27 is Completed".
func TestAttack3HoldersOfACompletedNamespaceAfterARepointNameItsRevision(t *testing.T) {
	s := completedOnTag(t)
	hs := holdersIn("1-26", s.snap, s.status)
	require.NotEmpty(t, hs.Holders)
	for _, h := range hs.Holders {
		assert.NotContains(t, h.Reason, "to 1-27 is Completed", h.Name)
	}
}
