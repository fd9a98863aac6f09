package canary

import (
	"slices"
	"time"
)

// WaveUnderTest is the input of the gates: the wave in flight, once every
// member carries the record of its move.
type WaveUnderTest struct {
	Namespace      string
	Wave           int
	TargetRevision string
	SourceRevision string
	// Expect is the revision the members' new pods must run: the target,
	// or the source while rolling back.
	Expect string
	// Ambient is true when the members' new pods must run no sidecar and
	// be enrolled in ambient mode: a wave of a move to ambient, not its
	// rollback, which expects Expect's sidecar again.
	Ambient  bool
	Rollback bool
	// Waypoint is the namespace's istio.io/use-waypoint on a wave into
	// ambient, and WaypointPods the live pods istiod deployed for it:
	// their proxies must be in sync with the target's istiod, as a
	// sidecar's. Empty without one.
	Waypoint     string
	WaypointPods []Pod
	// Workloads are the members still under test.
	Workloads []WaveWorkload
	// Unmoved are the object names of the namespace's workloads that this
	// migration has not restarted, in name order: what a metric check may
	// compare the wave's workloads with.
	Unmoved []string
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

// WaveToVerify returns the wave of the status the decision goes on from
// whose gates should be evaluated now, if any: a wave being verified or
// rolled back whose every member has been patched. None while patches are
// outstanding, while a rollback asked waits to be taken, or when the
// status was rebuilt from the move records (the decision writes that
// first).
func (r Reading) WaveToVerify() (WaveUnderTest, bool) {
	st := r.Status
	if !r.OptedIn || r.Standing != StandingKept || st == nil || st.GatesSince == nil {
		return WaveUnderTest{}, false
	}
	if _, ok := r.Snapshot.Namespace.Annotations[AnnotationRollback]; ok {
		return WaveUnderTest{}, false
	}
	set, cfg := r.records(), r.cfg
	out := WaveUnderTest{
		Namespace: r.Snapshot.Namespace.Name, Wave: st.Wave,
		TargetRevision: st.TargetRevision, SourceRevision: st.SourceRevision,
		GatesSince: *st.GatesSince,
	}
	if st.Analysis != nil {
		out.Analysis = *st.Analysis
	}
	members, ok := waveMembers(set, st)
	if !ok || len(members) == 0 {
		return WaveUnderTest{}, false
	}
	out.Expect, out.Rollback, out.Ambient = st.TargetRevision, false, st.Mode == ModeAmbient
	if st.Phase == PhaseRollingBack {
		out.Expect, out.Rollback, out.Ambient = st.SourceRevision, true, false
	}
	if name := r.Snapshot.Namespace.Labels[LabelUseWaypoint]; out.Ambient && name != "" && name != NoWaypoint {
		out.Waypoint, out.WaypointPods = name, waypointPods(&r.Snapshot, name)
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
	// Istio names a workload's series by its object's name alone: a
	// workload that shares its name with one this migration restarted
	// cannot be told from it.
	restarted := func(w parsedWorkload) bool {
		return w.forwardIn(st.MigrationID()) != nil || w.rolledBackIn(st.MigrationID()) != nil
	}
	taken := map[string]bool{}
	for _, w := range set {
		if restarted(w) {
			taken[w.ObjectName()] = true
		}
	}
	for _, w := range out.Workloads {
		taken[w.ObjectName()] = true
	}
	for _, w := range set {
		if !taken[w.ObjectName()] {
			out.Unmoved = append(out.Unmoved, w.ObjectName())
		}
	}
	slices.Sort(out.Unmoved)
	out.Unmoved = slices.Compact(out.Unmoved)
	return out, true
}

// waveMembers are the members of the wave under test, once every one
// carries the record of its move (or, rolling back, of its rollback);
// ok is false while one does not, or when no wave is under test.
func waveMembers(set workloadSet, st *Status) ([]parsedWorkload, bool) {
	var members []parsedWorkload
	switch {
	case (st.Phase == PhaseMigrating || st.Phase == PhaseAnalyzing) && st.WaveState == WaveVerifying:
		for _, m := range st.Workloads {
			if m.State != StateMoving {
				continue
			}
			w, ok := set.find(m.Name)
			if !ok || w.movedIn(st.MigrationID()) == nil {
				return nil, false
			}
			members = append(members, w)
		}
	case st.Phase == PhaseRollingBack && st.WaveState == WaveRollingBack:
		members = rollbackMembers(set, st)
		for _, w := range members {
			if w.rolledBackIn(st.MigrationID()) == nil {
				return nil, false
			}
		}
	default:
		return nil, false
	}
	return members, true
}
