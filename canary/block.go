package canary

import "strings"

// block blocks the namespace on invalid input: the status says what is
// wrong, with an Event per problem, and nothing else is written until it
// is fixed. It reports whether it blocked.
func block(m *machine) bool {
	reportIgnored(m)
	errs := m.r.Errors
	if len(errs) == 0 {
		return false
	}
	if m.st.Wave > 0 && m.st.Phase == PhaseBlocked {
		// Blocked half-way, meshwave still keeps its label: a revert is
		// counted as outside a block, or the fight with a self-heal would
		// never end.
		labelReverted(m)
	}
	blockInvalid(m, errs)
	return true
}

func blockInvalid(m *machine, errs []InputError) {
	st, prev := m.st, m.r.Recorded
	if st.Phase != PhaseBlocked && st.Phase != PhasePending {
		st.BlockedPhase = st.Phase
	}
	st.Phase, st.BlockedKind = PhaseBlocked, BlockedInvalidInput
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	st.Reason = cut("invalid input: "+strings.Join(msgs, "; "), maxReason)
	if prev != nil && prev.Phase == PhaseBlocked && prev.Reason == st.Reason {
		return
	}
	for _, e := range errs {
		m.event(e.Workload, EventWarning, "InvalidAnnotation", e.Error())
	}
	if len(errs) > 0 && errs[0].Workload != "" {
		m.event("", EventWarning, "InvalidAnnotation", st.Reason)
	}
}

// blockPrecheck blocks the namespace on a failed precheck; one that may
// fix itself (retry) is looked at again after PrecheckRetry.
func blockPrecheck(m *machine, reason string, retry bool) {
	st := m.st
	st.Phase, st.BlockedKind = PhaseBlocked, BlockedPrecheck
	st.Reason = "precheck failed: " + reason
	if prev := m.r.Recorded; prev == nil || prev.Reason != st.Reason {
		m.event("", EventWarning, "PrecheckFailed", reason)
	}
	if retry {
		m.requeue(m.cfg.PrecheckRetry)
	}
}
