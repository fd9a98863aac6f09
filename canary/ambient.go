package canary

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Istio's ambient keys (docs/ambient-facts.md).
const (
	// LabelDataplaneMode enrols a pod (or, on a namespace, its pods) in
	// ambient when it is "ambient"; "none" keeps a pod out.
	LabelDataplaneMode = "istio.io/dataplane-mode"
	// LabelInject "false" on a pod keeps every injector webhook away: their
	// object selectors exclude it.
	LabelInject = "sidecar.istio.io/inject"
	// AnnotationRedirection is what the istio-cni node agent writes on a
	// pod, last, once its traffic is redirected to ztunnel.
	AnnotationRedirection = "ambient.istio.io/redirection"
	// DataplaneAmbient is LabelDataplaneMode's ambient value.
	DataplaneAmbient = "ambient"
	// RedirectionEnabled is AnnotationRedirection's value once redirected.
	RedirectionEnabled = "enabled"
)

// Mode is the data plane a migration moves workloads onto: a sidecar of
// the target revision, or ambient mode with the target revision's istiod
// serving the ztunnels.
type Mode string

const (
	// ModeSidecar is the default, written as "sidecar" in the annotation
	// and left out of the status and the records.
	ModeSidecar Mode = ""
	ModeAmbient Mode = "ambient"
)

// ParseMode reads meshwave.io/target-mode.
func ParseMode(v string) (Mode, bool) {
	switch v {
	case "sidecar":
		return ModeSidecar, true
	case "ambient":
		return ModeAmbient, true
	}
	return ModeSidecar, false
}

// String is the mode as the annotation writes it.
func (m Mode) String() string {
	if m == ModeSidecar {
		return "sidecar"
	}
	return string(m)
}

// enrolled reports whether the namespace of a move to ambient carries
// istio.io/dataplane-mode=ambient (the move enrolled it, or a person or a
// sync put it back).
func (m *machine) enrolled() bool {
	return m.st.Mode == ModeAmbient && m.snap().Namespace.Labels[LabelDataplaneMode] == DataplaneAmbient
}

// Place is where a pod's traffic is handled: by a sidecar of a revision,
// or, in ambient mode, by the ztunnel of its node.
type Place struct {
	Revision string
	Ambient  bool
}

// String names the place in messages: "ambient (canary)" or "canary".
func (pl Place) String() string {
	if pl.Ambient {
		return fmt.Sprintf("ambient (%s)", pl.Revision)
	}
	return pl.Revision
}

// expectedPlace names a place as a pod is expected to run there: "of
// canary" (a proxy of it), or "in ambient (canary)".
func expectedPlace(pl Place) string {
	if pl.Ambient {
		return "in " + pl.String()
	}
	return "of " + pl.Revision
}

// InAmbient reports whether the pod runs without a sidecar, enrolled in
// ambient by its own label, as a move to ambient labels it. Whether its
// traffic is redirected yet is the enrolment gate's question.
func (p Pod) InAmbient() bool {
	return !p.Injected() && p.Labels[LabelDataplaneMode] == DataplaneAmbient
}

// At reports whether the pod is where pl says.
func (p Pod) At(pl Place) bool {
	if pl.Ambient {
		return p.InAmbient()
	}
	return p.Revision == pl.Revision
}

// targetPlace is where the migration in st moves workloads.
func (s *Status) targetPlace() Place {
	return Place{Revision: s.TargetRevision, Ambient: s.Mode == ModeAmbient}
}

// sourcePlace is where its rollback returns them: a sidecar of the source.
func (s *Status) sourcePlace() Place {
	return Place{Revision: s.SourceRevision}
}

// serves reports whether st is of the migration the namespace's settings
// ask for. A migration to ambient first moves the sidecars onto the
// target's revision (Istio's step "HBONE": every sidecar must speak HBONE
// before its peers leave the sidecar world), so a sidecar migration to
// the same target serves an ambient target until it completes; the move
// to ambient follows.
func (s *Status) serves(settings NamespaceSettings) bool {
	if s.Target != settings.Target {
		return false
	}
	if s.Mode == settings.Mode {
		return true
	}
	return s.Mode == ModeSidecar && settings.Mode == ModeAmbient && s.unblockedPhase() != PhaseCompleted
}

// modeOf is the mode a new migration to rev starts in, for a namespace
// that asks for mode: ambient only once no workload the sidecar migration
// would move still has an injected pod on another revision. After the
// sidecar step completed for this target, the move to ambient follows
// whatever is left on another revision: a workload that failed or was
// skipped there is for the ambient precheck to name, never a sidecar step
// run again and again.
func (r *Reading) modeOf(mode Mode, rev string) Mode {
	if mode != ModeAmbient {
		return mode
	}
	if prev := r.Recorded; prev != nil && prev.Target == r.Settings.Target && prev.TargetRevision == rev &&
		(prev.Mode == ModeAmbient || prev.unblockedPhase() == PhaseCompleted) {
		// A status of this target already ambient stays so, and a
		// completed sidecar step is done: whatever is left on another
		// revision is for the ambient precheck to name.
		return ModeAmbient
	}
	plan := planNamespace(r.Snapshot.Namespace.Name, r.records(), Place{Revision: rev}, "", 0, r.cfg.Sizes)
	if len(plan.Waves) > 0 {
		return ModeSidecar
	}
	return ModeAmbient
}

// hboneNotDone says why the move to ambient may not start: a pod of the
// namespace still runs a sidecar of another revision than the target's
// (one the sidecar step left out, a Job's, a bare pod's). Such a sidecar
// may not speak HBONE to the pods that leave the sidecar world. "" when
// every injected pod runs the target.
func hboneNotDone(snap *Snapshot, target string) string {
	var off []string
	for _, w := range snap.Workloads {
		for _, p := range w.Pods {
			if !p.Terminating && p.Injected() && p.Revision != target {
				off = append(off, fmt.Sprintf("pod %s of %s runs %s", p.Name, describe(w.Name), p.Revision))
			}
		}
	}
	for _, u := range snap.Unmovable {
		for _, rev := range slices.Sorted(maps.Keys(u.Revisions)) {
			if rev != target {
				off = append(off, fmt.Sprintf("%d pods of %s run %s", u.Revisions[rev], u.ID, rev))
			}
		}
	}
	if len(off) == 0 {
		return ""
	}
	slices.Sort(off)
	more := ""
	if len(off) > 5 {
		more = fmt.Sprintf(" and %d more", len(off)-5)
		off = off[:5]
	}
	return fmt.Sprintf("the move to ambient needs every sidecar of the namespace on %s first, to speak HBONE to the moved pods: %s%s; move them with %s=sidecar, or skip them out of the namespace", target, strings.Join(off, "; "), more, AnnotationTargetMode)
}

// ambientPrecheck says why a move to ambient may not start, or "".
func ambientPrecheck(m *machine) string {
	if why := hboneNotDone(m.snap(), m.st.TargetRevision); why != "" {
		return why
	}
	moved := plannedWorkloads(m, m.plan())
	if why := noZtunnel(m.snap(), moved); why != "" {
		return why
	}
	if why := policiesUnread(m.snap().Compat); why != "" {
		return why
	}
	if why := policyBlocks(m, m.plan()); why != "" {
		return why
	}
	why, _ := waypointProblem(m)
	return why
}

// noZtunnel says which nodes running a pod of the workloads to move have
// no Ready ztunnel, or no Ready istio-cni node agent: a pod moved there would not
// be in the mesh, or not redirected to it. "" when each has both.
func noZtunnel(snap *Snapshot, moved []Workload) string {
	var out []string
	for _, part := range []struct {
		ready map[string]bool
		what  string
	}{
		{snap.Mesh.Ztunnels, "ztunnel runs on %s: install Istio's ztunnel DaemonSet (pods app=ztunnel in the root namespace)"},
		{snap.Mesh.CNINodeAgents, "istio-cni node agent runs on %s: install Istio's istio-cni chart with ambient enabled (pods k8s-app=istio-cni-node in the root namespace)"},
	} {
		missing := map[string]string{}
		for _, w := range moved {
			for _, p := range w.Pods {
				if !p.Terminating && p.Node != "" && !part.ready[p.Node] {
					if _, seen := missing[p.Node]; !seen {
						missing[p.Node] = p.Name
					}
				}
			}
		}
		if len(missing) == 0 {
			continue
		}
		var nodes []string
		for _, node := range slices.Sorted(maps.Keys(missing)) {
			nodes = append(nodes, fmt.Sprintf("node %s (pod %s)", node, missing[node]))
		}
		out = append(out, "no Ready "+fmt.Sprintf(part.what, strings.Join(bounded(nodes, 5), ", ")))
	}
	if len(out) == 0 {
		return ""
	}
	return strings.Join(out, "; ") + " on every node of the namespace's pods first"
}

// carriesMove reports whether w's template holds what a move of st writes
// besides its restart stamp: for a move to ambient, the two labels. A
// restart without them (kubectl rollout restart, say) is not the wave's
// move, whatever its time.
func carriesMove(w Workload, st *Status) bool {
	if st.Mode != ModeAmbient {
		return true
	}
	return w.TemplateLabels[LabelInject] == "false" && w.TemplateLabels[LabelDataplaneMode] == DataplaneAmbient
}

// ambientWaveHeld says why the next wave of a move to ambient may not
// start, or "": what its precheck blocks on may have appeared since the
// first wave (a policy created, a ztunnel gone), and is asked again of
// the workloads still to move before each wave.
func ambientWaveHeld(m *machine) string {
	if m.st.Mode != ModeAmbient || m.plan().Remaining() == 0 {
		return ""
	}
	moved := plannedWorkloads(m, m.plan())
	if why := noZtunnel(m.snap(), moved); why != "" {
		return why
	}
	if why := policyBlocks(m, m.plan()); why != "" {
		return why
	}
	if why, passing := waypointProblem(m); !passing {
		return why
	}
	return ""
}

// ambientWaveWaits says why the next wave of a move to ambient waits
// without a pause, or "": the policy kinds not read yet (a new leader's
// caches, a discovery error), which clears by itself.
func ambientWaveWaits(m *machine) string {
	if m.st.Mode != ModeAmbient || m.plan().Remaining() == 0 {
		return ""
	}
	if why := policiesUnread(m.snap().Compat); why != "" {
		return why
	}
	if why, passing := waypointProblem(m); passing {
		return why
	}
	return ""
}

// enrolNamespace, on a completed move to ambient, labels the namespace
// istio.io/dataplane-mode=ambient and takes its injection labels off, as
// Istio's guide leaves it, unless a workload of it still runs a sidecar
// (left out, failed, a gateway, one meshwave never restarts): its
// recreated pods would lose their sidecar. Then the labels stay, with a
// warning that names it.
func enrolNamespace(m *machine) {
	st := m.st
	var held, outside []string
	for _, w := range m.snap().Workloads {
		injected, out := false, false
		for _, p := range w.Pods {
			switch {
			case p.Terminating:
			case p.Injected():
				injected = true
			case !p.InAmbient() && p.Labels[LabelDataplaneMode] != "none":
				out = true
			}
		}
		if mode := w.TemplateLabels[LabelDataplaneMode]; mode != DataplaneAmbient && mode != "none" &&
			(w.TemplateLabels[LabelInject] == "false" || w.TemplateAnnotations[LabelInject] == "false") {
			// Outside the mesh by its template, whether or not a pod of
			// it runs now (scaled to zero, say).
			out = true
		}
		if injected {
			held = append(held, describe(w.Name))
		}
		if out {
			outside = append(outside, describe(w.Name))
		}
	}
	for _, u := range m.snap().Unmovable {
		held = append(held, u.ID)
	}
	var why []string
	if w := waypointHoldsEnrolment(m); w != "" {
		why = append(why, w)
	}
	if len(held) > 0 {
		slices.Sort(held)
		why = append(why, fmt.Sprintf("%s still run a sidecar, which a recreated pod would lose", strings.Join(bounded(held, 10), ", ")))
	}
	if len(outside) > 0 {
		slices.Sort(outside)
		why = append(why, fmt.Sprintf("%s run outside the mesh, and the namespace's label would enrol their pods at once; label their pod templates %s=none to keep them out", strings.Join(bounded(outside, 10), ", "), LabelDataplaneMode))
	}
	if len(why) > 0 {
		st.warn("namespace labels", fmt.Sprintf("the namespace keeps %s=%s and is not labelled %s=%s: %s", LabelRev, m.snap().Namespace.Labels[LabelRev], LabelDataplaneMode, DataplaneAmbient, strings.Join(why, "; ")))
		return
	}
	st.NamespaceEnrolled = true
	if m.snap().Namespace.Labels[LabelDataplaneMode] != DataplaneAmbient || hasInjectionLabel(m.snap().Namespace) {
		m.out.EnrolNamespace = true
		m.event("", EventNormal, "NamespaceEnrolled", fmt.Sprintf("every workload runs in ambient: the namespace is labelled %s=%s and loses %s and %s", LabelDataplaneMode, DataplaneAmbient, LabelRev, LabelInjection))
	}
}

func hasInjectionLabel(ns Namespace) bool {
	_, rev := ns.Labels[LabelRev]
	_, inj := ns.Labels[LabelInjection]
	return rev || inj
}

// bounded is at most n of xs, with how many more there are.
func bounded(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	return append(slices.Clone(xs[:n]), fmt.Sprintf("%d more", len(xs)-n))
}
