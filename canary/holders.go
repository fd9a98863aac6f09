package canary

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Owner kinds of a pod, as the caller resolves them: the workload kinds
// meshwave moves (Deployment through its ReplicaSet, StatefulSet,
// DaemonSet), and those it never restarts. A Job a CronJob created is
// named by its CronJob; a pod with no controller is a bare Pod. Any other
// controller (an Argo Rollout, an operator's custom resource) keeps its own
// kind.
const (
	OwnerDeployment  = string(KindDeployment)
	OwnerStatefulSet = string(KindStatefulSet)
	OwnerDaemonSet   = string(KindDaemonSet)
	OwnerCronJob     = "CronJob"
	OwnerJob         = "Job"
	OwnerReplicaSet  = "ReplicaSet"
	OwnerPod         = "Pod"
)

// Owner is what keeps a pod: the top of its controller chain, as far as
// moving it goes.
type Owner struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// HolderPod is a pod whose sidecar.istio.io/status names the revision in
// question.
type HolderPod struct {
	Namespace string
	Name      string
	Owner     Owner
	// Phase is the pod's phase: Pending, Running, Succeeded, Failed or
	// Unknown.
	Phase       string
	Terminating bool
	// RevLabel is the pod's own istio.io/rev label, which selects the
	// revision of its next copy when its namespace selects none.
	RevLabel string
}

// HolderNamespace is a namespace that holds one of the pods.
type HolderNamespace struct {
	Name   string
	Labels map[string]string
	// Plan is set when the namespace opted in (meshwave.io/target-revision):
	// its plan from PlanWaves, which carries the status the namespace's
	// decision goes on from (Read).
	Plan *NamespacePlan
}

// HoldersInput is every pod injected by Revision and what meshwave knows
// of their namespaces.
type HoldersInput struct {
	Revision   string
	Pods       []HolderPod
	Namespaces map[string]HolderNamespace
	// Mesh resolves the tags a namespace's injection label may name.
	Mesh Mesh
}

// HolderState says whether meshwave moves a holder off the revision.
type HolderState string

const (
	// HolderWillMove: in a wave of the plan still to run.
	HolderWillMove HolderState = "will-move"
	// HolderMoving: in the wave in flight.
	HolderMoving HolderState = "moving"
	// HolderCannot: meshwave does not move it; the reason says why.
	HolderCannot HolderState = "cannot"
	// HolderLeaving: every one of its pods here is being deleted.
	HolderLeaving HolderState = "leaving"
	// HolderFinished: its pods completed or failed; they run no proxy.
	HolderFinished HolderState = "finished"
)

// HolderReason is a holder's reason as a short code, for scripts and the
// meshwave_revision_holders metric's reason label. The set is fixed.
type HolderReason string

const (
	ReasonWillMove HolderReason = "will_move"
	ReasonMoving   HolderReason = "moving"
	// ReasonRollingBack: its namespace is rolling back.
	ReasonRollingBack HolderReason = "rolling_back"
	ReasonTerminating HolderReason = "terminating"
	// The planner's exclusions: a gateway, meshwave.io/skip, a paused
	// Deployment, and any other (a StatefulSet's partition, ...).
	ReasonGateway        HolderReason = "gateway"
	ReasonSkip           HolderReason = "skip"
	ReasonWorkloadPaused HolderReason = "workload_paused"
	ReasonExcluded       HolderReason = "excluded"
	// ReasonFailedWave: it failed its wave and stays where it is.
	ReasonFailedWave HolderReason = "failed_wave"
	// ReasonMoved: moved by the migration, yet a pod here was not replaced.
	ReasonMoved HolderReason = "moved"
	// ReasonNotPlanned: the namespace's plan does not name it.
	ReasonNotPlanned       HolderReason = "not_planned"
	ReasonNamespaceBlocked HolderReason = "namespace_blocked"
	// ReasonMigrationEnded: the namespace's migration completed or was
	// rolled back; nothing moves until its target is set again.
	ReasonMigrationEnded HolderReason = "migration_ended"
	ReasonNotOptedIn     HolderReason = "not_opted_in"
	// ReasonTargetsRevision: the namespace's target is this revision.
	ReasonTargetsRevision HolderReason = "targets_revision"
	// ReasonCronJob: its next run starts elsewhere (or without a sidecar);
	// ReasonCronJobSameRevision: its next run starts on this revision again.
	ReasonCronJob             HolderReason = "cronjob"
	ReasonCronJobSameRevision HolderReason = "cronjob_same_revision"
	ReasonJob                 HolderReason = "job"
	ReasonReplicaSet          HolderReason = "replicaset"
	ReasonBarePod             HolderReason = "bare_pod"
	ReasonOtherOwner          HolderReason = "other_owner"
	ReasonPodSucceeded        HolderReason = "pod_succeeded"
	ReasonPodFailed           HolderReason = "pod_failed"
	// ReasonAmbient: it runs no sidecar, in ambient mode through a
	// ztunnel of this revision on its node.
	ReasonAmbient HolderReason = "ambient"
)

// HolderReasons lists every reason code.
var HolderReasons = []HolderReason{ReasonWillMove, ReasonMoving, ReasonRollingBack, ReasonTerminating,
	ReasonGateway, ReasonSkip, ReasonWorkloadPaused, ReasonExcluded, ReasonFailedWave, ReasonMoved,
	ReasonNotPlanned, ReasonNamespaceBlocked, ReasonMigrationEnded, ReasonNotOptedIn, ReasonTargetsRevision,
	ReasonCronJob, ReasonCronJobSameRevision, ReasonJob, ReasonReplicaSet, ReasonBarePod, ReasonOtherOwner,
	ReasonPodSucceeded, ReasonPodFailed, ReasonAmbient}

// Holder is one owner's pods in one namespace that hold the revision.
type Holder struct {
	Namespace string      `json:"namespace"`
	Kind      string      `json:"kind"`
	Name      string      `json:"name"`
	State     HolderState `json:"state"`
	// Wave is the wave that moves it: the plan's (will-move) or the one in
	// flight (moving); 0 otherwise.
	Wave   int          `json:"wave,omitempty"`
	Code   HolderReason `json:"code"`
	Reason string       `json:"reason"`
	// Phase is the pods' phase, for finished holders: Succeeded or Failed.
	Phase string   `json:"phase,omitempty"`
	Pods  []string `json:"pods"`
}

// Holders is what still holds a revision: the pods that run its proxy,
// and apart, the completed and failed pods it injected, which run none
// but which tools that count pods (the Sail Operator) take as the
// revision in use until they are deleted.
type Holders struct {
	Revision string `json:"revision"`
	// Pods counts the pods of Holders: those that run the revision's proxy.
	Pods    int      `json:"pods"`
	Holders []Holder `json:"holders"`
	// FinishedPods counts the pods of Finished.
	FinishedPods int      `json:"finishedPods"`
	Finished     []Holder `json:"finished"`
	// Note is a remark of the caller's on the question, such as a tag
	// asked for where a revision was meant.
	Note string `json:"note,omitempty"`
	// AmbientPods counts the pods of Ambient: pods that run no sidecar,
	// enrolled in ambient mode, on nodes whose ztunnel this revision
	// serves (its pods carry istio.io/rev of the revision). They need the
	// revision as much as its sidecars do.
	AmbientPods int             `json:"ambientPods,omitempty"`
	Ambient     []AmbientHolder `json:"ambient,omitempty"`
}

// AmbientHolder is a workload whose pods run in ambient mode through the
// revision's ztunnels.
type AmbientHolder struct {
	Namespace string   `json:"namespace"`
	Kind      string   `json:"kind"`
	Name      string   `json:"name"`
	Pods      []string `json:"pods"`
	// Nodes are the nodes its pods run on, in name order.
	Nodes []string `json:"nodes"`
}

// PodsByReason counts the pods of every holder, finished ones included,
// by reason code.
func (h Holders) PodsByReason() map[HolderReason]int {
	out := map[HolderReason]int{}
	for _, list := range [][]Holder{h.Holders, h.Finished} {
		for _, x := range list {
			out[x.Code] += len(x.Pods)
		}
	}
	return out
}

// ClassifyHolders groups the pods injected by in.Revision by namespace and
// owner and says of each group whether meshwave will move it, is moving
// it, or cannot, and why. Pods that Succeeded or Failed are listed apart,
// by phase. Both lists are ordered by namespace, kind (the kinds meshwave
// moves first, a bare Pod last) and name; pods by name.
//
// For example, in a namespace moving from 1-25 to 1-26 whose plan has
// cart in its next wave, the holders of 1-25 are Deployment cart, will
// move in wave 2, and CronJob report (its running Job finishes on 1-25,
// its next run starts on 1-26).
func ClassifyHolders(in HoldersInput) Holders {
	type key struct {
		ns, kind, name, phase string
	}
	live := map[key]*Holder{}
	terminating := map[key]int{}
	// revLabel is the istio.io/rev label of a group's pod first by name:
	// the pods of one owner share a template.
	revLabel := map[key]string{}
	labelFrom := map[key]string{}
	finished := map[key]*Holder{}
	out := Holders{Revision: in.Revision, Holders: []Holder{}, Finished: []Holder{}}
	for _, p := range in.Pods {
		owner := p.Owner
		if owner.Kind == "" || owner.Name == "" {
			owner = Owner{Kind: OwnerPod, Name: p.Name}
		}
		if p.Phase == "Succeeded" || p.Phase == "Failed" {
			k := key{p.Namespace, owner.Kind, owner.Name, p.Phase}
			h := finished[k]
			if h == nil {
				h = &Holder{Namespace: p.Namespace, Kind: owner.Kind, Name: owner.Name, State: HolderFinished, Phase: p.Phase}
				finished[k] = h
			}
			h.Pods = append(h.Pods, p.Name)
			out.FinishedPods++
			continue
		}
		k := key{p.Namespace, owner.Kind, owner.Name, ""}
		h := live[k]
		if h == nil {
			h = &Holder{Namespace: p.Namespace, Kind: owner.Kind, Name: owner.Name}
			live[k] = h
		}
		if from, ok := labelFrom[k]; !ok || p.Name < from {
			revLabel[k], labelFrom[k] = p.RevLabel, p.Name
		}
		h.Pods = append(h.Pods, p.Name)
		if p.Terminating {
			terminating[k]++
		}
		out.Pods++
	}
	c := classifier{rev: in.Revision, mesh: in.Mesh, namespaces: in.Namespaces, plans: map[string]*planIndex{}}
	for k, h := range live {
		if terminating[k] == len(h.Pods) {
			h.State, h.Code = HolderLeaving, ReasonTerminating
			h.Reason = fmt.Sprintf("every pod of this %s here is being deleted", h.Kind)
		} else {
			c.classify(h, revLabel[k])
		}
		out.Holders = append(out.Holders, *h)
	}
	for _, h := range finished {
		h.Code, h.Reason = ReasonPodSucceeded, "completed: runs no proxy, but tools that count pods (the Sail Operator) see "+in.Revision+" in use until it is deleted"
		if h.Phase == "Failed" {
			h.Code, h.Reason = ReasonPodFailed, "failed: runs no proxy, but tools that count pods (the Sail Operator) see "+in.Revision+" in use until it is deleted"
		}
		out.Finished = append(out.Finished, *h)
	}
	sortHolders(out.Holders)
	sortHolders(out.Finished)
	return out
}

func sortHolders(hs []Holder) {
	for i := range hs {
		slices.Sort(hs[i].Pods)
	}
	slices.SortFunc(hs, func(a, b Holder) int {
		return cmp.Or(
			strings.Compare(a.Namespace, b.Namespace),
			cmp.Compare(ownerRank(a.Kind), ownerRank(b.Kind)),
			strings.Compare(a.Kind, b.Kind),
			strings.Compare(a.Name, b.Name),
			strings.Compare(a.Phase, b.Phase),
		)
	})
}

// ownerRank orders kinds: those meshwave moves, in their default order,
// then those it never restarts, a bare Pod last.
func ownerRank(kind string) int {
	switch kind {
	case OwnerDeployment:
		return 0
	case OwnerStatefulSet:
		return 1
	case OwnerDaemonSet:
		return 2
	case OwnerCronJob:
		return 3
	case OwnerJob:
		return 4
	case OwnerReplicaSet:
		return 5
	case OwnerPod:
		return 7
	}
	return 6
}

type classifier struct {
	rev        string
	mesh       Mesh
	namespaces map[string]HolderNamespace
	plans      map[string]*planIndex
}

// planIndex is a namespace's plan and status, by workload ID.
type planIndex struct {
	plan *NamespacePlan
	// st is the status the namespace's decision goes on from, when it is
	// of a migration under way or ended (not a new one); undoing says it
	// is being rolled back, or asked to be, first.
	st        *Status
	undoing   bool
	wave      map[string]int
	members   map[string]string
	moved     map[string]bool
	failed    map[string]bool
	excluded  map[string]string
	blocked   string
	firstWave int
}

func (c *classifier) index(ns string) *planIndex {
	if ix, ok := c.plans[ns]; ok {
		return ix
	}
	n := c.namespaces[ns]
	if n.Plan == nil {
		c.plans[ns] = nil
		return nil
	}
	p := n.Plan
	ix := &planIndex{plan: p, wave: map[string]int{}, members: map[string]string{}, moved: map[string]bool{},
		failed: map[string]bool{}, excluded: map[string]string{}, firstWave: 1}
	if st := p.status; st != nil {
		// The status the namespace's decision goes on from: its own
		// migration's (or one rebuilt from the records), or one being
		// rolled back before a new target.
		ix.st, ix.undoing = st, p.undoing
		for _, m := range st.Workloads {
			ix.members[m.Name] = m.State
		}
	}
	ix.firstWave = p.FirstWave()
	for i, w := range p.Waves {
		for _, x := range w {
			ix.wave[x.Name] = ix.firstWave + i
		}
	}
	for _, name := range p.Moved {
		ix.moved[name] = true
	}
	for _, name := range p.Failed {
		ix.failed[name] = true
	}
	for _, x := range p.Excluded {
		if x.Workload == "*" {
			ix.blocked = x.Reason
		}
		ix.excluded[x.Workload] = x.Reason
	}
	c.plans[ns] = ix
	return ix
}

// classify sets h's state, wave and reason. revLabel is its pods'
// istio.io/rev label.
func (c *classifier) classify(h *Holder, revLabel string) {
	this := "this " + h.Kind
	switch h.Kind {
	case OwnerDeployment, OwnerStatefulSet, OwnerDaemonSet:
		c.classifyMoved(h)
	case OwnerCronJob:
		next, why := c.nextRevision(h.Namespace, revLabel)
		switch {
		case next == c.rev:
			cannot(h, ReasonCronJobSameRevision, "meshwave never restarts a Job: %s's running Job finishes on %s, and its next run starts on %s again (%s)", this, c.rev, c.rev, why)
		case next == "":
			cannot(h, ReasonCronJob, "meshwave never restarts a Job: %s's running Job finishes on %s; its next run starts without a sidecar (%s)", this, c.rev, why)
		default:
			cannot(h, ReasonCronJob, "meshwave never restarts a Job: %s's running Job finishes on %s; its next run starts on %s (%s)", this, c.rev, next, why)
		}
	case OwnerJob:
		cannot(h, ReasonJob, "meshwave never restarts a Job: %s finishes on %s", this, c.rev)
	case OwnerReplicaSet:
		cannot(h, ReasonReplicaSet, "%s has no Deployment, and nothing restarts its pods when its template changes: it needs a person (replace its pods one at a time, or put it under a Deployment)", this)
	case OwnerPod:
		next, why := c.nextRevision(h.Namespace, revLabel)
		again := ""
		switch {
		case next == "":
			again = "; created again now, it would get no sidecar (" + why + ")"
		case next != c.rev:
			again = "; created again now, it would run " + next + " (" + why + ")"
		default:
			again = "; created again now, it would run " + c.rev + " again (" + why + ")"
		}
		cannot(h, ReasonBarePod, "a bare Pod has no controller to create it again: it needs a person%s", again)
	default:
		cannot(h, ReasonOtherOwner, "meshwave does not move a %s: restart it through its own controller", h.Kind)
	}
}

// classifyMoved classifies a Deployment, StatefulSet or DaemonSet.
func (c *classifier) classifyMoved(h *Holder) {
	ix := c.index(h.Namespace)
	if ix == nil {
		cannot(h, ReasonNotOptedIn, "namespace %s has not opted in (no %s): meshwave does not move this %s", h.Namespace, AnnotationTargetRevision, h.Kind)
		return
	}
	p, st := ix.plan, ix.st
	if ix.blocked != "" {
		cannot(h, ReasonNamespaceBlocked, "namespace %s is blocked, so meshwave does not move this %s: %s", h.Namespace, h.Kind, ix.blocked)
		return
	}
	target := p.TargetRevision
	if target == "" {
		target = p.Target
	}
	planned, targets := target, target == c.rev
	if st != nil && st.TargetRevision != "" && st.keepsRevision() {
		// Ended or being undone: its own revision, whatever a repointed
		// tag names now.
		target = st.TargetRevision
	}
	switch {
	case st != nil && ix.undoing:
		c.rollingBack(h, st, p, planned)
	case targets:
		cannot(h, ReasonTargetsRevision, "namespace %s targets %s itself: this %s stays on it", h.Namespace, c.rev, h.Kind)
	case st != nil && inMigration(h, ix, target):
	default:
		byPlan(h, ix, target)
	}
}

// cannot says meshwave does not move h, and why.
func cannot(h *Holder, code HolderReason, format string, args ...any) {
	h.State, h.Code, h.Reason = HolderCannot, code, fmt.Sprintf(format, args...)
}

// rollingBack classifies a holder in a namespace rolling back: away from
// the target, back to the source, whichever h holds; after the rollback,
// a new target's migration moves the source's holders.
func (c *classifier) rollingBack(h *Holder, st *Status, p *NamespacePlan, planned string) {
	h.Code, h.Reason = ReasonRollingBack, fmt.Sprintf("namespace %s is rolling back to %s", h.Namespace, st.SourceRevision)
	h.State = HolderCannot
	switch {
	case c.rev != st.SourceRevision:
		h.State = HolderMoving
	case st.Target != p.Target:
		// Its new target's migration starts once the rollback ends.
		h.State = HolderWillMove
		h.Reason += fmt.Sprintf(", then to %s (%s=%s)", planned, AnnotationTargetRevision, p.Target)
	}
}

// inMigration classifies h by the status of its namespace's migration: a
// namespace blocked or ended, or h a member of the wave in flight. It
// reports whether the status settled it.
func inMigration(h *Holder, ix *planIndex, target string) bool {
	st, this := ix.st, "this "+h.Kind
	switch st.Phase {
	case PhaseBlocked:
		cannot(h, ReasonNamespaceBlocked, "namespace %s is blocked, so meshwave does not move %s: %s", h.Namespace, this, st.Reason)
		return true
	case PhaseCompleted, PhaseRolledBack:
		cannot(h, ReasonMigrationEnded, "the migration of namespace %s to %s is %s: nothing moves %s until %s is set again", h.Namespace, target, st.Phase, this, AnnotationTargetRevision)
		return true
	}
	switch ix.members[WorkloadID(Kind(h.Kind), h.Name)] {
	case StateMoving:
		if st.WaveState == WaveFailed {
			cannot(h, ReasonFailedWave, "%s is in wave %d to %s, which failed: namespace %s is paused until a person resumes it or rolls it back", this, st.Wave, target, h.Namespace)
			return true
		}
		h.State, h.Code, h.Wave = HolderMoving, ReasonMoving, st.Wave
		h.Reason = fmt.Sprintf("%s is in wave %d to %s, in flight", this, st.Wave, target)
	case StateFailed:
		cannot(h, ReasonFailedWave, "%s failed its wave %d to %s and stays where it is", this, st.Wave, target)
	case StateMoved:
		cannot(h, ReasonMoved, "%s was moved to %s, yet these pods were not replaced", this, target)
	case StateSkipped:
		cannot(h, ReasonSkip, "%s was taken out of wave %d (%s)", this, st.Wave, AnnotationSkip)
	default:
		return false
	}
	return true
}

// byPlan classifies h by its namespace's plan: a wave still to run, a
// failure it stays on, the planner's exclusion, a move made.
func byPlan(h *Holder, ix *planIndex, target string) {
	id, this := WorkloadID(Kind(h.Kind), h.Name), "this "+h.Kind
	if wave, ok := ix.wave[id]; ok {
		h.State, h.Code, h.Wave = HolderWillMove, ReasonWillMove, wave
		h.Reason = fmt.Sprintf("meshwave moves %s to %s in wave %d", this, target, wave)
		if ix.st != nil && ix.st.Phase == PhasePaused {
			h.Reason += fmt.Sprintf(", once namespace %s resumes (%s)", h.Namespace, AnnotationPaused)
		}
		return
	}
	if ix.failed[id] {
		cannot(h, ReasonFailedWave, "%s failed its wave to %s and stays where it is (failure policy Continue)", this, target)
		return
	}
	if reason, ok := ix.excluded[id]; ok {
		cannot(h, exclusionCode(reason), "the plan leaves %s out: %s", this, reason)
		return
	}
	if ix.moved[id] {
		cannot(h, ReasonMoved, "%s was moved to %s, yet these pods were not replaced", this, target)
		return
	}
	cannot(h, ReasonNotPlanned, "the plan of namespace %s does not name %s", h.Namespace, this)
}

// exclusionCode is the code of one of the planner's exclusion reasons.
func exclusionCode(reason string) HolderReason {
	switch {
	case strings.HasPrefix(reason, "gateway"):
		return ReasonGateway
	case strings.HasPrefix(reason, AnnotationSkip):
		return ReasonSkip
	case strings.HasPrefix(reason, "paused"):
		return ReasonWorkloadPaused
	}
	return ReasonExcluded
}

// nextRevision is the revision Istio injects into a new pod of namespace
// ns whose own istio.io/rev label is podLabel, and what selects it. The
// namespace's istio-injection label takes precedence over its istio.io/rev,
// which takes precedence over the pod's. "" is no sidecar.
func (c *classifier) nextRevision(ns, podLabel string) (string, string) {
	labels := c.namespaces[ns].Labels
	resolve := func(v string) string {
		if rev, ok := c.mesh.Resolve(v); ok {
			return rev
		}
		return v
	}
	if v, ok := labels[LabelInjection]; ok {
		if v == "enabled" {
			return resolve("default"), fmt.Sprintf("%s=enabled on namespace %s selects the default revision", LabelInjection, ns)
		}
		return "", fmt.Sprintf("namespace %s has %s=%s", ns, LabelInjection, v)
	}
	if v, ok := labels[LabelRev]; ok {
		return resolve(v), fmt.Sprintf("%s=%s on namespace %s", LabelRev, v, ns)
	}
	if podLabel != "" {
		return resolve(podLabel), fmt.Sprintf("its pods' own %s=%s", LabelRev, podLabel)
	}
	return "", fmt.Sprintf("namespace %s selects no revision", ns)
}
