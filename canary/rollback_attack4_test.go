package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sound (control): a repoint together with rollback=wave or =all rolls
// back on 1-26 and ends RolledBack with nothing forward to 1-27; an
// invalid request starts over; after an opt-out and opt-in the retry moves
// each workload to 1-27 once, with no adoption.
func TestAttack4ControlRepointWithRollbackThenRetry(t *testing.T) {
	for _, scope := range []string{"wave", "all"} {
		t.Run(scope, func(t *testing.T) {
			s := toWave2Passed(t)
			s.snap.Namespace.Annotations[AnnotationRollback] = scope
			s.snap.Mesh.Tags["canary"] = "1-27"
			var played []Decision
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			require.Equal(t, PhaseRolledBack, s.status.Phase)
			assert.Equal(t, "1-26", s.status.TargetRevision)
			assert.Empty(t, forwardMovesTo(played, "1-27"))
			delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
			s.decide(nil)
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
			s.events, played = nil, nil
			for i := 0; i < 12; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.Equal(t, PhaseCompleted, s.status.Phase)
			assert.ElementsMatch(t, []string{"a", "b", "c", "d"}, forwardMovesTo(played, "1-27"))
			assert.NotContains(t, s.reasons(), "StatusAdopted")
		})
	}
}

// onTag4 at wave 2 (a, b, c moved 1-25 -> 1-26), paused by a person; the
// operator aborts the canary by repointing canary back to 1-25, the
// source. The fresh wave-0 status now keeps the replaced migration's
// source 1-25 (a421080), so on resume the migration to 1-25 starts with
// sourceRevision 1-25 = targetRevision: its rollbacks restart workloads
// onto the very revision they are leaving ("rolling back to 1-25" of
// workloads moved to 1-25), so a failed wave can never be undone. Before
// a421080 the waiting status dropped the source and it was read from the
// pods (1-26, where a, b, c came from).
func TestAttack4ARepointBackToTheSourceNeverMakesSourceEqualTarget(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	s.snap.Mesh.Tags["canary"] = "1-25"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Contains(t, s.reasons(), "TargetChanged")
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	for i := 0; i < 3 && s.status.Wave == 0; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(nil)
	}
	require.Equal(t, 1, s.status.Wave, "%s %s", s.status.Phase, s.status.Reason)
	assert.Equal(t, "1-25", s.status.TargetRevision)
	assert.NotEqual(t, s.status.TargetRevision, s.status.SourceRevision, "a migration whose rollback goes to its own target")
}
