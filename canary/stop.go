package canary

import "fmt"

// stop handles a namespace whose target annotation is gone: an unfinished
// migration stops where it is; nothing is undone.
func stop(m *machine) {
	prev := m.r.Recorded
	if prev == nil || prev.Phase == PhaseStopped {
		return
	}
	st := prev.DeepCopy()
	m.st = st
	if terminal(prev.Phase) {
		if !m.in.WasOptedIn {
			// A finished migration's status on a namespace that was not
			// opted in when meshwave last looked: an old one, left alone.
			return
		}
		// The target of a finished migration was just removed: the next
		// opt-in starts again (a retry after a rollback).
		st.Phase = PhaseStopped
		st.WaitsForRing = false
		st.Reason = fmt.Sprintf("%s was removed after the migration ended %s: %s", AnnotationTargetRevision, prev.Phase, prev.Reason)
		m.event("", EventNormal, "Stopped", st.Reason)
		m.out.Status = st
		return
	}
	st.Phase = PhaseStopped
	st.WaitsForRing = false
	st.BlockedPhase = ""
	// No wave waits any more, for its delay or its window.
	st.NextWaveAt, st.NextWindow = nil, nil
	if st.Wave == 0 {
		st.Reason = AnnotationTargetRevision + " was removed before the first wave; nothing was changed"
	} else {
		st.Reason = fmt.Sprintf("%s was removed: the migration stopped at wave %d of %d and nothing was undone", AnnotationTargetRevision, st.Wave, st.TotalWaves)
	}
	m.event("", EventNormal, "Stopped", st.Reason)
	m.out.Status = st
}
