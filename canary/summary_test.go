package canary

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// The namespace keeps its istio.io/rev label while meshwave owns it, from
// its first wave until the target is removed. Mid-migration (wave 1
// moved, label 1-26), someone types a bad meshwave.io/wave on an unrelated
// Deployment, so the namespace is Blocked, still holding its slot.
// Meanwhile istio.io/rev is reset to 1-25 (a GitOps sync): the label is put
// back, so that a pod of the moved canary rescheduled meanwhile is not
// injected by the source.
func TestTheLabelIsKeptWhileBlockedHalfWay(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	require.Equal(t, WavePassed, s.status.WaveState)
	s.snap.Workloads[1].Annotations[AnnotationWave] = "x"
	s.decide(nil)
	require.Equal(t, PhaseBlocked, s.status.Phase)
	require.True(t, s.status.HoldsSlot())

	s.snap.Namespace.Labels[LabelRev] = "1-25"
	d := s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "the label meshwave owns is left at %q while blocked half-way", s.snap.Namespace.Labels[LabelRev])
}

// Counts never claim a workload moved that never passed its wave. The
// canary a fails its rollout (policy RollbackWave): the RollingBack status
// written in the same decision, before a's rollback patch has landed, does
// not count a as moved.
func TestTheStatusOfAFailedWavesRollbackDoesNotCountItsMembersMoved(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	d := s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Zero(t, d.Status.Counts.Moved, "a failed wave 1 and is being rolled back; counts %+v", d.Status.Counts)
}

// A rollback rebuilt from the records lists no member: the workloads it
// returns are counted once, on their way back, never as pending, and make
// no wave of the plan.
func TestARollbackRebuiltFromTheRecordsCountsEachWorkloadOnce(t *testing.T) {
	s := toWave2(t)
	s.decide(failRollout("b", "b did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.status = nil // lost
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Equal(t, 3, d.Status.Counts.Total, "3 workloads: %+v", d.Status.Counts)
	assert.Equal(t, 0, d.Status.Counts.Pending, "b and c are being returned, not waiting for a wave")
	assert.Equal(t, 2, d.Status.TotalWaves)
}
