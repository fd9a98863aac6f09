package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wave3RolledBackInOneSecond plays toWave2Passed on to wave 3 (d), started
// at second S+0.1, failed and rolled back at S+0.3 (d's stamp pushed to
// S+1, and with 6c753f8 its record's At too), RolledBack at S+0.5. If
// future is set, a person restarts d (kubectl rollout restart from a
// machine whose clock is an hour ahead) after its move.
func wave3RolledBackInOneSecond(t *testing.T, future bool) *sim {
	s := toWave2Passed(t)
	s.now = s.now.Truncate(time.Minute).Add(5*time.Minute + 100*time.Millisecond)
	d := s.decide(s.gates())
	require.Equal(t, []string{"d>1-26"}, movesInOrder([]Decision{d}))
	if future {
		s.snap.Workloads[3].TemplateAnnotations[AnnotationRestartedAt] = s.now.Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	s.now = s.now.Add(200 * time.Millisecond)
	d = s.decide(failRollout("d", "bad"))
	require.Equal(t, []string{"d<1-25"}, movesInOrder([]Decision{d}))
	require.NotNil(t, d.Moves[0].Record.Stamp, "the rollback's stamp is pushed past now")
	require.True(t, d.Moves[0].Record.Stamp.After(s.now), "the rollback's stamp is pushed past now: %v", d.Moves[0].Record.Stamp)
	require.False(t, d.Moves[0].Record.At.After(s.now), "its record is dated when it was made")
	s.rollOut("1-25", "d")
	s.now = s.now.Add(200 * time.Millisecond)
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	return s
}

// requireRetryMovesD plays a retry (the target just set again) to its
// end: it must resume the migration and move d again, not be adopted as
// the rollback on record.
func requireRetryMovesD(t *testing.T, s *sim) {
	t.Helper()
	s.events = nil
	played := []Decision{s.decide(nil)}
	for i := 0; i < 8 && s.status.Phase != PhaseCompleted; i++ {
		played = append(played, s.step3(s.gates))
	}
	assert.NotContains(t, s.reasons(), "StatusAdopted", "%s", s.status.Reason)
	assert.Equal(t, PhaseCompleted, s.status.Phase, "the retry moves d again: %s", s.status.Reason)
	assert.Equal(t, []string{"d"}, forwardMovesTo(played, "1-26"))
}

// Break 3 (the first version of the stamp fix, 6c753f8, dated a record at
// its pushed stamp; a record now carries it as Stamp). A wave's rollback
// in the second of its move has its record dated the pushed second (S+1), a time after now. A
// person retries (removes and sets the target again) within that second:
// retriedAt S+0.7 is before the rollback's record, so current() does not
// make the rollback history, continueOnRecord takes the retry's Pending
// status for one that "does not know the rollback on record"
// (StatusAdopted), and the retry is turned into RollingBack -> RolledBack:
// the retry is lost, nothing moves. Before 6c753f8 the record carried
// S+0.3 and the retry resumed the migration.
// Promise: the target set again after a rollback ended is a retry; the
// rollbacks before it are history.
func TestAttack5ARetryInTheSecondARollbackStampWasPushedToIsEaten(t *testing.T) {
	s := wave3RolledBackInOneSecond(t, false)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.now = s.now.Add(100 * time.Millisecond)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.now = s.now.Add(100 * time.Millisecond)
	requireRetryMovesD(t, s)
}

// Break 4 (the same first version), the same with a wider window: after d was
// moved, a person restarted it from a machine whose clock is an hour
// ahead (its template's restartedAt is an hour in the future). The wave's
// rollback pushes its stamp past that one, and now dates its record there
// too, an hour ahead. Every retry within the hour (here 5 minutes after
// the rollback ended) is eaten as above: StatusAdopted, RolledBack.
func TestAttack5AFutureRestartStampMakesEveryRetryWithinItAnAdoptedRollback(t *testing.T) {
	s := wave3RolledBackInOneSecond(t, true)
	s.now = s.now.Add(time.Minute)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)
	s.now = s.now.Add(5 * time.Minute)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	requireRetryMovesD(t, s)
}
