package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPausingByAnnotationLetsTheWaveInFlightFinish(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.rollOut("1-26", "a")
	d := s.decide(s.gates())
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, "paused by meshwave.io/paused after wave 1", d.Status.Reason)
	assert.False(t, d.SetPaused)
	assert.Empty(t, d.Moves)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
}

func TestASkipSetOnAFailedMemberIsHonouredOnResume(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.snap.Workloads[0].Annotations[AnnotationSkip] = "true"
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d := s.decide(nil)
	require.Len(t, d.Moves, 1, "no restart: only a's record is told it was skipped out of its wave")
	assert.True(t, d.Moves[0].RecordOnly)
	assert.Equal(t, OutcomeSkipped, d.Moves[0].Record.Outcome)
	assert.Equal(t, []WorkloadState{{Name: "a", State: StateSkipped, Reason: "meshwave.io/skip was set during wave 1: left where it is"}}, d.Status.Workloads[:1])
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, WavePassed, d.Status.WaveState, "nothing is left under test in wave 1, and a's record says why")
}

// Meshwave never writes a status it cannot read back. The namespace was
// paused by meshwave (policy Pause) and its status's pausedAt was edited
// into the future (a clock-skewed tool, a typo of the year). Resuming adds
// now - pausedAt to pausedSeconds, and the status written must still pass
// Validate: an invalid one would be found unreadable by the next
// reconcile, reported (StatusUnreadable) and rebuilt from the records,
// losing the failure history.
func TestAResumeWithAFuturePausedAtWritesAReadableStatus(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.editStatus(func(m map[string]any) { m["pausedAt"] = s.now.Add(time.Hour).Format(time.RFC3339) })
	delete(s.snap.Namespace.Annotations, AnnotationPaused)

	st, _, err := ParseStatus(map[string]string{AnnotationStatus: *s.raw})
	require.NoError(t, err, "the edited status is read as valid")
	d := Decide(Input{Snapshot: s.snap, Status: st, Now: s.now, Config: s.cfg})
	require.NotNil(t, d.Status)
	assert.NoError(t, d.Status.Validate(), "meshwave writes pausedSeconds %v", d.Status.PausedSeconds)
}
