package canary

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Istio's guide deletes a namespace's selector-based AuthorizationPolicies
// with L7 rules right after its workloads restart into ambient: ztunnel
// would turn an ALLOW of them into deny-all, and their targetRefs
// replacement on the waypoint holds the traffic from then on. meshwave
// never deletes a person's policy on its own. With
// meshwave.io/delete-replaced-policies=true it follows the guide's order,
// and keeps a copy that a rollback puts back:
//   - a policy is replaced when a targetRefs AuthorizationPolicy of the
//     namespace, bound to the waypoint's Gateway or to a Service, holds
//     the same action and rules, or names it in meshwave.io/replaces;
//   - the workloads it selects that still run a sidecar must move in one
//     wave: until then it blocks, by name;
//   - its copy goes into the namespace's meshwave.io/replaced-policies in
//     the write that starts that wave, and it is deleted (by its UID) once
//     every workload it selects left its sidecar;
//   - a rollback creates it again from the copy once no pod or template
//     it selects is in ambient, where ztunnel would make it deny-all.
const (
	// Namespace: "true" deletes the replaced policies, as the guide does.
	AnnotationDeleteReplacedPolicies = "meshwave.io/delete-replaced-policies"
	// AuthorizationPolicy: the names of the policies it replaces, comma
	// separated, where its rules differ from theirs.
	AnnotationReplaces = "meshwave.io/replaces"
	// Namespace, written by the agent: the copies of the policies deleted.
	AnnotationReplacedPolicies = "meshwave.io/replaced-policies"
)

// maxReplacedPolicies bounds the copies kept on the namespace, which
// shares 256 KiB of annotations with the status.
const maxReplacedPolicies = 64 << 10

// SavedPolicy is the copy of a policy meshwave deleted, as the namespace's
// meshwave.io/replaced-policies keeps it.
type SavedPolicy struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	// Migration is the migration that deleted it; only its rollback puts
	// it back.
	Migration   string            `json:"migration"`
	MatchLabels map[string]string `json:"matchLabels"`
	// Object is the policy to create again: its kind, name, labels,
	// annotations and spec.
	Object json.RawMessage `json:"object"`
}

// PolicyRef names a policy to delete, by its UID: a policy of the same
// name made since is not the one replaced. Why is the Event's message.
type PolicyRef struct {
	Namespace, Name, UID, Why string
}

// ParseReplacedPolicies reads the copies a namespace keeps.
func ParseReplacedPolicies(annotations map[string]string) ([]SavedPolicy, error) {
	raw, ok := annotations[AnnotationReplacedPolicies]
	if !ok || raw == "" {
		return nil, nil
	}
	var out []SavedPolicy
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("%s is not the list of copies meshwave writes: %w", AnnotationReplacedPolicies, err)
	}
	for _, s := range out {
		if s.Name == "" || s.UID == "" || len(s.Object) == 0 {
			return nil, fmt.Errorf("%s holds a copy without a name, UID or object", AnnotationReplacedPolicies)
		}
	}
	return out, nil
}

func encodeReplacedPolicies(saved []SavedPolicy) string {
	if len(saved) == 0 {
		return ""
	}
	raw, _ := json.Marshal(saved)
	return string(raw)
}

// deletesReplaced reports whether a policy is one meshwave may delete once
// replaced: selector-based, of the namespace itself (one of the root
// namespace applies to every namespace), with rules ztunnel cannot enforce.
func deletesReplaced(ap AuthorizationPolicy, ns string) bool {
	return ap.Namespace == ns && !ap.TargetRefs && !ap.MeshWide && len(ap.MatchLabels) > 0 && len(ap.L7) > 0
}

// replacementOf names the targetRefs policy of the namespace that replaces
// ap, or "".
func replacementOf(c Compat, ns, waypoint string, ap AuthorizationPolicy) string {
	for _, r := range c.AuthorizationPolicies {
		if r.Namespace != ns || !r.TargetRefs || !bindsToWaypoint(r, waypoint) {
			continue
		}
		if slices.Contains(r.Replaces, ap.Name) || (r.Action == ap.Action && r.Rules == ap.Rules) {
			return r.Name
		}
	}
	return ""
}

// bindsToWaypoint reports whether a targetRefs policy is enforced by the
// namespace's waypoint: bound to its Gateway, or to a Service of the
// namespace, whose traffic istio.io/use-waypoint sends through it.
func bindsToWaypoint(r AuthorizationPolicy, waypoint string) bool {
	for _, ref := range r.Refs {
		if ref == "Gateway/"+waypoint || strings.HasPrefix(ref, "Service/") {
			return true
		}
	}
	return false
}

// selectedBy are the workloads of the namespace a policy selects.
func selectedBy(m *machine, selector map[string]string) []Workload {
	var out []Workload
	for _, w := range m.snap().Workloads {
		if subset(selector, w.TemplateLabels) {
			out = append(out, w)
		}
	}
	return out
}

func templateInAmbient(w Workload) bool {
	return w.TemplateLabels[LabelDataplaneMode] == DataplaneAmbient
}

// replacedBlock says why a replaced policy still keeps the move from
// going on, with meshwave.io/delete-replaced-policies=true, or "" when
// meshwave deletes it right after the restart of the workloads it
// selects: those still on a sidecar must all move, and in one wave.
func replacedBlock(m *machine, ap AuthorizationPolicy, plan NamespacePlan) string {
	waveOf := map[string]int{}
	for i, wave := range plan.Waves {
		for _, p := range wave {
			waveOf[p.Name] = i
		}
	}
	waves := map[int][]string{}
	var unplanned []string
	for _, w := range selectedBy(m, ap.MatchLabels) {
		if templateInAmbient(w) {
			continue
		}
		if i, ok := waveOf[w.Name]; ok {
			waves[i] = append(waves[i], describe(w.Name))
		} else {
			unplanned = append(unplanned, describe(w.Name))
		}
	}
	if len(unplanned) > 0 {
		return fmt.Sprintf("AuthorizationPolicy %s/%s also selects %s, which this migration does not move: deleted, it would no longer hold their sidecars; narrow its selector", ap.Namespace, ap.Name, strings.Join(bounded(unplanned, 5), ", "))
	}
	if len(waves) > 1 {
		var parts []string
		for _, i := range slices.Sorted(maps.Keys(waves)) {
			parts = append(parts, fmt.Sprintf("%s in wave %d", strings.Join(waves[i], ", "), m.st.Wave+i+1))
		}
		return fmt.Sprintf("AuthorizationPolicy %s/%s selects workloads of more than one wave (%s): meshwave deletes it right after the restart that moves them, so they must move together; split it into a policy a wave, or put them in one wave", ap.Namespace, ap.Name, strings.Join(parts, "; "))
	}
	return ""
}

// replacedNotes are the precheck's notes of the policies meshwave will
// delete, each named with its replacement and the workloads whose restart
// comes first.
func replacedNotes(m *machine, plan NamespacePlan) []string {
	if m.st.Mode != ModeAmbient || !m.settings.DeleteReplacedPolicies {
		return nil
	}
	c := m.snap().Compat
	var out []string
	for _, ap := range c.AuthorizationPolicies {
		if !deletesReplaced(ap, m.ns) || !selectsAny(ap.MatchLabels, plannedWorkloads(m, plan)) {
			continue
		}
		r := replacementOf(c, m.ns, m.settings.Waypoint, ap)
		if r == "" || replacedBlock(m, ap, plan) != "" {
			continue
		}
		out = append(out, fmt.Sprintf("AuthorizationPolicy %s/%s, replaced by %s, will be deleted right after the restart of the workloads it selects, as %s asks; its copy is kept in %s, and a rollback puts it back", ap.Namespace, ap.Name, r, AnnotationDeleteReplacedPolicies, AnnotationReplacedPolicies))
	}
	return out
}

// replacedPolicies keeps the copies and sends the deletes and the
// restores each decision calls for, from the state alone, so a crash
// between two writes only delays them:
//   - moving forward with the annotation on, a replaced policy whose
//     last workloads on a sidecar this decision's moves take into ambient
//     gets its copy written, before the restart; one whose copy is on the
//     namespace already, and whose workloads all run in ambient, is
//     deleted;
//   - rolling back, a copy of this migration whose policy is gone is put
//     back once nothing it selects is in ambient, and dropped once a
//     policy of its name exists again.
func replacedPolicies(m *machine) {
	ns := m.snap().Namespace
	saved, err := ParseReplacedPolicies(ns.Annotations)
	if err != nil {
		if m.st.Mode == ModeAmbient {
			m.st.warn("replaced policies", err.Error()+": no policy is deleted or put back until it is removed or mended")
		}
		return
	}
	kept := slices.Clone(saved)
	c := m.snap().Compat
	exists := func(name string) (AuthorizationPolicy, bool) {
		i := slices.IndexFunc(c.AuthorizationPolicies, func(ap AuthorizationPolicy) bool { return ap.Namespace == m.ns && ap.Name == name })
		if i < 0 {
			return AuthorizationPolicy{}, false
		}
		return c.AuthorizationPolicies[i], true
	}
	switch {
	case m.st.Phase == PhaseRollingBack || m.st.Phase == PhaseRolledBack:
		for _, s := range saved {
			if s.Migration != m.st.MigrationID() {
				continue
			}
			if ap, ok := exists(s.Name); ok {
				if ap.UID != s.UID || m.st.Phase == PhaseRolledBack {
					// Put back (or made again by a person), or never
					// deleted: the copy has served.
					kept = slices.DeleteFunc(kept, func(k SavedPolicy) bool { return k.UID == s.UID })
				}
				continue
			}
			if len(policiesUnread(c)) > 0 || stillAmbient(m, s.MatchLabels) {
				continue
			}
			m.out.RestorePolicies = append(m.out.RestorePolicies, s)
		}
	case m.st.Mode == ModeAmbient && m.settings.DeleteReplacedPolicies && len(policiesUnread(c)) == 0:
		moving := map[string]bool{}
		for _, mv := range m.out.Moves {
			if !mv.Record.Rollback && !mv.RecordOnly {
				moving[mv.Workload] = true
			}
		}
		for _, ap := range c.AuthorizationPolicies {
			if !deletesReplaced(ap, m.ns) {
				continue
			}
			r := replacementOf(c, m.ns, m.settings.Waypoint, ap)
			selected := selectedBy(m, ap.MatchLabels)
			if r == "" || len(selected) == 0 {
				continue
			}
			now, after := true, true
			var names []string
			for _, w := range selected {
				now = now && templateInAmbient(w)
				after = after && (templateInAmbient(w) || moving[w.Name])
				names = append(names, describe(w.Name))
			}
			i := slices.IndexFunc(saved, func(s SavedPolicy) bool { return s.UID == ap.UID })
			switch {
			case i >= 0 && now:
				m.out.DeletePolicies = append(m.out.DeletePolicies, PolicyRef{Namespace: ap.Namespace, Name: ap.Name, UID: ap.UID,
					Why: fmt.Sprintf("every workload it selects (%s) left its sidecar, and %s replaces it on the waypoint: ztunnel would deny all their traffic under it; its copy is kept in %s", strings.Join(bounded(names, 5), ", "), r, AnnotationReplacedPolicies)})
			case i < 0 && after && !now && ap.Copy != "":
				// Only the decision whose moves take its last workloads
				// out of their sidecars keeps a copy: a policy made again
				// after they moved is a person's, and left alone.
				kept = append(kept, SavedPolicy{Name: ap.Name, UID: ap.UID, Migration: m.st.MigrationID(), MatchLabels: ap.MatchLabels, Object: json.RawMessage(ap.Copy)})
			}
		}
	}
	if out := encodeReplacedPolicies(kept); out != ns.Annotations[AnnotationReplacedPolicies] {
		if len(out) > maxReplacedPolicies {
			m.st.warn("replaced policies", fmt.Sprintf("the copies of the replaced policies would take %d bytes, more than the %d meshwave keeps on the namespace: none is deleted; delete them by hand", len(out), maxReplacedPolicies))
			m.out.DeletePolicies = nil
			return
		}
		m.out.ReplacedPolicies = &out
	}
}

// stillAmbient reports whether a template or a running pod the selector
// matches is in ambient, where ztunnel would make a restored ALLOW
// policy of L7 rules deny-all.
func stillAmbient(m *machine, selector map[string]string) bool {
	for _, w := range m.snap().Workloads {
		if templateInAmbient(w) && subset(selector, w.TemplateLabels) {
			return true
		}
		for _, p := range w.Pods {
			if !p.Terminating && p.InAmbient() && subset(selector, p.Labels) {
				return true
			}
		}
	}
	return false
}
