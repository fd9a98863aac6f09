package canary

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
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

// replacedWarning begins each status warning of the replaced policies:
// the next decision's replaces the last.
const replacedWarning = "replaced policies: "

// SavedPolicy is the copy of a policy meshwave deleted, as the namespace's
// meshwave.io/replaced-policies keeps it.
type SavedPolicy struct {
	Name string
	UID  string
	// Migration is the migration that deleted it; only its rollback puts
	// it back.
	Migration   string
	MatchLabels map[string]string
	// Object is the policy to create again: its kind, name, labels,
	// annotations and spec.
	Object json.RawMessage
}

// savedJSON is a copy as the annotation holds it: its name, UID and
// migration in the clear, and its selector and object base64-encoded, so
// that what a policy's owner wrote into its labels and annotations never
// reads as a copy's name or UID to the chart's write limits, which look
// for them in the annotation's text.
type savedJSON struct {
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Migration string `json:"migration"`
	Data      []byte `json:"data"`
}

type savedData struct {
	MatchLabels map[string]string `json:"matchLabels"`
	Object      json.RawMessage   `json:"object"`
}

// MarshalJSON writes a copy as the annotation holds it.
func (s SavedPolicy) MarshalJSON() ([]byte, error) {
	data, err := json.Marshal(savedData{MatchLabels: s.MatchLabels, Object: s.Object})
	if err != nil {
		return nil, err
	}
	return json.Marshal(savedJSON{Name: s.Name, UID: s.UID, Migration: s.Migration, Data: data})
}

// UnmarshalJSON reads a copy as the annotation holds it.
func (s *SavedPolicy) UnmarshalJSON(raw []byte) error {
	var j savedJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return err
	}
	var d savedData
	if len(j.Data) > 0 {
		if err := json.Unmarshal(j.Data, &d); err != nil {
			return fmt.Errorf("the data of the copy of %s: %w", j.Name, err)
		}
	}
	*s = SavedPolicy{Name: j.Name, UID: j.UID, Migration: j.Migration, MatchLabels: d.MatchLabels, Object: d.Object}
	return nil
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
	return ap.Namespace == ns && !ap.RootNamespace && !ap.TargetRefs && !ap.MeshWide && len(ap.MatchLabels) > 0 && len(ap.L7) > 0
}

// replacementOf names the targetRefs policy of the namespace that replaces
// ap, or "".
func replacementOf(c Compat, ns, waypoint string, ap AuthorizationPolicy) string {
	for _, r := range c.AuthorizationPolicies {
		if r.Namespace != ns || !r.TargetRefs || r.DryRun || !bindsToWaypoint(r, waypoint) || r.Action != ap.Action {
			continue
		}
		if slices.Contains(r.Replaces, ap.Name) || r.Rules == ap.Rules {
			return r.Name
		}
	}
	return ""
}

// bindsToWaypoint reports whether a targetRefs policy is enforced by the
// namespace's waypoint for all its traffic: bound to its Gateway. One
// bound to a Service holds only that Service's traffic, which is not told
// to be the replaced policy's workloads'.
func bindsToWaypoint(r AuthorizationPolicy, waypoint string) bool {
	return slices.Contains(r.Refs, "Gateway/"+waypoint)
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
	where := fmt.Sprintf("AuthorizationPolicy %s/%s", ap.Namespace, ap.Name)
	switch obj, err := readCopy(ap.Copy); {
	case err != nil:
		return fmt.Sprintf("%s cannot be kept as a copy to put back on a rollback (%v); delete it by hand once its workloads left their sidecars", where, err)
	case len(ap.Copy) > maxReplacedPolicies/2:
		return fmt.Sprintf("%s is %d bytes, more than meshwave keeps a copy of on the namespace (%d); delete it by hand once its workloads left their sidecars", where, len(ap.Copy), maxReplacedPolicies/2)
	default:
		if o, ok := OwnerOf(obj.Metadata.Labels, obj.Metadata.Annotations); ok {
			return fmt.Sprintf("%s is applied by %s, which would create it again over its workloads in ambient, where ztunnel denies all their traffic under it; remove it from that source once the waypoint's policy replaces it", where, o)
		}
	}
	var unmovable []string
	for _, u := range m.snap().Unmovable {
		if len(u.Revisions) > 0 {
			unmovable = append(unmovable, u.ID)
		}
	}
	if len(unmovable) > 0 {
		return fmt.Sprintf("%s may select %s, which run a sidecar meshwave does not move and whose labels it does not read: deleted, it would no longer hold them; let them finish, or delete it by hand", where, strings.Join(bounded(unmovable, 5), ", "))
	}
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
		return fmt.Sprintf("%s also selects %s, which this migration does not move: deleted, it would no longer hold their sidecars; narrow its selector", where, strings.Join(bounded(unplanned, 5), ", "))
	}
	if len(waves) > 1 {
		var parts []string
		for _, i := range slices.Sorted(maps.Keys(waves)) {
			parts = append(parts, fmt.Sprintf("%s in wave %d", strings.Join(waves[i], ", "), m.st.Wave+i+1))
		}
		return fmt.Sprintf("%s selects workloads of more than one wave (%s): meshwave deletes it right after the restart that moves them, so they must move together; split it into a policy a wave, or put them in one wave", where, strings.Join(parts, "; "))
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
//   - a copy of this migration whose policy is gone is put back once
//     nothing it selects is in ambient, whatever the phase (a rollback,
//     paused or not, or a person who took a workload back), and dropped,
//     rolling back, once a policy of its name exists again;
//   - moving forward with the annotation on, a replaced policy whose last
//     workloads on a sidecar this decision's moves take into ambient gets
//     its copy written, before the restart; one whose copy is on the
//     namespace already, and whose workloads all run in ambient, is
//     deleted.
func replacedPolicies(m *machine) {
	ns := m.snap().Namespace
	saved, err := ParseReplacedPolicies(ns.Annotations)
	if err != nil {
		if m.st.Mode == ModeAmbient {
			m.st.warn(replacedWarning, replacedWarning+err.Error()+": no policy is deleted or put back until it is removed or mended")
		}
		return
	}
	kept := slices.Clone(saved)
	c := m.snap().Compat
	if len(policiesUnread(c)) > 0 {
		return
	}
	exists := func(name string) (AuthorizationPolicy, bool) {
		i := slices.IndexFunc(c.AuthorizationPolicies, func(ap AuthorizationPolicy) bool { return ap.Namespace == m.ns && ap.Name == name })
		if i < 0 {
			return AuthorizationPolicy{}, false
		}
		return c.AuthorizationPolicies[i], true
	}
	rollingBack := m.st.Phase == PhaseRollingBack || m.st.Phase == PhaseRolledBack
	movedHere := func(name string) bool {
		w, ok := m.workloads().find(name)
		return ok && w.record != nil && w.record.Migration == m.st.MigrationID()
	}
	var unheld []string
	for _, s := range saved {
		if s.Migration != m.st.MigrationID() {
			continue
		}
		if ap, ok := exists(s.Name); ok {
			if rollingBack && (ap.UID != s.UID || m.st.Phase == PhaseRolledBack) {
				// Put back (or made again by a person), or never
				// deleted: the copy has served its rollback. Moving
				// forward, it stays as the guide's backup.
				kept = slices.DeleteFunc(kept, func(k SavedPolicy) bool { return k.UID == s.UID })
			}
			continue
		}
		if stillAmbient(m, s.MatchLabels) {
			for _, w := range m.snap().Workloads {
				// One this migration moved is on its way back, or
				// forward; another is a sidecar the policy held.
				if !templateInAmbient(w) && subset(s.MatchLabels, w.TemplateLabels) && runsSidecar(w) && !movedHere(w.Name) {
					unheld = append(unheld, fmt.Sprintf("%s runs sidecars that AuthorizationPolicy %s/%s selected, which meshwave deleted when the workloads it selected left theirs: nothing holds them to its rules; its copy is in %s", describe(w.Name), m.ns, s.Name, AnnotationReplacedPolicies))
				}
			}
			continue
		}
		if why := restorable(s); why != "" {
			m.st.warn(replacedWarning, replacedWarning+fmt.Sprintf("the copy of AuthorizationPolicy %s/%s in %s is not put back: %s", m.ns, s.Name, AnnotationReplacedPolicies, why))
			continue
		}
		m.out.RestorePolicies = append(m.out.RestorePolicies, s)
	}
	if len(unheld) > 0 {
		m.st.warn(replacedWarning, replacedWarning+strings.Join(bounded(unheld, 3), "; "))
	}
	if !rollingBack && m.st.Mode == ModeAmbient && m.settings.DeleteReplacedPolicies {
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
			// The precheck keeps each copy to half of this; only copies of
			// earlier migrations can bring it here.
			m.st.warn(replacedWarning, replacedWarning+fmt.Sprintf("the copies of the replaced policies would take %d bytes, more than the %d meshwave keeps on the namespace: remove the copies of earlier migrations from %s", len(out), maxReplacedPolicies, AnnotationReplacedPolicies))
			m.out.DeletePolicies = nil
			return
		}
		m.out.ReplacedPolicies = &out
	}
}

// runsSidecar reports whether a pod of w runs a sidecar.
func runsSidecar(w Workload) bool {
	for _, p := range w.Pods {
		if !p.Terminating && p.Injected() {
			return true
		}
	}
	return false
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

// policyCopy is what a kept copy must be to be created again: an
// AuthorizationPolicy of its name, selecting by labels.
type policyCopy struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
	} `json:"spec"`
}

func readCopy(raw string) (policyCopy, error) {
	var c policyCopy
	if raw == "" {
		return c, fmt.Errorf("its object could not be read")
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return c, err
	}
	return c, nil
}

// restorable says why a kept copy may not be created again as it is, or
// "": it must be an AuthorizationPolicy of its own name whose selector is
// the one the copy says (which is what is checked against the workloads
// in ambient) and not empty; an edited copy is never trusted further.
func restorable(s SavedPolicy) string {
	c, err := readCopy(string(s.Object))
	switch {
	case err != nil:
		return fmt.Sprintf("its object cannot be read: %v", err)
	case c.Kind != "AuthorizationPolicy" || !strings.HasPrefix(c.APIVersion, "security.istio.io/"):
		return fmt.Sprintf("its object is a %s of %s, not an AuthorizationPolicy", c.Kind, c.APIVersion)
	case c.Metadata.Name != s.Name:
		return fmt.Sprintf("its object is named %q", c.Metadata.Name)
	case len(c.Spec.Selector.MatchLabels) == 0 || !maps.Equal(c.Spec.Selector.MatchLabels, s.MatchLabels):
		return fmt.Sprintf("its object selects %v, not %v", c.Spec.Selector.MatchLabels, s.MatchLabels)
	}
	return ""
}

// replacesProblem names a meshwave.io/replaces of the namespace's policies
// that is not a list of policy names, or "": a name that cannot be a
// policy's would never match, and the policy it meant would block without
// saying why.
func replacesProblem(c Compat, ns string) string {
	for _, ap := range c.AuthorizationPolicies {
		if ap.Namespace != ns {
			continue
		}
		for _, name := range ap.Replaces {
			if len(validation.IsDNS1123Subdomain(name)) > 0 {
				return fmt.Sprintf("AuthorizationPolicy %s/%s: %s %q is not a comma-separated list of AuthorizationPolicy names of the namespace (%q is not a name)", ap.Namespace, ap.Name, AnnotationReplaces, strings.Join(ap.Replaces, ","), name)
			}
		}
	}
	return ""
}
