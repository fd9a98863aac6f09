package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rollback in the same second as the move it undoes stamps its restart a
// second later (restartStamp), and the next migration can start in that
// second: the stamp must read as the rollback's, not as a restart of the
// new wave whose record was lost. Otherwise the workload is not restarted,
// its record is "restored", and it stays on the source.
func TestARollbackStampPushedIntoTheNextMigrationsFirstSecondIsNotItsMove(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.install("1-27")
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.now = t0.Add(100 * time.Millisecond)
	var played []Decision
	for i := 0; i < 3 && forwardMovesTo(played, "1-26") == nil; i++ {
		played = append(played, s.decide(s.gates()))
	}
	require.Equal(t, []string{"a"}, forwardMovesTo(played, "1-26"), "%v", s.reasons())
	rollOutStamped := func(rev string) {
		s.rollOut(rev, "a")
		at, err := time.Parse(time.RFC3339, s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt])
		require.NoError(t, err)
		s.snap.Workloads[0].RolledOutRestart = at // its newest ReplicaSet's stamp
	}
	rollOutStamped("1-26")
	// Asked back within the same second.
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(200 * time.Millisecond)
	d := s.decide(s.gates())
	require.Equal(t, map[string]int{"a": 1}, backMoves([]Decision{d}), "%v", s.reasons())
	require.Equal(t, s.now.UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339), s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt], "pushed a second ahead of its record")
	rollOutStamped("1-25")
	s.now = s.now.Add(200 * time.Millisecond)
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase, "%v", s.reasons())
	// The next migration starts in the second the rollback's stamp names.
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.now = t0.Add(time.Second + 300*time.Millisecond)
	played = nil
	for i := 0; i < 3 && (s.status.Wave == 0 || s.status.TargetRevision != "1-27"); i++ {
		played = append(played, s.decide(s.gates()))
	}
	for i := 0; i < 2; i++ {
		s.now = s.now.Add(100 * time.Millisecond)
		played = append(played, s.decide(s.gates()))
	}
	require.Equal(t, 1, s.status.Wave, "%v", s.reasons())
	assert.Equal(t, []string{"a"}, forwardMovesTo(played, "1-27"), "a restart, not a record written back: %v", s.reasons())
	for _, d := range played {
		for _, e := range d.Events {
			assert.NotContains(t, []string{"MoveRecordRestored", "TemplateReverted"}, e.Reason, e.Message)
		}
	}
	assert.Equal(t, PhaseMigrating, s.status.Phase, "%s", s.status.Reason)
}

// A record's stamp is written only when pushed past the second of its
// time; one that is not is not meshwave's record.
func TestARecordsStampIsReadOnlyPastItsSecond(t *testing.T) {
	base := `{"revision":"1-25","from":"1-26","wave":1,"at":"2026-11-29T12:00:00.3Z","rollback":true,"migration":"1-26@2026-11-29T12:00:00Z"`
	for stamp, ok := range map[string]bool{
		"":                                  true,
		`,"stamp":"2026-11-29T12:00:01Z"`:   true,
		`,"stamp":"2026-11-29T13:00:00Z"`:   true,
		`,"stamp":"2026-11-29T12:00:00Z"`:   false,
		`,"stamp":"2026-11-29T11:59:59Z"`:   false,
		`,"stamp":"0001-01-01T00:00:00Z"`:   false,
		`,"stamp":null`:                     true,
		`,"stamp":"2026-11-29T12:00:01.5Z"`: false,
	} {
		r, read := ReadMoveRecord(map[string]string{AnnotationMove: base + stamp + "}"})
		assert.Equal(t, ok, read, "stamp %s", stamp)
		if read && r.Stamp != nil {
			assert.Equal(t, base+stamp+"}", r.Encode(), "written back as read")
		}
	}
}

// A template whose kubectl.kubernetes.io/restartedAt is the last second
// JSON can write (9999-12-31T23:59:59Z, set by hand or by a broken clock)
// is rolled back: the rollback's stamp is pushed past it, to a year JSON
// cannot write. Each Deployment patch also writes the move record
// (design.md), and that record reads back: a stays a member of the
// rollback, with its counts and its history.
func TestARollbackPastAStampOfTheLastSecondJSONCanWriteKeepsItsRecord(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt] = "9999-12-31T23:59:59Z"
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.step3(s.gates)
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, backMoves([]Decision{d}))
	for _, m := range d.Moves {
		if m.Workload != "a" {
			continue
		}
		raw := m.Record.Encode()
		_, ok := ReadMoveRecord(map[string]string{AnnotationMove: raw})
		assert.True(t, ok, "a's rollback patch writes a record meshwave reads back, not %q (patch %s)", raw, m.Patch)
	}
	_, ok := ReadMoveRecord(s.snap.Workloads[0].Annotations)
	assert.True(t, ok, "a carries its rollback record: %q", s.snap.Workloads[0].Annotations[AnnotationMove])
}

// wave3RolledBackInOneSecond plays toWave2Passed on to wave 3 (d), started
// at second S+0.1, failed and rolled back at S+0.3 (d's stamp pushed to
// S+1, its record dated S+0.3), RolledBack at S+0.5. If future is set, a
// person restarts d after its move (kubectl rollout restart from a machine
// whose clock is an hour ahead).
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

// A wave's rollback pushes its restart stamp past the second of its move,
// and past a restart stamp a person set ahead of the clock, while its
// record is dated when it was made (the stamp is carried apart, as Stamp).
// A retry (the target removed and set again) within the time the pushed
// stamp names is still a retry: the rollbacks before it are history, it
// resumes the migration and moves d again, and it is not adopted as the
// rollback on record (StatusAdopted, then RollingBack and RolledBack with
// nothing moved).
func TestARetryWithinARollbacksPushedStampMovesAgain(t *testing.T) {
	for _, tc := range []struct {
		name        string
		future      bool
		stop, retry time.Duration
	}{
		{"within the second the rollback's stamp was pushed to", false, 100 * time.Millisecond, 100 * time.Millisecond},
		{"within the hour a restart stamped an hour ahead pushed it to", true, time.Minute, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := wave3RolledBackInOneSecond(t, tc.future)
			s.now = s.now.Add(tc.stop)
			delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
			s.decide(nil)
			require.Equal(t, PhaseStopped, s.status.Phase)
			s.now = s.now.Add(tc.retry)
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
			requireRetryMovesD(t, s)
		})
	}
}
