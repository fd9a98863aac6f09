package analysis

import (
	"fmt"
	"slices"

	"github.com/meshwave/meshwave/canary"
)

// waypointWave is a wave into ambient as its waypoint's proxies are
// judged: like a sidecar wave of one workload, the waypoint, whose every
// live pod must be connected to the target's istiod and in sync. It asks
// istiod about the wave's namespace, where the waypoint runs, and never
// the source's: a waypoint is deployed by one revision.
func waypointWave(wave canary.WaveUnderTest) canary.WaveUnderTest {
	pods := make([]canary.Pod, 0, len(wave.WaypointPods))
	for _, p := range wave.WaypointPods {
		p.Current = true
		pods = append(pods, p)
	}
	return canary.WaveUnderTest{
		Namespace: wave.Namespace, Wave: wave.Wave, TargetRevision: wave.TargetRevision, Expect: wave.TargetRevision,
		GatesSince: wave.GatesSince, Analysis: wave.Analysis,
		Workloads: []canary.WaveWorkload{{Workload: canary.Workload{Namespace: wave.Namespace, Name: "waypoint " + wave.Waypoint, Pods: pods}}},
	}
}

// severity orders results: a combined verdict is its worse part's.
var severity = map[canary.Result]int{canary.ResultPass: 0, canary.ResultPending: 1, canary.ResultInconclusive: 2, canary.ResultFail: 3}

// withWaypoint joins the ztunnels' verdict of a wave and its waypoint's:
// the worse result, both reasons, and a waypoint that failed fails every
// member of the wave, whose traffic it carries.
func withWaypoint(v, w canary.Verdict, wave canary.WaveUnderTest) canary.Verdict {
	out := v
	if severity[w.Result] > severity[v.Result] {
		out.Result = w.Result
	}
	if len(wave.WaypointPods) == 0 {
		w.Reason = fmt.Sprintf("no live pod of waypoint %s", wave.Waypoint)
		out.Result = worse(out.Result, canary.ResultInconclusive)
	}
	out.Reason = fmt.Sprintf("%s; waypoint %s: %s", v.Reason, wave.Waypoint, w.Reason)
	for _, m := range w.Measurements {
		m.Check = "waypoint-" + m.Check
		out.Measurements = append(out.Measurements, m)
	}
	if w.RetryAfter > 0 && (out.RetryAfter == 0 || w.RetryAfter < out.RetryAfter) {
		out.RetryAfter = w.RetryAfter
	}
	out.Checked = v.Checked || w.Checked
	if w.Result == canary.ResultFail {
		for _, m := range wave.Workloads {
			why := fmt.Sprintf("waypoint %s: %s", wave.Waypoint, w.Reason)
			if i := slices.IndexFunc(out.Failed, func(f canary.WorkloadState) bool { return f.Name == m.Name }); i >= 0 {
				out.Failed[i].Reason += "; " + why
				continue
			}
			out.Failed = append(out.Failed, canary.WorkloadState{Name: m.Name, State: canary.StateFailed, Reason: why})
		}
	}
	return out
}

func worse(a, b canary.Result) canary.Result {
	if severity[b] > severity[a] {
		return b
	}
	return a
}
