package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Repointed mid-rollback: RollingBack, Paused in RollingBack, Blocked in
// RollingBack. Each ends RolledBack with one rollback restart per moved
// workload, nothing forward to 1-27.
func TestAttack3RepointMidRollbackEndsRolledBack(t *testing.T) {
	for _, how := range []string{"rolling back", "paused rolling back", "blocked rolling back"} {
		t.Run(how, func(t *testing.T) {
			s, played, release := midRollback(t, how)
			s.snap.Mesh.Tags["canary"] = "1-27"
			played = append(played, s.decide(nil))
			release()
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s: %v", s.status.Reason, s.reasons())
			assert.Equal(t, "1-26", s.status.TargetRevision)
			assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, backMoves(played))
			assert.Empty(t, forwardMovesTo(played, "1-27"), "%v", s.reasons())
			assert.Equal(t, "1-25", s.snap.Namespace.Labels[LabelRev])
			// Nothing spins afterwards.
			for i := 0; i < 3; i++ {
				s.now = s.now.Add(time.Minute)
				d := s.decide(s.gates())
				assert.Nil(t, d.Status, "round %d", i)
				assert.Empty(t, d.Moves)
			}
		})
	}
}

// Paused (by a person) forward in wave 2 (a, b, c on 1-26, d on 1-25),
// then canary is repointed to 1-27: the migration starts over
// (TargetChanged). freshStatus keeps the unfinished migration's source
// (1-25) as "inherited" so that the new migration's rollback returns the
// workloads to a revision they ran, not to the abandoned target. Without
// the pause it does. With the pause still set, the fresh status goes
// Paused before its first wave, keeps no source, and when the person
// resumes, the next decision has no inherited source: the source is taken
// from the pods, most of which run the abandoned 1-26. A rollback of the
// new migration then sends everything to 1-26, the abandoned target,
// never to 1-25 where the namespace came from.
func TestAttack3RepointWhilePausedForwardKeepsTheSource(t *testing.T) {
	for _, how := range []string{"unpaused (control)", "paused", "blocked"} {
		t.Run(how, func(t *testing.T) {
			s := toWave2Passed(t)
			switch how {
			case "paused":
				s.snap.Namespace.Annotations[AnnotationPaused] = "true"
				s.decide(nil)
				require.Equal(t, PhasePaused, s.status.Phase)
			case "blocked":
				s.snap.Workloads[3].Annotations[AnnotationWave] = "-1"
				s.decide(nil)
				require.Equal(t, PhaseBlocked, s.status.Phase)
			}
			s.snap.Mesh.Tags["canary"] = "1-27"
			s.now = s.now.Add(time.Minute)
			s.decide(nil)
			require.Contains(t, s.reasons(), "TargetChanged")
			switch how {
			case "paused":
				delete(s.snap.Namespace.Annotations, AnnotationPaused)
			case "blocked":
				delete(s.snap.Workloads[3].Annotations, AnnotationWave)
			}
			for i := 0; i < 3 && s.status.Wave == 0; i++ {
				s.now = s.now.Add(time.Minute)
				s.decide(nil)
			}
			require.Equal(t, 1, s.status.Wave, "%s %s", s.status.Phase, s.status.Reason)
			assert.Equal(t, "1-27", s.status.TargetRevision)
			assert.Equal(t, "1-25", s.status.SourceRevision, "the source of the migration it replaces")
			assert.Equal(t, "1-25", s.status.SourceLabel)
		})
	}
}

// A migration that started over on a repoint, and waits (paused), keeps
// the source of the one it replaced through a second repoint before it
// starts.
func TestASourceKeptThroughTwoRepointsBeforeTheStart(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("d"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
	s.snap.Mesh.Revisions["1-28"] = Revision{Name: "1-28", Istiods: 1, ReadyIstiods: 1}
	s.snap.Mesh.Tags["canary"] = "1-26"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b, c
	s.rollOut("1-26", "b", "c")
	require.Equal(t, 2, s.status.Wave)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	for _, rev := range []string{"1-27", "1-28"} {
		s.snap.Mesh.Tags["canary"] = rev
		s.now = s.now.Add(time.Minute)
		s.decide(nil)
		require.Equal(t, 0, s.status.Wave, rev)
		assert.Equal(t, "1-25", s.status.SourceRevision, "kept while it waits, after the repoint to %s", rev)
	}
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, 1, s.status.Wave, "%s %s", s.status.Phase, s.status.Reason)
	assert.Equal(t, "1-28", s.status.TargetRevision)
	assert.Equal(t, "1-25", s.status.SourceRevision)
}
