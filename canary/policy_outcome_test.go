package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
