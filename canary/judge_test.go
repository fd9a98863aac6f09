package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestMetricChecksNeedConsecutivePasses(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.RequiredPasses = 2
	s.cfg.AnalysisInterval = 15 * time.Second
	s.decide(nil)
	s.rollOut("1-26", "a")
	ok := Verdict{Gate: "error-rate", Result: ResultPass, Analysis: true, Checked: true, Reason: "0.1% <= 5%"}
	d := s.decide([]Verdict{pass("rollout"), ok})
	assert.Equal(t, PhaseAnalyzing, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Analysis.ConsecutivePasses)
	assert.Equal(t, 15*time.Second, d.RequeueAfter)
	assert.Equal(t, map[string]time.Time{"error-rate": t0}, d.Status.Analysis.Checked)

	deferred := Verdict{Gate: "error-rate", Result: ResultPending, Analysis: true, Deferred: true, RetryAfter: 7 * time.Second}
	s.now = s.now.Add(8 * time.Second)
	d = s.decide([]Verdict{pass("rollout"), deferred})
	assert.Nil(t, d.Status, "a check that was not due changes nothing")
	assert.Equal(t, 7*time.Second, d.RequeueAfter)

	s.now = s.now.Add(7 * time.Second)
	d = s.decide([]Verdict{pass("rollout"), ok})
	assert.Equal(t, WavePassed, d.Status.WaveState)
}

func TestInconclusiveResultsAreRetriedThenPause(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	low := Verdict{Gate: "error-rate", Result: ResultInconclusive, Analysis: true, Checked: true, Reason: "12 requests < minimum 50", RetryAfter: 10 * time.Second}
	chain := []Verdict{pass("rollout"), pass("injection"), pass("xds-sync"), low}
	for i := 1; i <= 2; i++ {
		d := s.decide(chain)
		assert.Equal(t, PhaseAnalyzing, d.Status.Phase)
		assert.Equal(t, i, d.Status.Analysis.Inconclusive)
		assert.Equal(t, 10*time.Second, d.RequeueAfter)
		s.now = s.now.Add(10 * time.Second)
	}
	d := s.decide(chain)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, "wave 1 paused: error-rate inconclusive 3 times: 12 requests < minimum 50", d.Status.Reason)
	assert.True(t, d.SetPaused)
	assert.Empty(t, d.Moves)
	assert.Equal(t, 1, s.patches["a"])
	assert.Zero(t, s.patches["b"], "an inconclusive wave never advances")
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

// A sequential check's pass stands on its evidence: the wave passes on it
// at once, where a threshold check's pass needs others in a row.
func TestAFinalPassOfEveryMetricCheckPassesTheWaveAtOnce(t *testing.T) {
	final := Verdict{Gate: "error-rate", Result: ResultPass, Analysis: true, Checked: true, Final: true, Reason: "evidence 41 >= 40"}
	threshold := Verdict{Gate: "latency-p99", Result: ResultPass, Analysis: true, Checked: true, Reason: "40ms <= 1000ms"}

	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.RequiredPasses = 2
	s.decide(nil)
	s.rollOut("1-26", "a")
	d := s.decide([]Verdict{pass("rollout"), final})
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.True(t, d.Status.Verdicts[len(d.Status.Verdicts)-1].Final, "the status keeps that the pass was final")

	s = newSim(t, deploy("a"), deploy("b"))
	s.cfg.RequiredPasses = 2
	s.decide(nil)
	s.rollOut("1-26", "a")
	d = s.decide([]Verdict{pass("rollout"), final, threshold})
	assert.Equal(t, PhaseAnalyzing, d.Status.Phase, "a threshold check beside it still needs its passes")
	assert.Equal(t, 1, d.Status.Analysis.ConsecutivePasses)
}
