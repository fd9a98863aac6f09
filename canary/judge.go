package canary

import (
	"fmt"
	"time"
)

// judge applies the gate verdicts to the wave in flight: its bake time
// and analysis state, then a pass (once the metric checks passed enough
// times in a row), a failure, or a pause after too many inconclusive
// results.
func judge(m *machine) step {
	st := m.st
	verdicts := m.in.Verdicts
	if verdicts == nil {
		m.requeue(backstop)
		return nil
	}
	v, notPassed := FirstNotPassed(verdicts)
	if !notPassed || v.Analysis {
		markReady(m, verdicts)
	}
	if st.Analysis != nil && st.Analysis.ReadyAt != nil {
		st.Phase = PhaseAnalyzing
	} else {
		st.Phase = PhaseMigrating
	}
	verdicts = carryForward(verdicts, st.Verdicts)
	recordChecks(m, verdicts)
	if notPassed && v.Result == ResultPending && !v.Checked {
		// Progress (a rollout under way, a bake time running) is not
		// written: it would cost a status write per pod that becomes
		// ready, and the outcome is what people read. An OnDelete member
		// rolls out only as its pods are evicted.
		evictions(m, moving(m), st.targetPlace(), false)
		m.requeue(v.RetryAfter)
		return nil
	}
	st.Verdicts = trimVerdicts(verdicts)
	if !notPassed {
		resetInconclusive(st)
		if hasAnalysis(verdicts) && !allFinal(verdicts) {
			a := analysisState(st)
			a.ConsecutivePasses++
			if a.ConsecutivePasses < m.cfg.RequiredPasses {
				m.requeue(m.cfg.AnalysisInterval)
				return nil
			}
		}
		return passWave
	}
	if v.Analysis && v.Result != ResultPending {
		analysisState(st).ConsecutivePasses = 0
	}
	switch v.Result {
	case ResultPending:
		m.requeue(v.RetryAfter)
	case ResultInconclusive:
		a := analysisState(st)
		a.Inconclusive++
		if a.Inconclusive >= m.cfg.InconclusiveLimit {
			st.WaveState = WaveFailed
			pause(m, fmt.Sprintf("wave %d paused: %s inconclusive %d times: %s", st.Wave, v.Gate, a.Inconclusive, v.Reason))
			return nil
		}
		m.requeue(v.RetryAfter)
	case ResultFail:
		resetInconclusive(st)
		return failWave(v)
	}
	return nil
}

// markReady notes that every gate before the metric checks passed: the
// wave is up, and its bake time counts from the first time that is seen.
// Those gates' verdicts are kept, with their numbers.
func markReady(m *machine, verdicts []Verdict) {
	a := analysisState(m.st)
	if a.ReadyAt != nil {
		return
	}
	a.ReadyAt = timePtr(m.now)
	var ready []Verdict
	for _, x := range verdicts {
		if !x.Analysis {
			ready = append(ready, x)
		}
	}
	m.st.Verdicts = trimVerdicts(ready)
}

// recordChecks remembers when each gate was first reached and when each
// outside system was last asked.
func recordChecks(m *machine, verdicts []Verdict) {
	for _, v := range verdicts {
		a := analysisState(m.st)
		if _, ok := a.Started[v.Gate]; !ok && !v.Deferred {
			if a.Started == nil {
				a.Started = map[string]time.Time{}
			}
			a.Started[v.Gate] = m.now
		}
		if !v.Checked {
			continue
		}
		if a.Checked == nil {
			a.Checked = map[string]time.Time{}
		}
		a.Checked[v.Gate] = m.now
	}
}

// carryForward replaces a deferred pass (a gate not asked again) with the
// verdict it gave when it was asked, so the status keeps its numbers.
func carryForward(verdicts, previous []Verdict) []Verdict {
	out := make([]Verdict, len(verdicts))
	for i, v := range verdicts {
		out[i] = v
		if v.Result != ResultPass || !v.Deferred {
			continue
		}
		for _, p := range previous {
			if p.Gate == v.Gate && p.Result == ResultPass {
				out[i] = p
			}
		}
	}
	return out
}

func hasAnalysis(vs []Verdict) bool {
	for _, v := range vs {
		if v.Analysis {
			return true
		}
	}
	return false
}

// allFinal reports whether every metric check's verdict is final: a
// sequential check's pass stands on its evidence, and another run in a row
// would add nothing to it.
func allFinal(vs []Verdict) bool {
	for _, v := range vs {
		if v.Analysis && !v.Final {
			return false
		}
	}
	return true
}

func analysisState(st *Status) *AnalysisState {
	if st.Analysis == nil {
		st.Analysis = &AnalysisState{}
	}
	return st.Analysis
}

func resetInconclusive(st *Status) {
	if st.Analysis != nil {
		st.Analysis.Inconclusive = 0
	}
}

// trimVerdicts keeps the status small: at most five measurements per
// verdict, the worst first as the gates order them.
func trimVerdicts(vs []Verdict) []Verdict {
	out := make([]Verdict, len(vs))
	for i, v := range vs {
		if len(v.Measurements) > 5 {
			v.Measurements = v.Measurements[:5]
		}
		if len(v.Failed) > 5 {
			v.Failed = v.Failed[:5]
		}
		out[i] = v
	}
	return out
}
