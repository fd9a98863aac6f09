package canary

import "time"

// WaveUnderTest is the input of the gates: the wave in flight, once every
// member carries the record of its move.
type WaveUnderTest struct {
	Namespace      string
	Wave           int
	TargetRevision string
	SourceRevision string
	// Expect is the revision the members' new pods must run: the target,
	// or the source while rolling back.
	Expect   string
	Rollback bool
	// Workloads are the members still under test.
	Workloads []WaveWorkload
	// GatesSince is when the gates' timeouts started counting.
	GatesSince time.Time
	// Analysis is the gates' progress so far.
	Analysis AnalysisState
}

// WaveWorkload is a member of the wave under test.
type WaveWorkload struct {
	Workload
	Record MoveRecord
	// Deadline is when the member must have rolled out: its readiness
	// timeout after the later of its restart and GatesSince.
	Deadline time.Time
	// Timeout is that readiness timeout.
	Timeout time.Duration
}

// WaveToVerify returns the wave whose gates should be evaluated now, if
// any: a wave being verified or rolled back whose every member has been
// patched. While patches are outstanding, it returns false.
func WaveToVerify(snap Snapshot, st *Status, cfg Config) (WaveUnderTest, bool) {
	if st == nil || st.GatesSince == nil {
		return WaveUnderTest{}, false
	}
	if _, ok := snap.Namespace.Annotations[AnnotationRollback]; ok {
		return WaveUnderTest{}, false
	}
	set, _ := parseWorkloads(snap.Workloads)
	if _, why := recordConflict(set, st, "", false); why != "" {
		// The decision rebuilds the status from the records first.
		return WaveUnderTest{}, false
	}
	cfg = cfg.WithDefaults()
	out := WaveUnderTest{
		Namespace: snap.Namespace.Name, Wave: st.Wave,
		TargetRevision: st.TargetRevision, SourceRevision: st.SourceRevision,
		GatesSince: *st.GatesSince,
	}
	if st.Analysis != nil {
		out.Analysis = *st.Analysis
	}
	var members []parsedWorkload
	switch {
	case (st.Phase == PhaseMigrating || st.Phase == PhaseAnalyzing) && st.WaveState == WaveVerifying:
		out.Expect = st.TargetRevision
		for _, m := range st.Workloads {
			if m.State != StateMoving {
				continue
			}
			w, ok := set.find(m.Name)
			if !ok {
				return WaveUnderTest{}, false
			}
			if w.movedIn(st.MigrationID()) == nil {
				return WaveUnderTest{}, false
			}
			members = append(members, w)
		}
	case st.Phase == PhaseRollingBack && st.WaveState == WaveRollingBack:
		out.Expect, out.Rollback = st.SourceRevision, true
		members = rollbackMembers(set, st)
		for _, w := range members {
			if w.rolledBackIn(st.MigrationID()) == nil {
				return WaveUnderTest{}, false
			}
		}
	default:
		return WaveUnderTest{}, false
	}
	if len(members) == 0 {
		return WaveUnderTest{}, false
	}
	for _, w := range members {
		// Every member carries a record: of this move, or of this rollback.
		rec := *w.record
		start := rec.At
		if out.GatesSince.After(start) {
			start = out.GatesSince
		}
		timeout := cfg.readinessTimeoutOf(w.settings)
		out.Workloads = append(out.Workloads, WaveWorkload{Workload: *w.Workload, Record: rec, Deadline: start.Add(timeout), Timeout: timeout})
	}
	return out, true
}
