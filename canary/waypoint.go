package canary

import (
	"fmt"
	"slices"
)

// The labels and class of Istio's waypoints.
const (
	// LabelUseWaypoint on a namespace sends the traffic to its pods in
	// ambient through the named waypoint.
	LabelUseWaypoint = "istio.io/use-waypoint"
	// LabelGatewayName is on every pod istiod deploys for a Gateway.
	LabelGatewayName = "gateway.networking.k8s.io/gateway-name"
	// WaypointClass is the GatewayClass of Istio's waypoints.
	WaypointClass = "istio-waypoint"
)

// waypointProblem says why the namespace's waypoint (meshwave.io/waypoint)
// cannot carry the move to ambient, or "". passing is true for what
// clears by itself (not Programmed yet, no Ready pod yet), false for what
// a person must change.
func waypointProblem(m *machine) (why string, passing bool) {
	name := m.settings.Waypoint
	if name == "" {
		return "", false
	}
	snap := m.snap()
	ns, c := snap.Namespace, snap.Compat
	if cur, ok := ns.Labels[LabelUseWaypoint]; ok && cur != name {
		return fmt.Sprintf("namespace %s is labelled %s=%s, but %s names %s: remove one of them", ns.Name, LabelUseWaypoint, cur, AnnotationWaypoint, name), false
	}
	if !c.GatewayAPI {
		return fmt.Sprintf("%s=%s needs the Gateway API, and the cluster serves no gateways.gateway.networking.k8s.io: install the Gateway API CRDs", AnnotationWaypoint, name), false
	}
	i := slices.IndexFunc(c.Gateways, func(g Gateway) bool { return g.Name == name })
	if i < 0 {
		return fmt.Sprintf("%s=%s: namespace %s has no Gateway %s; create one of class %s (istioctl waypoint apply -n %s --name %s --revision %s)",
			AnnotationWaypoint, name, ns.Name, name, WaypointClass, ns.Name, name, m.st.TargetRevision), false
	}
	gw := c.Gateways[i]
	if gw.Class != WaypointClass {
		return fmt.Sprintf("%s=%s: Gateway %s is of class %q, not %s: it is no waypoint", AnnotationWaypoint, name, name, gw.Class, WaypointClass), false
	}
	// The Gateway must name its revision itself: the namespace's
	// istio.io/rev, which would deploy it otherwise, goes when the
	// namespace is enrolled.
	if rev, ok := snap.Mesh.Resolve(gw.Revision); gw.Revision == "" || !ok || rev != m.st.TargetRevision {
		has := "no " + LabelRev + " label"
		if gw.Revision != "" {
			has = LabelRev + "=" + gw.Revision
		}
		return fmt.Sprintf("waypoint %s carries %s: label the Gateway %s=%s, so the target's istiod deploys and serves it whatever the namespace's label says", name, has, LabelRev, m.st.Target), false
	}
	if !gw.Programmed {
		return fmt.Sprintf("waypoint %s is not Programmed yet (%s)", name, gw.ProgrammedWhy), true
	}
	pods := waypointPods(snap, name)
	ready := 0
	for _, p := range pods {
		if p.Ready {
			ready++
		}
	}
	if ready == 0 {
		return fmt.Sprintf("waypoint %s has no Ready pod (%d pods)", name, len(pods)), true
	}
	return "", false
}

// waypointPods are the live pods istiod deployed for the waypoint name.
func waypointPods(snap *Snapshot, name string) []Pod {
	var out []Pod
	for _, w := range snap.Workloads {
		for _, p := range w.Pods {
			if !p.Terminating && p.Labels[LabelGatewayName] == name {
				out = append(out, p)
			}
		}
	}
	return out
}

// useWaypoint puts the namespace behind its waypoint as a wave of a move
// to ambient starts: Istio's step 2 comes before any pod leaves its
// sidecar. A label a person set already stays theirs.
func useWaypoint(m *machine) {
	name, ns := m.settings.Waypoint, m.snap().Namespace
	if m.st.Mode != ModeAmbient || name == "" || ns.Labels[LabelUseWaypoint] == name {
		return
	}
	m.out.UseWaypoint, m.st.WaypointSet = name, name
	m.event("", EventNormal, "WaypointUsed", fmt.Sprintf("namespace %s is labelled %s=%s before its workloads leave their sidecars", ns.Name, LabelUseWaypoint, name))
}

// releaseWaypoint takes off the istio.io/use-waypoint meshwave set, once
// a rollback ended with no pod of the namespace left in ambient. A label
// changed since is a person's and stays.
func releaseWaypoint(m *machine) {
	st, ns := m.st, m.snap().Namespace
	if st.WaypointSet == "" || st.Phase != PhaseRolledBack {
		return
	}
	for _, w := range m.snap().Workloads {
		for _, p := range w.Pods {
			if !p.Terminating && p.InAmbient() {
				return // an earlier wave stays in ambient, behind it
			}
		}
	}
	if ns.Labels[LabelUseWaypoint] == st.WaypointSet {
		m.out.RemoveWaypoint = true
		m.event("", EventNormal, "WaypointReleased", fmt.Sprintf("no pod of namespace %s runs in ambient any more: %s=%s, which meshwave set, is taken off", ns.Name, LabelUseWaypoint, st.WaypointSet))
	}
	st.WaypointSet = ""
}
