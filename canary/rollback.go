package canary

import (
	"fmt"
	"strings"
)

// rollBack starts returning the wave (or every moved workload) to the
// source, and goes on to send the rollback's restarts.
func rollBack(scope RollbackScope, why string) step {
	return func(m *machine) step {
		st := m.st
		m.out.ClearRollback = m.settings.Rollback != RollbackNone
		m.rollbackTaken = m.out.ClearRollback
		st.Phase, st.Rollback, st.WaveState = PhaseRollingBack, scope, WaveRollingBack
		st.NamespaceEnrolled = false // the rollback takes the namespace out of ambient (ensureLabel)
		st.Reason = why
		st.GatesSince, st.NextWaveAt, st.Analysis = timePtr(m.now), nil, nil
		what := fmt.Sprintf("wave %d", st.Wave)
		if scope == RollbackAll {
			what = "every moved workload"
		}
		m.event("", EventWarning, "RollingBack", fmt.Sprintf("rolling back %s to %s: %s", what, st.SourceLabel, why))
		return rollingBack
	}
}

// rollingBack restarts every member of the rollback still on the target
// onto the source, then judges the rollback's gates: it ends RolledBack
// when they pass, and pauses when one fails or stays inconclusive.
func rollingBack(m *machine) step {
	st := m.st
	rollbackAsked(m)
	members := rollbackMembers(m.workloads(), st)
	issued, refused := rollbackRestarts(m, members)
	switch {
	case len(refused) > 0:
		pause(m, fmt.Sprintf("rollback to %s did not complete: %s", st.SourceRevision, strings.Join(refused, "; ")))
		return nil
	case issued:
		return nil
	case len(members) == 0:
		// Nothing of this migration is left to return: every member is
		// gone, skipped or paused.
		st.Phase, st.WaveState = PhaseRolledBack, ""
		st.CompletedAt = timePtr(m.now)
		st.Reason = fmt.Sprintf("rolled back 0 workloads to %s (none of this migration's workloads is left to return): %s", st.SourceRevision, st.Reason)
		m.event("", EventWarning, "RolledBack", st.Reason)
		return nil
	}
	judgeRollback(m, members)
	return nil
}

// rollbackAsked takes a rollback a person asks for while one runs at
// once: one for everything widens a wave's rollback; any other is
// already done.
func rollbackAsked(m *machine) {
	st := m.st
	req := m.settings.Rollback
	if req == RollbackNone || m.rollbackTaken {
		return
	}
	m.out.ClearRollback = true
	if req == RollbackAll && st.Rollback == RollbackWave {
		st.Rollback = RollbackAll
		st.Reason = "requested with " + AnnotationRollback + "=all during a rollback of wave " + fmt.Sprint(st.Wave) + ": " + st.Reason
		m.event("", EventWarning, "RollingBack", fmt.Sprintf("rolling back every moved workload to %s: requested with %s=all", st.SourceLabel, AnnotationRollback))
	} else {
		m.event("", EventNormal, "RollbackIgnored", fmt.Sprintf("a rollback of %s is already in progress", st.Rollback))
	}
}

// rollbackRestarts lists the rollback's members in the status (with how
// far the eviction of their pods got) and restarts those still carrying
// their forward move. It reports whether it restarted any, and the
// restarts the apiserver refused.
func rollbackRestarts(m *machine, members []parsedWorkload) (issued bool, refused []string) {
	st := m.st
	progress := map[string]string{}
	for _, w := range st.Workloads {
		progress[w.Name] = w.Reason
	}
	st.Workloads = nil
	for _, w := range members {
		if len(st.Workloads) < maxListed {
			st.Workloads = append(st.Workloads, WorkloadState{Name: w.Name, State: StateRolledBack, Reason: progress[w.Name]})
		}
		if !returning(w, st) {
			continue // already rolled back
		}
		wave, prior, waypoint := st.Wave, "", "" // of a move no record explains
		if fwd := w.forwardIn(st.MigrationID()); fwd != nil {
			// The waypoint label meshwave had set when it moved the
			// workload: a status edited since cannot claim one.
			wave, prior, waypoint = fwd.Wave, fwd.PriorInject, fwd.Waypoint
		}
		if answer, ok := m.in.Refused[w.Name]; ok {
			refused = append(refused, fmt.Sprintf("the apiserver refused to restart %s: %s", w.Name, answer))
			continue
		}
		rec := MoveRecord{Revision: st.SourceRevision, From: st.TargetRevision, SourceLabel: st.sourceLabelOnRecord(), Wave: wave, At: m.now, Rollback: true, Migration: st.MigrationID(), Mode: st.Mode, PriorInject: prior, Waypoint: waypoint}
		if st.Rollback == RollbackAll {
			rec.Scope = RollbackAll
		}
		addMove(m, *w.Workload, rec, fmt.Sprintf("rolling back to %s", st.SourceRevision))
		issued = true
	}
	return issued, refused
}

// judgeRollback applies the gates' verdicts to a rollback whose restarts
// are all made.
func judgeRollback(m *machine, members []parsedWorkload) {
	st := m.st
	verdicts := m.in.Verdicts
	if verdicts == nil {
		m.requeue(backstop)
		return
	}
	v, notPassed := FirstNotPassed(verdicts)
	if notPassed && v.Result == ResultPending {
		evictions(m, members, st.sourcePlace(), true)
		m.requeue(v.RetryAfter)
		return
	}
	if !notPassed {
		st.Phase = PhaseRolledBack
		st.WaveState = ""
		for i := range st.Workloads {
			st.Workloads[i].Reason = ""
		}
		st.CompletedAt = timePtr(m.now)
		st.Reason = fmt.Sprintf("rolled back %d workloads to %s: %s", len(members), st.SourceRevision, st.Reason)
		m.event("", EventWarning, "RolledBack", st.Reason)
		return
	}
	// The status keeps the verdicts that led to the rollback; the
	// rollback's own checks show only when they fail.
	st.Verdicts = trimVerdicts(verdicts)
	switch v.Result {
	case ResultFail:
		pause(m, fmt.Sprintf("rollback to %s did not complete: %s", st.SourceRevision, v))
	case ResultInconclusive:
		a := analysisState(st)
		a.Inconclusive++
		if a.Inconclusive >= m.cfg.InconclusiveLimit {
			pause(m, fmt.Sprintf("rollback paused: %s inconclusive %d times: %s", v.Gate, a.Inconclusive, v.Reason))
			return
		}
		m.requeue(v.RetryAfter)
	default:
		m.requeue(v.RetryAfter)
	}
}

// ended handles the terminal phases: a rollback can still be asked of a
// completed migration, and of everything after a wave's rollback.
func ended(m *machine) step {
	st, asked := m.st, m.settings.Rollback
	if asked == RollbackNone {
		return nil
	}
	if st.Phase == PhaseCompleted && st.Wave > 0 {
		return rollBack(asked, "requested with "+AnnotationRollback+"="+string(asked)+" after completion")
	}
	if st.Phase == PhaseRolledBack && st.Rollback != RollbackAll && asked == RollbackAll && anyMoved(m) {
		// A wave's rollback left the earlier waves on the target: all
		// returns them too.
		return rollBack(RollbackAll, "requested with "+AnnotationRollback+"=all after a rollback of wave "+fmt.Sprint(st.Wave))
	}
	m.out.ClearRollback = true
	m.event("", EventNormal, "RollbackIgnored", "nothing to roll back: the namespace is "+string(st.Phase))
	return nil
}

// anyMoved reports whether any workload still carries a forward move of
// this migration.
func anyMoved(m *machine) bool {
	for _, w := range m.workloads() {
		if w.forwardIn(m.st.MigrationID()) != nil {
			return true
		}
	}
	return false
}

// maxListed bounds the workload list of a rollback of everything.
const maxListed = 20

// rollbackMembers are the workloads a rollback returns: with scope wave,
// those moved in the current wave (and any moves recorded in later waves:
// none of them was judged); with scope all, every workload this migration
// moved. Both come from the workloads' records, so the list needs no room
// in the status, and from the restarts no record explains (strayMove). A
// workload that carries meshwave.io/skip, or is paused, is left where it
// is: meshwave never touches the one, and the other would not roll.
func rollbackMembers(set workloadSet, st *Status) []parsedWorkload {
	var out []parsedWorkload
	id := st.MigrationID()
	for _, w := range set {
		if w.settings.Skip || w.Paused {
			continue
		}
		if r := w.record; r != nil && r.Migration == id && id != "" {
			if st.Rollback == RollbackAll || r.Wave >= st.Wave {
				out = append(out, w)
			}
			continue
		}
		if strayMove(w, st) {
			out = append(out, w)
		}
	}
	return out
}

// strayMove reports whether w, which carries no record of st's migration,
// was restarted onto its target all the same: its record was removed (or
// its move undone whole by a GitOps owner), but its template, or a
// rollout of it, carries a restart stamp from the rollback's scope (since
// the wave started; since the migration did, for a rollback of all) that
// no record of its own explains, and a pod of it runs the target. A
// rollback must return it too, or it ends with the workload on the target.
func strayMove(w parsedWorkload, st *Status) bool {
	since := st.WaveStartedAt
	if st.Rollback == RollbackAll || since == nil {
		since = st.StartedAt
	}
	if since == nil || st.MigrationID() == "" {
		return false
	}
	onTarget := false
	for _, p := range w.Pods {
		onTarget = onTarget || !p.Terminating && p.At(st.targetPlace())
	}
	if !onTarget {
		return false
	}
	return restartedSince(*w.Workload, since) && !explainsTemplateStamp(*w.Workload) || memberReverted(*w.Workload, since)
}

// returning reports whether w, a member of the rollback, has still to go
// back: its move is on record, or a restart no record explains shows it.
func returning(w parsedWorkload, st *Status) bool {
	return w.forwardIn(st.MigrationID()) != nil || w.rolledBackIn(st.MigrationID()) == nil && strayMove(w, st)
}
