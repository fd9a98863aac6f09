package canary

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The marks Argo CD and Flux leave on the objects they apply.
const (
	// LabelArgoInstance is Argo CD's default tracking label: the
	// application's name.
	LabelArgoInstance = "argocd.argoproj.io/instance"
	// AnnotationArgoTrackingID is Argo CD's annotation tracking:
	// "<application>:<group>/<kind>:<namespace>/<name>".
	AnnotationArgoTrackingID = "argocd.argoproj.io/tracking-id"
	// Flux's kustomize-controller and helm-controller label what they
	// apply with <prefix>/name and <prefix>/namespace of their object.
	fluxKustomizePrefix = "kustomize.toolkit.fluxcd.io/"
	fluxHelmPrefix      = "helm.toolkit.fluxcd.io/"
)

// GitOpsOwner is the GitOps controller that applies an object from git: its
// self-heal or drift correction puts back what git says.
type GitOpsOwner struct {
	// Tool is "argocd", "kustomization" (Flux's kustomize-controller) or
	// "helmrelease" (Flux's helm-controller).
	Tool string
	// Name is the Argo CD application, or the Flux object as
	// namespace/name; "" when the marks do not say.
	Name string
}

// OwnerOf finds the GitOps owner an object's labels and annotations name.
// Argo CD is looked for first: an application can deploy manifests that
// Flux rendered, and the one that applies them last is Argo CD.
func OwnerOf(labels, annotations map[string]string) (GitOpsOwner, bool) {
	o, ok := ownerOf(labels, annotations)
	// An annotation's value may be 256 KiB: the name goes into the
	// status, whose reverts are read back only with owners of at most 512
	// bytes, and into a metric label.
	o.Name = cut(o.Name, maxOwnerName)
	return o, ok
}

// maxOwnerName bounds an owner's name: a Flux object's namespace (63
// bytes), a slash and its name (253).
const maxOwnerName = 63 + 1 + 253

func ownerOf(labels, annotations map[string]string) (GitOpsOwner, bool) {
	if id, ok := annotations[AnnotationArgoTrackingID]; ok {
		app, _, _ := strings.Cut(id, ":")
		return GitOpsOwner{Tool: "argocd", Name: app}, true
	}
	if app, ok := labels[LabelArgoInstance]; ok {
		return GitOpsOwner{Tool: "argocd", Name: app}, true
	}
	for _, f := range []struct{ prefix, tool string }{{fluxKustomizePrefix, "kustomization"}, {fluxHelmPrefix, "helmrelease"}} {
		found := false
		for k := range labels {
			if strings.HasPrefix(k, f.prefix) {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		o := GitOpsOwner{Tool: f.tool}
		if name := labels[f.prefix+"name"]; name != "" {
			o.Name = name
			if ns := labels[f.prefix+"namespace"]; ns != "" {
				o.Name = ns + "/" + name
			}
		}
		return o, true
	}
	return GitOpsOwner{}, false
}

// String names the owner for a person: "Argo CD application shop",
// "Flux Kustomization flux-system/apps".
func (o GitOpsOwner) String() string {
	what := map[string]string{"argocd": "Argo CD application", "kustomization": "Flux Kustomization", "helmrelease": "Flux HelmRelease"}[o.Tool]
	if o.Name == "" {
		return what + " (unnamed)"
	}
	return what + " " + o.Name
}

// ID names the owner in a metric label and the status: "argocd/shop",
// "kustomization/flux-system/apps"; "" for no owner.
func (o GitOpsOwner) ID() string {
	if o.Tool == "" {
		return ""
	}
	return o.Tool + "/" + o.Name
}

// ownerOrSomeone names who undid a change: the owner, or someone.
func ownerOrSomeone(o GitOpsOwner, found bool) string {
	if !found {
		return "someone (no Argo CD or Flux owner is marked on it)"
	}
	return o.String()
}

// handOver says how a GitOps owner gives meshwave's keys up.
func handOver(o GitOpsOwner, found bool, what string) string {
	switch {
	case !found:
		return "stop whatever writes it"
	case o.Tool == "argocd":
		return "add " + what + " to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option"
	case o.Tool == "helmrelease":
		return "add " + what + " to the HelmRelease's spec.driftDetection.ignore"
	}
	return "take " + what + " out of git, or annotate the object in git with kustomize.toolkit.fluxcd.io/ssa: IfNotPresent"
}

// Revert is one of meshwave's changes that was undone: the namespace's
// istio.io/rev label while meshwave owns it, or a moved workload's
// template. It is kept in the status so a revert is reported once, and so
// that reverts in a row are counted.
type Revert struct {
	// Object is "Namespace/<name>" for the label, else a workload's ID.
	Object string `json:"object"`
	// Owner is the GitOps owner marked on it (Owner.ID), "" for none.
	Owner string `json:"owner,omitempty"`
	// Count is how many times it was seen undone.
	Count int `json:"count"`
	// At is when it was last seen undone.
	At time.Time `json:"at"`
}

// Kinds of revert, in Decision.Reverts and the metric.
const (
	RevertLabel    = "label"
	RevertTemplate = "template"
)

// RevertSeen is a revert found by a decision, for the metric.
type RevertSeen struct {
	// Kind is RevertLabel or RevertTemplate.
	Kind string
	// Owner is the owner's ID, "" when none is marked.
	Owner string
}

// maxReverts bounds the status's list: the namespace's entry and the
// workloads' latest.
const maxReverts = 10

// labelRevertLimit is how many times meshwave puts its label back before
// it stops fighting whoever switches it: the migration pauses with the
// reason, and the label is left as it was set.
const labelRevertLimit = 3

// maxOwnedListed bounds the workloads a precheck warning names per owner.
const maxOwnedListed = 3

func (s *Status) revert(object string) *Revert {
	for i := range s.Reverts {
		if s.Reverts[i].Object == object {
			return &s.Reverts[i]
		}
	}
	return nil
}

// waveRevertObject names a wave's entry in the reverts: the members it lost
// whole were reported when it was last seen.
func waveRevertObject(wave int) string { return fmt.Sprintf("Wave/%d", wave) }

// kept reports whether an entry of the reverts list is never pushed out:
// the namespace's and the waves'.
func kept(object string) bool {
	return strings.HasPrefix(object, "Namespace/") || strings.HasPrefix(object, "Wave/")
}

// noteRevert counts one revert of object, keeping the list bounded (the
// oldest workload entry goes first; the namespace's and the waves' stay).
func (s *Status) noteRevert(object string, owner string, now time.Time) *Revert {
	if r := s.revert(object); r != nil {
		r.Count++
		r.At, r.Owner = now, owner
		return r
	}
	s.Reverts = append(s.Reverts, Revert{Object: object, Owner: owner, Count: 1, At: now})
	if len(s.Reverts) > maxReverts {
		// The oldest workload's entry goes first, then the oldest earlier
		// wave's; the namespace's and the entry just made stay.
		oldest := -1
		for _, pass := range []string{"", "Wave/"} {
			for i, r := range s.Reverts {
				switch {
				case r.Object == object || strings.HasPrefix(r.Object, "Namespace/"):
					continue
				case pass == "" && kept(r.Object), pass != "" && !strings.HasPrefix(r.Object, pass):
					continue
				}
				if oldest < 0 || r.At.Before(s.Reverts[oldest].At) {
					oldest = i
				}
			}
			if oldest >= 0 {
				break
			}
		}
		if oldest >= 0 {
			s.Reverts = slices.Delete(s.Reverts, oldest, oldest+1)
		}
	}
	return s.revert(object)
}

// warn puts a warning in the status, in place of an earlier one about the
// same thing (same prefix), dropping the oldest when the list is full.
func (s *Status) warn(prefix, text string) {
	s.Warnings = slices.DeleteFunc(s.Warnings, func(w string) bool { return strings.HasPrefix(w, prefix) })
	s.Warnings = append(s.Warnings, text)
	if len(s.Warnings) > maxWarnings {
		s.Warnings = s.Warnings[len(s.Warnings)-maxWarnings:]
	}
}

// gitopsWarnings are the precheck's warnings about GitOps owners: of the
// namespace, whose istio.io/rev label meshwave switches, and of the
// workloads the plan moves, whose templates gain meshwave's keys.
func gitopsWarnings(m *machine, plan NamespacePlan) []string {
	var out []string
	ns := m.snap().Namespace
	if o, ok := OwnerOf(ns.Labels, ns.Annotations); ok {
		hand := fmt.Sprintf("set %s=%s in git and let meshwave run the waves, or %s", LabelRev, m.st.label(), handOver(o, true, "/metadata/labels/istio.io~1rev"))
		if m.st.Target == TargetAuto {
			// The revision auto names today is the one the next move of
			// the tag takes the namespace off: git must not pin it.
			hand = handOver(o, true, "/metadata/labels/istio.io~1rev") + " (the target auto moves it again each time the mesh's default moves)"
		}
		out = append(out, fmt.Sprintf("namespace %s is applied by %s: if its %s label is in git, a sync switches it back to %s after meshwave switches it. Hand the label over: %s",
			ns.Name, o, LabelRev, ns.Labels[LabelRev], hand))
	}
	inPlan := map[string]bool{}
	for _, w := range plan.Waves {
		for _, p := range w {
			inPlan[p.Name] = true
		}
	}
	byOwner := map[GitOpsOwner][]string{}
	var owners []GitOpsOwner
	for _, w := range m.workloads() {
		o, ok := OwnerOf(w.Labels, w.Annotations)
		if !ok || !inPlan[w.Name] {
			continue
		}
		if _, seen := byOwner[o]; !seen {
			owners = append(owners, o)
		}
		byOwner[o] = append(byOwner[o], describe(w.Name))
	}
	for _, o := range owners {
		ws := byOwner[o]
		listed := strings.Join(ws[:min(len(ws), maxOwnedListed)], ", ")
		if len(ws) > maxOwnedListed {
			listed += fmt.Sprintf(" and %d more", len(ws)-maxOwnedListed)
		}
		out = append(out, fmt.Sprintf("%s applies %s: each move adds %s, %s and the persisted sidecar settings to the template, which a sync may take out again (meshwave reports it and does not restart again); %s",
			o, listed, AnnotationRestartedAt, AnnotationMove, handOver(o, true, "those keys")))
	}
	return out
}

// watchReverts looks for meshwave's changes that were undone since the
// last decision: the namespace's label while meshwave owns it, and moved
// workloads' templates. Each is an Event, a status warning and a metric
// naming the owner; nothing is restarted because of it. It reports
// whether it paused the migration.
func watchReverts(m *machine) bool {
	if m.st.Wave == 0 || m.st.Phase == PhaseBlocked {
		return false
	}
	migration := m.st.MigrationID() // formatted once, not per workload
	for _, w := range m.workloads() {
		templateReverted(m, w, migration)
	}
	return labelReverted(m)
}

// templateReverted reports a workload whose template lost the restart
// stamp of a forward move of this migration (passed or in flight) while
// its move record stayed: a sync put back the template from git. The
// move counts as made; meshwave does not restart it again.
func templateReverted(m *machine, w parsedWorkload, migration string) {
	st := m.st
	r := w.movedIn(migration)
	if r == nil {
		return
	}
	at, err := time.Parse(time.RFC3339, w.TemplateAnnotations[AnnotationRestartedAt])
	if err == nil && !at.Before(r.At.UTC().Truncate(time.Second)) {
		return
	}
	o, owned := OwnerOf(w.Labels, w.Annotations)
	if !owned {
		// Only a GitOps owner takes a template back whole; a template
		// edited by hand is its editor's business.
		return
	}
	prev := st.revert(w.Name)
	if prev != nil && !prev.At.Before(r.At) {
		return // reported for this move
	}
	if prev == nil && len(st.Reverts) >= maxReverts {
		// No room left to remember that it was reported: a workload
		// reported but not remembered would be reported again at every
		// decision, each time making room by dropping another one (a
		// status write, Events and a metric each time, for ever). Those
		// beyond the list are reported together, once.
		templatesUnlisted(m)
		return
	}
	st.noteRevert(w.Name, o.ID(), m.now)
	msg := fmt.Sprintf("%s's template no longer carries the %s stamp of its move to %s in wave %d (%s): %s put its template back, and with it took out the persisted sidecar settings. Its pods stay on the revision %s gives them; meshwave does not restart it again. %s.",
		describe(w.Name), AnnotationRestartedAt, r.Revision, r.Wave, r.At.UTC().Format(time.RFC3339), o, LabelRev, capitalized(handOver(o, true, "meshwave's keys")))
	m.event(w.Name, EventWarning, "TemplateReverted", msg)
	st.warn(describe(w.Name)+"'s template", msg)
	m.out.Reverts = append(m.out.Reverts, RevertSeen{Kind: RevertTemplate, Owner: o.ID()})
}

// templatesUnlistedWarning is the warning about the reverted templates the
// status's reverts have no room for; it names no workload and no count, so
// it reads the same at every decision.
var templatesUnlistedWarning = fmt.Sprintf("more moved workloads' templates were put back than the status's reverts list (%d entries): look for those without %s; their moves count as made and meshwave does not restart them again",
	maxReverts, AnnotationRestartedAt)

// templatesUnlisted reports, once, that reverted templates go unlisted.
func templatesUnlisted(m *machine) {
	if slices.Contains(m.st.Warnings, templatesUnlistedWarning) {
		return
	}
	m.st.warn(templatesUnlistedWarning, templatesUnlistedWarning)
	m.event("", EventWarning, "TemplateReverted", templatesUnlistedWarning)
}

// capitalized starts s with a capital letter.
func capitalized(s string) string {
	return strings.ToUpper(s[:1]) + s[1:]
}

// memberReverted reports whether a member of the wave in flight that has
// no record of its move and no restart stamp of the wave was nevertheless
// rolled out onto a template stamped in this wave (a Deployment's
// ReplicaSet, a StatefulSet's or DaemonSet's ControllerRevision carries
// it: Workload.RolledOutRestart): its move was made, then its template and
// record were put back whole (a sync that replaces the object). A stamp
// the workload's own record wrote (the rollback before this migration, its
// stamp pushed into the second this wave started: MoveRecord.Stamp) is
// that record's restart, not this wave's.
func memberReverted(w Workload, waveStart *time.Time) bool {
	if waveStart == nil || w.RolledOutRestart.IsZero() || w.RolledOutRestart.Before(waveStart.UTC().Truncate(time.Second)) {
		return false
	}
	return !explainsStamp(w, w.RolledOutRestart)
}

// labelReverted reports the namespace's istio.io/rev label found away from
// the value meshwave owns: it is put back, up to labelRevertLimit times in
// a row; then meshwave stops fighting, leaves the label and pauses the
// migration with the reason. It reports whether it paused.
func labelReverted(m *machine) bool {
	st, prev := m.st, m.r.Recorded
	if prev == nil {
		return false
	}
	owned := prev.ownedLabel()
	current, has := m.snap().Namespace.Labels[LabelRev]
	// An enrolled namespace going forward was enrolled by the move itself
	// and carries no istio.io/rev (ensureLabel); rolling back, meshwave
	// owns the revision label and the namespace out of ambient, and either
	// one put back is a revert.
	enrolled := m.enrolled()
	if owned == "" || owned != st.ownedLabel() || (current == owned && !enrolled) || (enrolled && !st.rollingBack()) {
		return false
	}
	ns := m.snap().Namespace
	object := "Namespace/" + ns.Name
	if r := st.revert(object); r != nil && r.Count >= labelRevertLimit {
		return false // given up: reported when it was
	}
	o, owned2 := OwnerOf(ns.Labels, ns.Annotations)
	r := st.noteRevert(object, o.ID(), m.now)
	now := fmt.Sprintf("%s=%s", LabelRev, current)
	if !has {
		now = "no " + LabelRev
	}
	left := current
	if enrolled {
		now = fmt.Sprintf("%s=%s and %s", LabelDataplaneMode, DataplaneAmbient, now)
	}
	if enrolled || !has {
		left = now
	}
	who := ownerOrSomeone(o, owned2)
	hand := fmt.Sprintf("hand the label over: set %s=%s in git and let meshwave run the waves, or %s", LabelRev, owned, handOver(o, owned2, "/metadata/labels/istio.io~1rev"))
	if m.st.Target == TargetAuto {
		hand = "hand the label over: " + handOver(o, owned2, "/metadata/labels/istio.io~1rev") + " (the target auto moves it again each time the mesh's default moves)"
	}
	m.out.Reverts = append(m.out.Reverts, RevertSeen{Kind: RevertLabel, Owner: o.ID()})
	if r.Count < labelRevertLimit {
		msg := fmt.Sprintf("namespace %s carries %s while meshwave owns its label at %s; it is applied by %s. Put back to %s (%d of %d times before meshwave stops and pauses); %s",
			ns.Name, now, owned, who, owned, r.Count, labelRevertLimit, hand)
		m.event("", EventWarning, "LabelReverted", msg)
		st.warn(LabelRev+" on namespace", msg)
		return false
	}
	created := "pods created now get that revision"
	if enrolled {
		created = "pods created now come up in ambient"
	}
	reason := fmt.Sprintf("%s on namespace %s was switched away from %s %d times by %s: meshwave leaves it at %s rather than fight, and %s; %s, then remove %s",
		LabelRev, ns.Name, owned, r.Count, who, left, created, hand, AnnotationPaused)
	m.event("", EventWarning, "LabelReverted", reason)
	st.warn(LabelRev+" on namespace", reason)
	switch {
	case st.Phase == PhaseMigrating || st.Phase == PhaseAnalyzing || st.Phase == PhaseRollingBack:
		pause(m, "wave "+fmt.Sprint(st.Wave)+" paused: "+reason)
		return true
	case st.Phase == PhaseBlocked && slices.Contains([]Phase{PhaseMigrating, PhaseAnalyzing, PhaseRollingBack}, st.BlockedPhase):
		// Blocked half-way: the migration the block holds resumes
		// paused, not with a label it no longer puts back.
		blocked := *st
		st.Phase = st.BlockedPhase
		pause(m, "wave "+fmt.Sprint(st.Wave)+" paused: "+reason)
		st.BlockedPhase, st.Phase, st.Reason = st.Phase, PhaseBlocked, blocked.Reason
	}
	return false
}

// labelHeld reports whether meshwave gave the label up to whoever
// switches it: it is then not put back until a person resumes.
func (s *Status) labelHeld() bool {
	for _, r := range s.Reverts {
		if strings.HasPrefix(r.Object, "Namespace/") && r.Count >= labelRevertLimit {
			return true
		}
	}
	return false
}

// labelHeldBy reports whether meshwave gave the label up to owner (an
// Owner.ID, not ""), the owner it saw switch it.
func (s *Status) labelHeldBy(owner string) bool {
	for _, r := range s.Reverts {
		if strings.HasPrefix(r.Object, "Namespace/") && r.Count >= labelRevertLimit && owner != "" && r.Owner == owner {
			return true
		}
	}
	return false
}

// resumeLabel forgets the label's reverts when a person resumes: meshwave
// puts the label back again.
func (s *Status) resumeLabel() {
	s.Reverts = slices.DeleteFunc(s.Reverts, func(r Revert) bool { return strings.HasPrefix(r.Object, "Namespace/") })
}

// validReverts checks the reverts of a status read back.
func validReverts(rs []Revert) error {
	if len(rs) > maxReverts {
		return fmt.Errorf("reverts (%d entries) is not at most %d entries", len(rs), maxReverts)
	}
	seen := map[string]bool{}
	for i, r := range rs {
		_, _, isWorkload := SplitWorkloadID(r.Object)
		if (!isWorkload && !strings.HasPrefix(r.Object, "Namespace/") && !validWaveObject(r.Object)) || seen[r.Object] || r.Count < 1 || r.Count > maxWorkloads || r.At.IsZero() || len(r.Owner) > 512 {
			return fmt.Errorf("reverts[%d] %q is not a namespace or workload listed once, seen 1 or more times, with a time", i, r.Object)
		}
		seen[r.Object] = true
	}
	return nil
}

// moveAgain handles a member whose move in this wave was undone and
// reported: once a person resumed the namespace after the report, it is
// moved again, with an Event that says so. ok is false when the revert
// was not reported in this wave yet.
func moveAgain(m *machine, w Workload) (issued, ok bool) {
	st := m.st
	r := st.revert(w.Name)
	if r == nil {
		// More members than the list holds were undone whole: the wave's
		// own entry says when they were reported, by an earlier decision
		// (one noted now is another member's report, not this one's).
		if r = st.revert(waveRevertObject(st.Wave)); r != nil && !r.At.Before(m.now) {
			r = nil
		}
	}
	if r == nil || st.WaveStartedAt == nil || r.At.Before(*st.WaveStartedAt) {
		return false, false
	}
	if w.RolledOutRestart.After(r.At) {
		// The restart undone now came after the report: the second move
		// was undone too. It is reported again, and waits for a person
		// again: meshwave never fights a self-heal with restarts.
		return false, false
	}
	if st.GatesSince == nil || !r.At.Before(*st.GatesSince) {
		return false, true // reported; the pause waits for a person
	}
	rec := moveRecord(st, m.now)
	addMove(m, w, rec, fmt.Sprintf("moving to %s in wave %d a second time: its first move was undone (reported at %s) and the namespace was resumed since",
		st.TargetRevision, st.Wave, r.At.UTC().Format(time.RFC3339)))
	return true, true
}

// memberRevertReported reports a member of the wave in flight whose move
// was undone whole (template and record), and returns the pause's reason.
func memberRevertReported(m *machine, w Workload) string {
	st := m.st
	o, owned := OwnerOf(w.Labels, w.Annotations)
	// The wave's entry first: it stays while member entries come and go,
	// so a member whose own entry is pushed out is still known as
	// reported, and one resume moves every member again.
	if wr := st.revert(waveRevertObject(st.Wave)); wr == nil || wr.At.Before(m.now) {
		st.noteRevert(waveRevertObject(st.Wave), o.ID(), m.now)
	}
	st.noteRevert(w.Name, o.ID(), m.now)
	who := ownerOrSomeone(o, owned)
	// A Deployment rolls a template out in a ReplicaSet; a StatefulSet or
	// DaemonSet records it in a ControllerRevision.
	rolledOutIn := "a ReplicaSet"
	if w.KindOf() != KindDeployment {
		rolledOutIn = "a ControllerRevision"
	}
	msg := fmt.Sprintf("%s was restarted in wave %d (%s carries its stamp %s), then %s put its template back and removed its %s record: meshwave does not restart it again on its own. %s; then remove %s to move it again, or set %s on it",
		describe(w.Name), st.Wave, rolledOutIn, w.RolledOutRestart.UTC().Format(time.RFC3339), who, AnnotationMove,
		capitalized(handOver(o, owned, "meshwave's keys")), AnnotationPaused, AnnotationSkip)
	m.event(w.Name, EventWarning, "TemplateReverted", msg)
	st.warn(describe(w.Name)+"'s template", msg)
	m.out.Reverts = append(m.out.Reverts, RevertSeen{Kind: RevertTemplate, Owner: o.ID()})
	return fmt.Sprintf("the move of %s was undone by %s", describe(w.Name), who)
}

// validWaveObject reports whether object is a wave's entry, "Wave/<n>".
func validWaveObject(object string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(object, "Wave/"))
	return strings.HasPrefix(object, "Wave/") && err == nil && n >= 1 && n <= maxWaves
}
