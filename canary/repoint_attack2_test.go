package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// af77a43: an ended status keeps targetRevision 1-26 while canary names
// 1-27. A rollback asked of it after completion (meshwave.io/rollback=all)
// turns it into RollingBack with targetRevision 1-26, a phase that is not
// terminal: the next reconcile reads "canary now resolves to 1-27 instead
// of 1-26" (TargetChanged), drops the rollback half-way (its gates never
// judged, no RolledBack) and starts a migration of everything to 1-27
// that nobody asked for: the workloads just rolled back are restarted
// again, forward.
func TestAttack2RollbackAfterCompletionOnARepointedTagEndsRolledBack(t *testing.T) {
	s := completedOnTag(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.decide(nil)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	require.Len(t, d.Moves, 3, "every moved workload is returned")
	var played []Decision
	for i := 0; i < 6; i++ {
		for _, w := range s.snap.Workloads {
			if r, ok := ReadMoveRecord(w.Annotations); ok {
				s.rollOut(r.Revision, w.Name)
			}
		}
		s.now = s.now.Add(2 * time.Minute)
		played = append(played, s.decide(s.gates()))
	}
	assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s: %v", s.status.Reason, s.reasons())
	assert.Empty(t, forwardMovesTo(played, "1-27"), "a rollback request started a migration to 1-27: %v", s.reasons())
}

// The same through a block: an invalid annotation on a completed
// namespace blocks it (Blocked, blockedPhase Completed, targetRevision
// 1-26): not terminal, so the next reconcile reads the repoint as a
// target changed mid-way and starts over. Once the annotation is fixed,
// the namespace migrates to 1-27: a migration nobody asked for (an ended
// namespace is never moved by a repoint alone).
func TestAttack2ABlockOnACompletedNamespaceAfterARepointStartsNoMigration(t *testing.T) {
	s := completedOnTag(t)
	s.snap.Workloads[1].Annotations[AnnotationWave] = "-1"
	s.decide(nil)
	require.Equal(t, PhaseBlocked, s.status.Phase)
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	delete(s.snap.Workloads[1].Annotations, AnnotationWave)
	var played []Decision
	for i := 0; i < 6; i++ {
		s.now = s.now.Add(2 * time.Minute)
		played = append(played, s.decide(s.gates()))
	}
	assert.Equal(t, PhaseCompleted, s.status.Phase, "%s: %v", s.status.Reason, s.reasons())
	assert.Empty(t, forwardMovesTo(played, "1-27"), "fixing an annotation started a migration to 1-27: %v", s.reasons())
}

// Control: without the block, the repoint alone moves nothing.
func TestAttack2ControlARepointAloneMovesNothing(t *testing.T) {
	s := completedOnTag(t)
	var played []Decision
	for i := 0; i < 6; i++ {
		s.now = s.now.Add(2 * time.Minute)
		played = append(played, s.decide(s.gates()))
	}
	assert.Equal(t, PhaseCompleted, s.status.Phase)
	assert.Empty(t, forwardMovesTo(played, "1-27"))
}

// af77a43, holders: the Completed status keeps targetRevision 1-26, the
// plan (PlanWaves) resolves canary to 1-27, and the classifier only reads
// a status whose targetRevision is the plan's: it drops the Completed
// status and reports every pod on 1-26 as "meshwave moves this Deployment
// to 1-27 in wave N", which meshwave never does until the target is set
// again. Before af77a43 the status was rewritten to 1-27 and they read
// MigrationEnded.
func TestAttack2HoldersOfACompletedNamespaceAfterARepointSayItEnded(t *testing.T) {
	s := completedOnTag(t)
	hs := holdersIn("1-26", s.snap, s.status)
	require.NotEmpty(t, hs.Holders)
	for _, h := range hs.Holders {
		assert.Equal(t, ReasonMigrationEnded, h.Code, "%s %s: %s %s", h.Kind, h.Name, h.State, h.Reason)
	}
}
