package canary

import "fmt"

// pause stops the migration for a reason of meshwave's own, and sets
// meshwave.io/paused so that a person resumes it by removing that.
func pause(m *machine, reason string) {
	st := m.st
	st.Phase, st.Reason = PhasePaused, reason
	st.PausedAt = timePtr(m.now)
	st.NextWaveAt = nil
	if !m.settings.Paused {
		m.out.SetPaused = true
		st.PausedByAgent = true
	}
	m.event("", EventWarning, "Paused", reason+"; remove "+AnnotationPaused+" to resume")
}

// pauseByPerson records a pause a person asked for with meshwave.io/paused.
func pauseByPerson(m *machine, reason string) {
	st := m.st
	st.Phase, st.Reason = PhasePaused, reason
	st.PausedAt = timePtr(m.now)
	st.NextWaveAt = nil
	m.event("", EventNormal, "Paused", reason)
}

// paused waits for meshwave.io/paused to go, then resumes where the
// migration stopped: a failed wave is checked again with fresh timers, a
// rollback goes on. A rollback asked while paused is taken at once.
func paused(m *machine) step {
	st := m.st
	if m.settings.Rollback != RollbackNone && st.Wave > 0 {
		resumeClock(m)
		scope := m.settings.Rollback
		if st.WaveState == WaveRollingBack && st.Rollback == RollbackAll {
			scope = RollbackAll // a rollback is widened, never narrowed
		}
		return rollBack(scope, "requested with "+AnnotationRollback+"="+string(m.settings.Rollback))
	}
	if m.settings.Paused {
		return nil
	}
	resumeClock(m)
	st.resumeLabel()
	m.event("", EventNormal, "Resumed", fmt.Sprintf("%s was removed; resuming at wave %d", AnnotationPaused, st.Wave))
	st.Reason, st.PausedByAgent = "", false
	if st.Wave == 0 {
		st.Phase = PhasePending
		return pending
	}
	switch st.WaveState {
	case WaveFailed:
		for i, w := range st.Workloads {
			if w.State == StateFailed {
				st.Workloads[i].State, st.Workloads[i].Reason = StateMoving, ""
			}
		}
		st.WaveState = WaveVerifying
		st.GatesSince, st.Analysis = timePtr(m.now), nil
	case WaveVerifying:
		// Paused before its restarts were all made (held, or a move
		// undone): its timers start again, and a move undone and
		// reported before now may be made again.
		st.GatesSince = timePtr(m.now)
	case WaveRollingBack:
		st.Phase = PhaseRollingBack
		st.GatesSince, st.Analysis = timePtr(m.now), nil
		return rollingBack
	case WavePassed:
		st.NextWaveAt = timePtr(m.now)
	}
	st.Phase = PhaseMigrating
	return migrating
}

// resumeClock adds the pause just ended to the time spent paused.
func resumeClock(m *machine) {
	st := m.st
	if st.PausedAt != nil {
		// A pausedAt after now (an edited status, a clock that moved) adds
		// nothing rather than a negative time.
		st.PausedSeconds += max(0, m.now.Sub(*st.PausedAt).Seconds())
		st.PausedAt = nil
	}
}
