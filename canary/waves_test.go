package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
