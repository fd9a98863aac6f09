package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// More scenarios against the invariants, around move records' outcomes,
// retries, rollback scopes and the status's size: each test names the
// invariant and the scenario that broke it before its fix.

// Invariant 2 (nothing counts as moved before its wave passed) and the
// Continue policy's limit ("while failed workloads stay at or under
// maxFailedPercent").
//
// Scenario (Continue, maxFailedPercent 25, five workloads, no delay): the
// canary a fails its rollout and is tolerated (1 of 5, 20%). The decision
// that tolerates it also starts wave 2 (b, c), and carries a's record-only
// patch that writes outcome Failed. That patch is fenced by a's
// resourceVersion, which the Deployment controller keeps bumping while a's
// pods crash (status updates), so it meets a conflict and does not land.
// The outcome is only re-sent by ensureMoves for a member of the wave in
// flight, and a no longer is: its record says "moved" for good. The next
// summarize recomputes pastFailed from the records (0), so when b fails in
// wave 2 meshwave counts 1 of 5 failed and continues, though 2 of 5 (40%)
// failed, and a is counted as moved.
func TestALostFailedOutcomeIsNotForgottenByTheContinueLimit(t *testing.T) {
	var ws []Workload
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		ws = append(ws, deploy(n))
	}
	s := newSim(t, ws...)
	s.cfg.FailurePolicy, s.cfg.MaxFailedPercent = PolicyContinue, 25
	s.cfg.DelayBetweenWaves = 0
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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

// The status size bound ("bounded in size whatever the namespace holds")
// and invariant 7 (the namespace write must be one the apiserver takes).
//
// Scenario (policy Pause, batchSize 250): an admission policy refuses the
// restarts of wave 2 with a 1.1 KB answer each (Gatekeeper lists every
// violated constraint). cut() bounds the status reason to 4 KiB, but each
// member's reason (and each of the last 10 failures') quotes its answer in
// full: the Paused status is well over the apiserver's 256
// KiB limit for an object's annotations, so the namespace write is refused
// with 422, and, as a refused namespace write, asked again every minute
// forever: the failed wave is never recorded.
func TestTheStatusOfAWaveOfRefusedRestartsStaysUnderTheAnnotationLimit(t *testing.T) {
	var ws []Workload
	for i := 0; i <= 250; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i)))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 250}
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.rollOut("1-26", "svc-0000")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	answer := `admission webhook "validation.gatekeeper.sh" denied the request: ` + strings.Repeat("[restrict-template-changes] pod template annotation changes need a change ticket; ", 13) + "(403 Forbidden)"
	s.refused = map[string]string{}
	for _, w := range ws[1:] {
		s.refused[w.Name] = answer
	}
	s.decide(nil) // wave 2's restarts are sent and refused
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhasePaused, d.Status.Phase)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	memberReasons, verdictReasons, failureReasons := 0, 0, 0
	for _, w := range d.Status.Workloads {
		memberReasons += len(w.Reason)
	}
	for _, v := range d.Status.Verdicts {
		verdictReasons += len(v.Reason)
	}
	for _, f := range d.Status.Failures {
		failureReasons += len(f.Reason)
	}
	assert.Less(t, len(raw), 256*1024, "the Paused status is %d bytes: reason %d, %d members' reasons %d, verdict reasons %d, %d failures' reasons %d",
		len(raw), len(d.Status.Reason), len(d.Status.Workloads), memberReasons, verdictReasons, len(d.Status.Failures), failureReasons)
}

// Invariant 9 (bad input: a clear error, reported once) and invariant 6
// (nothing repeats without a change).
//
// Scenario: a chart typo sets meshwave.io/wave: "first" on all 60
// Deployments of a namespace. The Blocked reason joins 60 errors, about
// 5.5 KB; summarize cuts it to 4 KiB, but blockInvalid compares the
// written (cut) reason with the uncut one, so they never match: every
// reconcile (each pod or Deployment change, each resync) emits the 61
// InvalidAnnotation Warning Events again, though nothing changed.
func TestALongBlockedReasonIsReportedOnce(t *testing.T) {
	var ws []Workload
	for i := 0; i < 60; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i), waveAnn("first")))
	}
	s := newSim(t, ws...)
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	first := len(d.Events)
	var again []int
	for i := 0; i < 3; i++ {
		d = s.decide(nil)
		require.Nil(t, d.Status, "the status does not change")
		again = append(again, len(d.Events))
	}
	assert.Equal(t, []int{0, 0, 0}, again, "the first decision reported the %d errors in %d Events; each later one with nothing changed reports them again", len(ws), first)
}

// Counts must be true ("counts must not claim a workload moved that never
// passed").
//
// Scenario: the canary a fails its rollout (policy RollbackWave). The
// RollingBack status written in the same decision counts a as moved
// (counts.moved 1, failed 0): summarize skips the wave's member states
// while rolling back, and a's forward record, whose rollback patch has not
// landed, puts it in the plan's Moved list.
func TestTheStatusOfAFailedWavesRollbackDoesNotCountItsMembersMoved(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	d := s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Zero(t, d.Status.Counts.Moved, "a failed wave 1 and is being rolled back; counts %+v", d.Status.Counts)
}
