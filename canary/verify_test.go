package canary

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A metric check may compare the wave's workloads with those this
// migration has not restarted: never with a member, nor with a workload
// moved in an earlier wave, nor with one whose series Istio would name as
// one of theirs.
func TestTheWaveUnderTestNamesTheWorkloadsThisMigrationHasNotRestarted(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("a", kind(KindDaemonSet)))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 1}
	s.decide(nil)
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	require.Equal(t, []string{"a"}, memberNames(w.Workloads))
	assert.Equal(t, []string{"b", "c"}, w.Unmoved, "DaemonSet/a's series are named a, as the member's are")

	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(s.cfg.DelayBetweenWaves)
	s.decide(s.gates())
	w, ok = waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	require.Equal(t, 2, w.Wave)
	require.Equal(t, []string{"b"}, memberNames(w.Workloads))
	assert.Equal(t, []string{"c"}, w.Unmoved, "a was moved in wave 1, and DaemonSet/a's series carry its name")
}

func memberNames(ws []WaveWorkload) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return out
}
