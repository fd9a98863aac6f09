package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAFailedWaveRollsBackByDefault(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	errRate := Verdict{Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3 > threshold 0.05"}
	d := s.decide([]Verdict{pass("rollout"), pass("injection"), pass("xds-sync"), errRate})
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Equal(t, "1-25", d.Label, "the label goes back to the source")
	require.Len(t, d.Moves, 1)
	// In the second of the move it undoes: its stamp is pushed to the
	// second after, and its record says so (Stamp).
	stamp := t0.Add(time.Second)
	assert.Equal(t, MoveRecord{Revision: "1-25", From: "1-26", Wave: 1, At: t0, Rollback: true, Migration: "1-26@2026-11-29T12:00:00Z", Stamp: &stamp}, d.Moves[0].Record)
	assert.Contains(t, string(d.Moves[0].Patch), `"kubectl.kubernetes.io/restartedAt":"2026-11-29T12:00:01Z"`)
	assert.Equal(t, "wave 1 failed: error-rate fail: a: 5xx ratio 0.3 > threshold 0.05", d.Status.Reason)

	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.Equal(t, "1-25", w.Expect)
	assert.True(t, w.Rollback)

	s.rollOut("1-25", "a")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
	assert.Equal(t, "rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: a: 5xx ratio 0.3 > threshold 0.05", d.Status.Reason)
	assert.Equal(t, 1, d.Status.Counts.RolledBack)
	assert.Equal(t, map[string]int{"a": 2}, s.patches, "moved once, rolled back once")
	assert.Contains(t, s.reasons(), "RolledBack")

	d = s.decide(nil)
	assert.Nil(t, d.Status, "RolledBack is final")
}

func TestAFailedWaveUnderPausePausesAndResumesWithFreshTimers(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.now = s.now.Add(5 * time.Minute)
	d := s.decide(failRollout("a", "a did not roll out within 5m0s: 1 of 2 updated replicas available"))
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, WaveFailed, d.Status.WaveState)
	assert.True(t, d.SetPaused, "meshwave sets meshwave.io/paused so that removing it resumes")
	assert.Equal(t, "wave 1 failed: rollout fail: a did not roll out within 5m0s: 1 of 2 updated replicas available; paused by failure policy Pause", d.Status.Reason)
	assert.Equal(t, []WorkloadState{{Name: "a", State: StateFailed, Reason: "a did not roll out within 5m0s: 1 of 2 updated replicas available"}}, d.Status.Workloads)
	assert.Equal(t, Counts{Total: 2, Pending: 1, Failed: 1}, d.Status.Counts)
	assert.Contains(t, s.events, Event{Workload: "a", Type: EventWarning, Reason: "WorkloadFailed", Message: "wave 1, rollout: a did not roll out within 5m0s: 1 of 2 updated replicas available"})

	d = s.decide(nil)
	assert.Nil(t, d.Status, "paused stays paused")

	s.now = s.now.Add(10 * time.Minute)
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, WaveVerifying, d.Status.WaveState)
	assert.Equal(t, s.now, *d.Status.GatesSince, "gate timeouts count again from the resume")
	assert.Equal(t, 600.0, d.Status.PausedSeconds)
	assert.Empty(t, d.Moves, "resuming does not restart the workload again")

	s.rollOut("1-26", "a")
	d = s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState)
}

func TestContinuePolicyToleratesFailuresUpToTheLimit(t *testing.T) {
	s := continuingOnFailure(t)

	s.decide(nil) // wave 1: a
	d := s.decide(failRollout("a", "a did not roll out"))
	assert.Equal(t, PhaseMigrating, d.Status.Phase, "1 of 5 failed is 20%, within 25%")
	assert.Contains(t, s.reasons(), "FailureTolerated")
	require.Len(t, d.Moves, 1, "before wave 1 is left behind, a's record says it failed")
	assert.True(t, d.Moves[0].RecordOnly)
	assert.Equal(t, OutcomeFailed, d.Moves[0].Record.Outcome)
	assert.Equal(t, 1, d.Status.Wave)

	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	assert.Equal(t, 1, d.Status.PastFailed)
	var moved []string
	for _, m := range d.Moves {
		moved = append(moved, m.Workload)
	}
	assert.Equal(t, []string{"b", "c"}, moved)

	s.rollOut("1-26", "c")
	d = s.decide(failRollout("b", "b did not roll out"))
	assert.Equal(t, PhasePaused, d.Status.Phase, "2 of 5 failed is 40%, over 25%")
	assert.Equal(t, "wave 2 failed: rollout fail: b did not roll out; 2 of 5 workloads failed (40%), over maxFailedPercent 25", d.Status.Reason)
	assert.Equal(t, Counts{Total: 5, Pending: 2, Moving: 1, Failed: 2}, d.Status.Counts)
}

// Nothing counts as moved before its wave passed, and policy Continue goes
// on only while the failed workloads stay at or under maxFailedPercent.
// Under Continue (maxFailedPercent 25, five workloads, no delay) the
// canary a fails its rollout and is tolerated (1 of 5, 20%). The decision
// that tolerates it carries a's record-only patch, which writes outcome
// Failed; that patch is fenced by a's resourceVersion, which the
// Deployment controller keeps bumping while a's pods crash, so it meets a
// conflict and does not land. Wave 1 is not left behind until a's record
// says it failed, so pastFailed, recomputed from the records, keeps a:
// when b fails in wave 2, 2 of 5 (40%) failed and the namespace pauses.
func TestALostFailedOutcomeIsNotForgottenByTheContinueLimit(t *testing.T) {
	s := continuingOnFailure(t)
	s.decide(nil)
	s.refused = map[string]string{"a": "conflict"} // a's outcome patch does not land
	d := s.decide(failRollout("a", "a did not roll out"))
	s.refused, s.answers = nil, nil // a conflict is not a refusal: nothing is handed on
	require.Equal(t, 1, d.Status.Wave, "wave 1 is not left behind before a's record says it failed")
	s.decide(nil) // the outcome again; it lands
	d = s.decide(nil)
	require.Equal(t, 2, d.Status.Wave)
	require.Equal(t, 1, d.Status.PastFailed)

	d = s.decide(nil)
	pastFailed := s.status.PastFailed
	s.rollOut("1-26", "c")
	d = s.decide(failRollout("b", "b did not roll out"))
	assert.Equal(t, PhasePaused, s.status.Phase,
		"a and b failed (40%% > 25%%), yet meshwave goes on: pastFailed fell from 1 to %d once a's outcome patch was lost; counts %+v", pastFailed, s.status.Counts)
}

func TestAFailureToleratedOnRecordIsNeverRestartedByAStaleStatus(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.cfg.FailurePolicy, s.cfg.MaxFailedPercent = PolicyContinue, 50
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	stale := s.status.DeepCopy() // wave 2, b and c moving
	s.rollOut("1-26", "b", "c")
	failB := Verdict{Gate: "rollout", Result: ResultFail, Reason: "b crashing", Failed: []WorkloadState{{Name: "b", State: StateFailed, Reason: "b crashing"}}}
	s.decide([]Verdict{failB}) // tolerated: b's record says so
	rec, ok := ReadMoveRecord(s.snap.Workloads[1].Annotations)
	require.True(t, ok)
	require.Equal(t, OutcomeFailed, rec.Outcome)

	s.status = stale // a stale copy put back
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Empty(t, d.Moves, "b is not restarted again")
	require.NotNil(t, d.Status)
	assert.Equal(t, []WorkloadState{
		{Name: "b", State: StateFailed, Reason: "failed wave 2 and stays where it is, as its meshwave.io/move record says"},
		{Name: "c", State: StateMoving},
	}, d.Status.Workloads)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
}

// continuingOnFailure is namespace shop of a to e under the Continue
// policy, which tolerates up to 25% failed, in a canary of one and waves
// of two, without a delay between them.
func continuingOnFailure(t *testing.T) *sim {
	var ws []Workload
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		ws = append(ws, deploy(n))
	}
	s := newSim(t, ws...)
	s.cfg.FailurePolicy, s.cfg.MaxFailedPercent = PolicyContinue, 25
	s.cfg.DelayBetweenWaves = 0
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	return s
}
