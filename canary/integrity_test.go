package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The invariants hold whatever meshwave.io/status says: missing,
// unreadable, edited, or older than the moves.

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

func TestAPausedDeploymentIsLeftOutAndPausingOneMidWaveFailsTheWave(t *testing.T) {
	paused := func(w *Workload) { w.Paused = true }
	p := PlanNamespace("shop", []Workload{deploy("a"), deploy("b", paused)}, "1-26", "", 0, WaveSizes{})
	assert.Equal(t, []Exclusion{{"b", "paused (spec.paused): a restart would not roll out"}}, p.Excluded)

	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Workloads[0].Paused = true
	d := s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
	assert.Equal(t, "rolled back 0 workloads to 1-25 (none of this migration's workloads is left to return): wave 1 failed: restart fail: a is paused (spec.paused): it does not roll out", d.Status.Reason)
	assert.Empty(t, d.Moves, "the paused workload is not patched again by the rollback")
	assert.Equal(t, 1, s.patches["a"])
}

func TestARefusedPatchFailsTheWaveWithTheAnswer(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.refused = map[string]string{"a": `admission webhook "policy.example" denied the request (403 Forbidden)`}
	s.decide(nil) // the patch is sent and refused
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRolledBack, d.Status.Phase, "the failure policy applies; a never moved, so nothing is restarted")
	assert.Equal(t, `rolled back 0 workloads to 1-25 (none of this migration's workloads is left to return): wave 1 failed: restart fail: the apiserver refused to restart a: admission webhook "policy.example" denied the request (403 Forbidden)`, d.Status.Reason)
	assert.Contains(t, s.events, Event{Workload: "a", Type: EventWarning, Reason: "WorkloadFailed",
		Message: `wave 1, restart: the apiserver refused to restart a: admission webhook "policy.example" denied the request (403 Forbidden)`})
	assert.Empty(t, d.Moves)
	assert.Zero(t, s.patches["a"])
}

func TestTheNamespaceKeepsItsRevisionLabelWhileMeshwaveOwnsIt(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.playUntil(PhaseCompleted)
	delete(s.snap.Namespace.Labels, LabelRev)
	d := s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "put back after completion")

	s = newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	d = s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "put back while paused")

	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	d = s.decide(nil)
	assert.Empty(t, d.Label, "once opted out, the label is the namespace's own")
}

func TestNothingMovesOntoARevisionWithoutAControlPlane(t *testing.T) {
	noIstiod := func(s *sim) { s.snap.Mesh.Revisions["1-26"] = Revision{Name: "1-26", Istiods: 1, ReadyIstiods: 0} }

	// Between waves: the next wave does not start.
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	noIstiod(s)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.True(t, d.SetPaused)
	assert.Equal(t, "wave 2 not started: revision 1-26 has no Ready istiod pod (1 pods): nothing moves onto a revision without a control plane", d.Status.Reason)

	// With the wave written and its restarts not sent yet (the agent
	// stopped in between): they are held.
	s = newSim(t, deploy("a"), deploy("b"))
	first := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	s.status = first.Status
	s.snap.Namespace.Labels[LabelRev] = "1-26"
	noIstiod(s)
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, "wave 1 held before its restarts: revision 1-26 has no Ready istiod pod (1 pods): nothing moves onto a revision without a control plane", d.Status.Reason)
	assert.Zero(t, s.patches["a"])

	// Back, and resumed: the held restart goes out once.
	s.snap.Mesh.Revisions["1-26"] = Revision{Name: "1-26", Istiods: 1, ReadyIstiods: 1}
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d = s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
}

func TestAWaveHoldsAtMost500Workloads(t *testing.T) {
	var ws []Workload
	for i := 0; i < 501; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i)))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1000, BatchSize: 1000}
	d := s.decide(nil)
	assert.Len(t, d.Moves, 500)
	assert.Len(t, d.Status.Workloads, 500)
	assert.Equal(t, 2, d.Status.TotalWaves)
}
