package canary

import "fmt"

// failWave records the wave's failed workloads (those v names, else every
// member still moving) and applies the failure policy: RollbackWave rolls
// the wave back, Pause pauses it, Continue goes on while the failures stay
// within maxFailedPercent.
func failWave(v Verdict) step {
	return func(m *machine) step {
		summary := markFailed(m, v)
		st := m.st
		switch policy(m) {
		case PolicyRollbackWave:
			return rollBack(RollbackWave, summary)
		case PolicyPause:
			st.WaveState = WaveFailed
			pause(m, summary+"; paused by failure policy Pause")
			return nil
		case PolicyContinue:
			return tolerate(m, summary)
		}
		return nil
	}
}

// markFailed marks the members v failed, each with a failure and an
// Event, and returns the wave's summary.
func markFailed(m *machine, v Verdict) string {
	st := m.st
	failed := map[string]string{}
	for _, f := range v.Failed {
		failed[f.Name] = f.Reason
	}
	if len(failed) == 0 {
		for _, w := range st.Workloads {
			if w.State == StateMoving {
				failed[w.Name] = v.Reason
			}
		}
	}
	for i, w := range st.Workloads {
		reason, ok := failed[w.Name]
		if !ok || w.State != StateMoving {
			continue
		}
		st.Workloads[i].State, st.Workloads[i].Reason = StateFailed, reason
		st.addFailure(Failure{Workload: w.Name, Wave: st.Wave, Gate: v.Gate, Reason: reason, At: m.now})
		m.event(w.Name, EventWarning, "WorkloadFailed", fmt.Sprintf("wave %d, %s: %s", st.Wave, v.Gate, reason))
	}
	return fmt.Sprintf("wave %d failed: %s", st.Wave, v)
}

// tolerate applies the Continue policy: within maxFailedPercent the failed
// members stay where they are (their records say so) and the wave goes
// on; over it, the namespace pauses.
func tolerate(m *machine, summary string) step {
	st := m.st
	total := eligible(m)
	nFailed := st.PastFailed + countMembers(st, StateFailed)
	pct := 100 * float64(nFailed) / float64(max(total, 1))
	if pct > m.cfg.MaxFailedPercent {
		st.WaveState = WaveFailed
		pause(m, fmt.Sprintf("%s; %d of %d workloads failed (%.0f%%), over maxFailedPercent %g", summary, nFailed, total, pct, m.cfg.MaxFailedPercent))
		return nil
	}
	m.event("", EventWarning, "FailureTolerated", fmt.Sprintf("%s; %d of %d workloads failed (%.0f%%), within maxFailedPercent %g: continuing", summary, nFailed, total, pct, m.cfg.MaxFailedPercent))
	for _, w := range st.Workloads {
		if p, ok := m.workloads().find(w.Name); ok && w.State == StateFailed {
			markOutcome(m, p, OutcomeFailed)
		}
	}
	if countMembers(st, StateMoving) == 0 {
		return passWave
	}
	m.requeue(soon)
	return nil
}

// policy is the failure policy: the namespace's, else the configured one.
func policy(m *machine) FailurePolicy {
	if m.settings.FailurePolicy != "" {
		return m.settings.FailurePolicy
	}
	return m.cfg.FailurePolicy
}

// eligible counts the workloads the migration concerns: those moved or to
// move, and the wave's members not yet recorded as moved.
func eligible(m *machine) int {
	p := m.plan()
	n := p.Remaining() + len(p.Moved) + len(p.Failed)
	moved := map[string]bool{}
	for _, name := range append(p.Moved, p.Failed...) {
		moved[name] = true
	}
	for _, w := range m.st.Workloads {
		if !moved[w.Name] {
			n++
		}
	}
	return n
}
