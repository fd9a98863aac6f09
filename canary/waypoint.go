package canary

import (
	"fmt"
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
	// LabelUseWaypointNamespace on a namespace sends its traffic to the
	// waypoint of that name in another namespace.
	LabelUseWaypointNamespace = "istio.io/use-waypoint-namespace"
	// LabelWaypointFor on a waypoint's Gateway says which traffic it
	// takes: service (the default), workload, all or none.
	LabelWaypointFor = "istio.io/waypoint-for"
	// NoWaypoint is istio.io/use-waypoint's value that opts out of any.
	NoWaypoint = "none"
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
	if other, ok := ns.Labels[LabelUseWaypointNamespace]; ok && other != ns.Name {
		return fmt.Sprintf("namespace %s is labelled %s=%s: its traffic would go to a waypoint of namespace %s, not to Gateway %s of its own that %s names; remove the label", ns.Name, LabelUseWaypointNamespace, other, other, name, AnnotationWaypoint), false
	}
	if !c.GatewayAPI {
		return fmt.Sprintf("%s=%s needs the Gateway API, and the cluster serves no gateways.gateway.networking.k8s.io: install the Gateway API CRDs", AnnotationWaypoint, name), false
	}
	gw, ok := c.gateway(name)
	if !ok {
		return fmt.Sprintf("%s=%s: namespace %s has no Gateway %s; create one of class %s (istioctl waypoint apply -n %s --name %s --revision %s)",
			AnnotationWaypoint, name, ns.Name, name, WaypointClass, ns.Name, name, m.st.TargetRevision), false
	}
	if gw.Class != WaypointClass {
		return fmt.Sprintf("%s=%s: Gateway %s is of class %q, not %s: it is no waypoint", AnnotationWaypoint, name, name, gw.Class, WaypointClass), false
	}
	switch gw.For {
	case "", "service", "all":
	default:
		// The namespace's label binds the traffic addressed to its
		// services: a waypoint for workloads only, or none, takes none of
		// it, and the policies meant for it would bind nothing.
		return fmt.Sprintf("waypoint %s is labelled %s=%s: it takes none of the traffic to the namespace's services that %s sends it; label it %s=service or all", name, LabelWaypointFor, gw.For, LabelUseWaypoint, LabelWaypointFor), false
	}
	if why := waypointRevisionProblem(m, gw); why != "" {
		return why, false
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

// waypointRevisionProblem says why the waypoint's Gateway does not name
// the target revision itself, or "". It must: istiod deploys a Gateway by
// its own istio.io/rev, else its namespace's, and the namespace's goes
// when it is enrolled.
func waypointRevisionProblem(m *machine, gw Gateway) string {
	if rev, ok := m.snap().Mesh.Resolve(gw.Revision); gw.Revision != "" && ok && rev == m.st.TargetRevision {
		return ""
	}
	has := "no " + LabelRev + " label"
	if gw.Revision != "" {
		has = LabelRev + "=" + gw.Revision
	}
	return fmt.Sprintf("waypoint %s carries %s: label the Gateway %s=%s, so the target's istiod deploys and serves it whatever the namespace's label says", gw.Name, has, LabelRev, m.st.label())
}

// waypointHoldsEnrolment says why the namespace may not be enrolled yet
// for its waypoint's sake, or "": its Gateway, gone or relabelled since
// the last wave started, would move with the namespace's istio.io/rev.
func waypointHoldsEnrolment(m *machine) string {
	name := m.settings.Waypoint
	if name == "" {
		return ""
	}
	gw, ok := m.snap().Compat.gateway(name)
	if !ok {
		return fmt.Sprintf("waypoint %s has no Gateway any more", name)
	}
	return waypointRevisionProblem(m, gw)
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
	if ns.Labels[LabelDataplaneMode] == DataplaneAmbient {
		return // the namespace enrols its pods: they stay behind it
	}
	for _, w := range m.snap().Workloads {
		if w.TemplateLabels[LabelDataplaneMode] == DataplaneAmbient {
			return // an earlier wave stays in ambient (scaled to zero, say), behind it
		}
		for _, p := range w.Pods {
			if !p.Terminating && p.InAmbient() {
				return // a pod in ambient of a template since changed
			}
		}
	}
	if !waypointOnRecord(m, st.WaypointSet) {
		// The records of the migration never say meshwave set it (a
		// status edited to claim a person's label): it stays.
		st.WaypointSet = ""
		return
	}
	if ns.Labels[LabelUseWaypoint] == st.WaypointSet {
		m.out.RemoveWaypoint = true
		m.event("", EventNormal, "WaypointReleased", fmt.Sprintf("no pod of namespace %s runs in ambient any more: %s=%s, which meshwave set, is taken off", ns.Name, LabelUseWaypoint, st.WaypointSet))
	}
	st.WaypointSet = ""
}

// waypointOnRecord reports whether a move record of the migration says
// meshwave set the label name.
func waypointOnRecord(m *machine, name string) bool {
	for _, w := range m.workloads() {
		if r := w.record; r != nil && r.Migration == m.st.MigrationID() && r.Waypoint == name {
			return true
		}
	}
	return false
}
