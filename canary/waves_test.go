package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheNextWaveWaitsForTheDelayBetweenWaves(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	d := s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, time.Minute, d.RequeueAfter)
	assert.Empty(t, d.Moves)

	s.now = s.now.Add(30 * time.Second)
	d = s.decide(nil)
	assert.Nil(t, d.Status, "nothing changes before the delay is over")
	assert.Equal(t, 30*time.Second, d.RequeueAfter)

	s.now = s.now.Add(30 * time.Second)
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
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

func TestAnAgentRestartedAfterTheStatusWriteSendsOnlyTheMissingPatches(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 2}
	d := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	require.Len(t, d.Moves, 2)
	// The status and the first patch landed; the agent died before the second.
	s.status = d.Status.DeepCopy()
	s.snap.Namespace.Labels[LabelRev] = d.Label
	s.apply(Decision{Moves: d.Moves[:1]})

	s.now = s.now.Add(time.Second)
	d = s.decide(s.gates())
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Equal(t, 1, d.Moves[0].Record.Wave)

	s.rollOut("1-26", "a", "b")
	d = s.decide(s.gates())
	assert.Empty(t, d.Moves, "no workload is patched twice")
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

// No Deployment is restarted twice for one move. The status of wave 2 is
// edited (by a person, or an older tool) so that its member list also
// names a, which moved in wave 1 of this migration, or its wave is bumped
// to 3 with b and c still listed. The records show no wave beyond the
// status's, so nothing is adopted, and a member whose record is of another
// wave of the same migration is already moved: it is not restarted again.
func TestAMemberAlreadyMovedByThisMigrationIsNeverRestartedAgain(t *testing.T) {
	t.Run("a moved workload listed in the wave", func(t *testing.T) {
		s := toWave2(t)
		s.editStatus(func(m map[string]any) {
			ws := m["workloads"].([]any)
			m["workloads"] = append([]any{map[string]any{"name": "a", "state": "Moving"}}, ws...)
		})
		d := s.decide(nil)
		assert.Empty(t, forwardMoves(d), "a already carries wave 1's move of this migration; patches %v", s.patches)
	})
	t.Run("the wave number bumped", func(t *testing.T) {
		s := toWave2(t)
		s.editStatus(func(m map[string]any) { m["wave"], m["totalWaves"] = 3, 3 })
		d := s.decide(nil)
		assert.Empty(t, forwardMoves(d), "b and c already carry wave 2's move of this migration; patches %v", s.patches)
	})
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

// wave2EditedBack plays a, then b and c, keeping the status written when
// wave 1 passed; then puts that status back, as a person editing it back
// one wave would, and lets wave 2 start again over its moves on record.
func wave2EditedBack(t *testing.T) *sim {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	passed := s.status.DeepCopy()
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, 2, s.status.Wave)
	s.rollOut("1-26", "b", "c")

	s.status = passed
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, 2, d.Status.Wave)
	require.Empty(t, d.Moves, "b and c are moved already")
	assert.Equal(t, t0.Add(time.Minute), *d.Status.WaveStartedAt, "the wave is dated by its moves on record")
	return s
}

func TestAWaveStartedAgainOverItsMovesOnRecordRestartsNoMemberWhoseRecordIsRemoved(t *testing.T) {
	s := wave2EditedBack(t)
	delete(s.snap.Workloads[1].Annotations, AnnotationMove)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.True(t, d.Moves[0].RecordOnly, "b's record is written back; b is not restarted")
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
}

func TestAWaveStartedAgainOverItsMovesOnRecordReportsAMoveUndoneWhole(t *testing.T) {
	s := wave2EditedBack(t)
	c := &s.snap.Workloads[2]
	stamp, err := time.Parse(time.RFC3339, c.TemplateAnnotations[AnnotationRestartedAt])
	require.NoError(t, err)
	c.RolledOutRestart = stamp // its ReplicaSet keeps the stamp
	delete(c.Annotations, AnnotationMove)
	delete(c.TemplateAnnotations, AnnotationRestartedAt)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Empty(t, d.Moves, "c is not restarted a second time")
	require.NotNil(t, d.Status)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, "the move of deployment c was undone by someone")
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
}
