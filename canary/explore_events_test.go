package canary

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// exploration is what does not change while one seed is explored: the
// agent's configuration, the clock's step per reconcile, what git holds,
// each namespace's target, and the events that may happen.
type exploration struct {
	cfg Config
	// step is how far the clock moves at each reconcile: past the delay
	// between waves, so that a wave that passed is followed by the next
	// one at the following reconcile.
	step time.Duration
	// targets are the namespaces' own targets, put back by an opt-in and
	// by the fix of an invalid target.
	targets map[string]string
	// gitLabel is the istio.io/rev a GitOps owner puts back on a
	// namespace; gitWorkloads are the GitOps-owned workloads as git holds
	// them, by namespace and name.
	gitLabel     string
	gitWorkloads map[string]map[string]Workload
	events       []event
	// compareFacts makes each reconcile decide a second time, from the
	// workloads' Facts (the facts-agree invariant).
	compareFacts bool
	// settled memoises the settles check by the state it starts from.
	settledMu sync.Mutex
	settled   map[[16]byte]string
}

// An event is something that happens to the world: a reconcile, or what a
// person, a GitOps owner, a stale writer or the clock does. successors
// emits each way it can happen from c (none when it cannot), each on a
// copy of c.
type event struct {
	name       string
	group      string
	successors func(x *exploration, c *cluster, emit func(transition))
}

// transition is one way from a state to the next.
type transition struct {
	label string
	to    *cluster
	// ns is the index of the namespace the event concerns (-1: the mesh
	// or the clock); decided is the decision of a reconcile, nil for the
	// other events.
	ns      int
	decided *decided
}

// decided is a reconcile: the input, the decision, and how much of it was
// carried out.
type decided struct {
	in Input
	d  Decision
	// wave is WaveToVerify's wave, when it returned one, and verdict the
	// verdict chain given ("pass", "final pass", "fail", "inconclusive"; ""
	// for none).
	wave    *WaveUnderTest
	verdict string
	// full is true when every write was made; false when the agent
	// crashed part-way.
	full bool
	// reads counts the reads of the peers (Snapshot.ReadPeers).
	reads int
	// before is the namespace as its peers read it before the decision.
	before Peer
	// restarts are the moves carried out that restarted a workload.
	restarts []Move
	// withFacts is the decision made from the same input with each
	// workload's Facts kept beside it, as the agent hands them in (only
	// when the facts-agree invariant is checked).
	withFacts *Decision
}

// Event groups, for choosing the events of a seed.
const (
	groupAgent   = "agent"   // reconciles, with each verdict chain, and crashes part-way through their writes
	groupStatus  = "status"  // the status lost, emptied, edited back or restored from a stale copy
	groupRecords = "records" // a move record removed
	groupMesh    = "mesh"    // a tag repointed, the target changed
	groupPerson  = "person"  // rollbacks asked, pauses, resumes, opt-outs and opt-ins
	groupGitOps  = "gitops"  // the label or a workload put back from git
	groupClock   = "clock"   // the clock moved to the next edge of the maintenance window
	groupInvalid = "invalid" // invalid and empty values of every annotation read, and their fixes
	groupPeers   = "peers"   // a namespace's priority changed
	groupTempo   = "tempo"   // a reconcile a tenth of a second after the last, as the agent's own write brings it back
)

// exploredEvents is every event, in the order its successors are tried.
var exploredEvents = []event{
	{"reconcile", groupAgent, reconcileEvent},
	{"reconcile at once", groupTempo, reconcileAtOnce},
	{"status lost", groupStatus, statusLost},
	{"status emptied", groupStatus, statusEmptied},
	{"status edited back one wave", groupStatus, statusEditedBack},
	{"status restored from a stale copy", groupStatus, statusRestored},
	{"move record removed", groupRecords, recordRemoved},
	{"tag repointed", groupMesh, tagRepointed},
	{"target changed", groupMesh, targetChanged},
	{"rollback asked", groupPerson, askRollback},
	{"paused or resumed", groupPerson, pausedOrResumed},
	{"opted out or in", groupPerson, optedOutOrIn},
	{"label put back by GitOps", groupGitOps, labelPutBack},
	{"workload put back by GitOps", groupGitOps, workloadPutBack},
	{"maintenance window edge", groupClock, windowEdge},
	{"invalid value set or fixed", groupInvalid, invalidValueEvent},
	{"priority changed", groupPeers, priorityChanged},
}

// prefix names the namespace in a label when the world has more than one.
func prefix(c *cluster, ns *clusterNamespace) string {
	if len(c.namespaces) > 1 {
		return ns.Name + ": "
	}
	return ""
}

// each calls f with each namespace of c and its index.
func each(c *cluster, f func(i int, ns *clusterNamespace)) {
	for i, ns := range c.namespaces {
		f(i, ns)
	}
}

// changed emits a copy of c changed by edit, labelled.
func changed(c *cluster, i int, label string, emit func(transition), edit func(c *cluster, ns *clusterNamespace)) {
	next := c.clone()
	edit(next, next.namespaces[i])
	emit(transition{label: prefix(c, c.namespaces[i]) + label, to: next, ns: i})
}

// --- the agent ---

// concerns is the agent's test of whether a namespace is reconciled at
// all: it opted in, or carries a status.
func concerns(ns *clusterNamespace) bool {
	_, opted := ns.Annotations[AnnotationTargetRevision]
	_, status := ns.Annotations[AnnotationStatus]
	return opted || status
}

// verdictChoice is one verdict chain the gates may answer.
type verdictChoice struct {
	name     string
	verdicts []Verdict
}

// verdictChoices are the answers the gates may give for wave: a pass only
// when every member's pods run the revision it expects (the rollout and
// injection gates check that), and then also a sequential check's final
// pass, a failure of its first member, or an inconclusive sync check. Without a wave, the decision gets no verdicts.
func verdictChoices(wave WaveUnderTest, ok bool, now time.Time) []verdictChoice {
	if !ok {
		return []verdictChoice{{}}
	}
	var out []verdictChoice
	up := true
	for _, m := range wave.Workloads {
		for _, p := range m.Pods {
			if p.Revision != wave.Expect || !p.Ready {
				up = false
			}
		}
	}
	if up {
		out = append(out, verdictChoice{"pass", []Verdict{
			{Gate: "rollout", Result: ResultPass, Reason: "rolled out", At: now},
			{Gate: "injection", Result: ResultPass, Reason: "every new pod runs " + wave.Expect, At: now},
		}}, verdictChoice{"final pass", []Verdict{
			{Gate: "rollout", Result: ResultPass, Reason: "rolled out", At: now},
			{Gate: "error-rate", Result: ResultPass, Reason: "evidence of health 41 of 40: pass", Analysis: true, Checked: true, Final: true, At: now},
		}})
	}
	first := wave.Workloads[0].Name
	out = append(out,
		verdictChoice{"fail", []Verdict{{Gate: "rollout", Result: ResultFail, Reason: first + " did not roll out", At: now,
			Failed: []WorkloadState{{Name: first, State: StateFailed, Reason: "did not roll out"}}}}},
		verdictChoice{"inconclusive", []Verdict{
			{Gate: "rollout", Result: ResultPass, Reason: "rolled out", At: now},
			{Gate: "xds-sync", Result: ResultInconclusive, Reason: "istiod unreachable", RetryAfter: 30 * time.Second, At: now},
		}})
	return out
}

// snapshot is what the agent gathers about ns: its own objects, the mesh,
// and its peers when the decision asks for them (counted in reads).
func (c *cluster) snapshot(ns *clusterNamespace, reads *int) Snapshot {
	snap := Snapshot{
		Namespace: ns.Namespace,
		Workloads: ns.workloads,
		Mesh:      c.mesh(),
	}
	snap.ReadPeers = func() []Peer {
		*reads++
		var peers []Peer
		for _, other := range c.namespaces {
			if other == ns {
				continue
			}
			if p, ok := c.peer(other); ok {
				peers = append(peers, p)
			}
		}
		return peers
	}
	return snap
}

// decide makes the agent's decision on namespace i of c at now, as its
// sync does: the status read back, the wave's gates asked, then Decide.
func (x *exploration) decide(c *cluster, i int, now time.Time, choose func(WaveUnderTest, bool) []verdictChoice, f func(*decided)) {
	ns := c.namespaces[i]
	written, _, statusErr := ParseStatus(ns.Annotations)
	before, _ := c.peer(ns)
	reads := 0
	snap := c.snapshot(ns, &reads)
	wave, verifying := waveToVerify(snap, written, x.cfg)
	for _, choice := range choose(wave, verifying) {
		reads = 0
		in := Input{Snapshot: snap, Status: written, StatusErr: statusErr, Verdicts: choice.verdicts,
			WasOptedIn: ns.wasOptedIn, Now: now, Config: x.cfg}
		dd := &decided{in: in, d: Decide(in), verdict: choice.name, before: before}
		dd.reads = reads
		if x.compareFacts {
			// The same status: had the first decision changed it, the
			// second one would differ.
			kept := in
			var keptReads int
			kept.Snapshot = c.snapshot(ns, &keptReads)
			kept.Snapshot.Workloads = make([]Workload, len(ns.workloads))
			for i, w := range ns.workloads {
				w.Facts = ReadFacts(&w)
				kept.Snapshot.Workloads[i] = w
			}
			d := Decide(kept)
			dd.withFacts = &d
		}
		if verifying {
			dd.wave = &wave
		}
		f(dd)
	}
}

// reconcileEvent is a reconcile of each namespace meshwave concerns, the
// clock one step later, with every verdict chain the gates may answer;
// each decision is carried out whole, and also cut short by a crash after
// the namespace write and after each single patch of several.
func reconcileEvent(x *exploration, c *cluster, emit func(transition)) {
	now := c.now.Add(x.step)
	x.reconcile(c, x.step, "reconcile", func(w WaveUnderTest, ok bool) []verdictChoice { return verdictChoices(w, ok, now) }, emit)
}

// reconcileAtOnce is a reconcile soon after the last one (the agent's
// `soon`), in the same second as often as not: the watch event of its own
// write brings a namespace back at once. It reaches restarts and
// rollbacks stamped in the same second. The gates answer what they see
// (honestGates): a failure or an inconclusive answer is the reconcile's
// a minute later.
func reconcileAtOnce(x *exploration, c *cluster, emit func(transition)) {
	x.reconcile(c, soon, "reconcile at once", honestGates, emit)
}

func (x *exploration) reconcile(c *cluster, after time.Duration, what string, gates func(WaveUnderTest, bool) []verdictChoice, emit func(transition)) {
	now := c.now.Add(after)
	for i, ns := range c.namespaces {
		if !concerns(ns) {
			continue
		}
		x.decide(c, i, now, gates, func(dd *decided) {
			label := prefix(c, ns) + what
			if dd.verdict != "" {
				label += ", gates " + dd.verdict
			}
			writes := len(dd.d.Moves) + len(dd.d.Evictions)
			emit(x.carryOut(c, i, now, dd, label, -1))
			if writes == 0 {
				return
			}
			emit(x.carryOut(c, i, now, dd, label+"; crash after the namespace write", 0))
			if len(dd.d.Moves) < 2 {
				return
			}
			for k := range dd.d.Moves {
				emit(x.carryOut(c, i, now, dd, label+"; crash after only the patch of "+dd.d.Moves[k].Workload, k+1))
			}
		})
	}
}

// carryOut applies decision dd to a copy of c as the agent's act does:
// the namespace write first (status, paused, rollback, label), then the
// workload patches, then the evictions. only is -1 for all of it, 0 for
// the namespace write alone, k for the namespace write and the k-th patch
// alone: the agent crashed, and its memory of what it decided before is
// gone.
func (x *exploration) carryOut(c *cluster, i int, now time.Time, in *decided, label string, only int) transition {
	dd := *in
	dd.full = only < 0
	dd.restarts = nil
	next := c.clone()
	next.now = now
	ns := next.namespaces[i]
	ns.ownLedgers()
	d := dd.d
	// The gates passed the wave, or its failure was tolerated (the
	// Continue policy): the next wave may start.
	if w := dd.wave; w != nil && !w.Rollback && dd.in.Status != nil && (dd.verdict == "pass" || dd.verdict == "final pass" || hasEvent(d, "FailureTolerated")) {
		ns.passed[fmt.Sprintf("%s#%d", dd.in.Status.MigrationID(), w.Wave)] = true
	}
	if err := applyNamespaceWrite(ns, d); err != nil {
		panic(err) // reported by the check that every status reads back
	}
	noteReports(ns, c.namespaces[i], d)
	for k, m := range d.Moves {
		if only >= 0 && only != k+1 {
			continue
		}
		if err := next.applyMove(ns, m); err != nil {
			panic(err)
		}
		if !m.RecordOnly {
			dd.restarts = append(dd.restarts, m)
			ns.restarts[m.Workload] = restartLedger{key: restartKey(m.Record), wave: m.Record.Wave}
		}
	}
	if only < 0 {
		for _, e := range d.Evictions {
			next.applyEviction(ns, e)
		}
		_, ns.wasOptedIn = dd.in.Snapshot.Namespace.Annotations[AnnotationTargetRevision]
	} else {
		for _, n := range next.namespaces {
			n.wasOptedIn = false
		}
	}
	return transition{label: label, to: next, ns: i, decided: &dd}
}

// noteReports keeps in the ledger what the decision reported: a move undone
// whole (TemplateReverted on a workload that carries no record of it), and
// a person's resume, after which such a move may be made again.
func noteReports(ns, before *clusterNamespace, d Decision) {
	for _, e := range d.Events {
		switch e.Reason {
		case "TemplateReverted":
			r, ok := ns.restarts[e.Workload]
			w := before.workload(e.Workload)
			if !ok || w == nil {
				continue
			}
			if rec, has := ReadMoveRecord(w.Annotations); !has || restartKey(rec) != r.key {
				r.undone = true
				ns.restarts[e.Workload] = r
			}
		case "Resumed":
			for name, r := range ns.restarts {
				if r.undone {
					r.undone, r.again = false, true
					ns.restarts[name] = r
				}
			}
		}
	}
}

// --- the status ---

func statusLost(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		if _, ok := ns.Annotations[AnnotationStatus]; ok {
			changed(c, i, "status lost", emit, func(_ *cluster, ns *clusterNamespace) { delete(ns.Annotations, AnnotationStatus) })
		}
	})
}

func statusEmptied(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		if raw, ok := ns.Annotations[AnnotationStatus]; ok && raw != "" {
			changed(c, i, "status emptied", emit, func(_ *cluster, ns *clusterNamespace) { ns.Annotations[AnnotationStatus] = "" })
		}
	})
}

// statusEditedBack puts back the latest status written on this path at an
// earlier wave than the one the namespace's status is at.
func statusEditedBack(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		st, _, err := ns.status()
		if st == nil || err != nil || st.Wave == 0 {
			return
		}
		for k := len(ns.written) - 1; k >= 0; k-- {
			old, _, err := readStatus(ns.written[k], map[string]string{AnnotationStatus: ns.written[k]})
			if err == nil && old.Wave < st.Wave {
				raw := ns.written[k]
				changed(c, i, "status edited back to "+statusWords(old), emit, func(_ *cluster, ns *clusterNamespace) { ns.Annotations[AnnotationStatus] = raw })
				return
			}
		}
	})
}

// statusRestored puts back each status written on this path, other than
// the one the namespace carries: a stale copy applied, or a deposed
// leader's write.
func statusRestored(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		seen := map[string]bool{ns.Annotations[AnnotationStatus]: true}
		for k, raw := range ns.written {
			if seen[raw] {
				continue
			}
			seen[raw] = true
			changed(c, i, fmt.Sprintf("status restored from the copy written at step %d (%s)", k+1, statusSummary(map[string]string{AnnotationStatus: raw})), emit,
				func(_ *cluster, ns *clusterNamespace) { ns.Annotations[AnnotationStatus] = raw })
		}
	})
}

// --- the records ---

func recordRemoved(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		for _, w := range ns.workloads {
			if _, ok := w.Annotations[AnnotationMove]; ok {
				name := w.Name
				changed(c, i, "move record of "+name+" removed", emit, func(_ *cluster, ns *clusterNamespace) {
					delete(ns.ownWorkload(name).Annotations, AnnotationMove)
				})
			}
		}
	})
}

// --- the mesh ---

// tagRepointed points the tag canary at the other target revision.
func tagRepointed(_ *exploration, c *cluster, emit func(transition)) {
	to := "1-27"
	if c.tags["canary"] == "1-27" {
		to = "1-26"
	}
	next := c.clone()
	next.tags["canary"] = to
	emit(transition{label: "tag canary repointed to " + to, to: next, ns: -1})
}

// targetChanged sets an opted-in namespace's target to each other name: a
// revision, or the tag (which may name the same revision).
func targetChanged(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		current, ok := ns.Annotations[AnnotationTargetRevision]
		if !ok {
			return
		}
		for _, target := range []string{"1-26", "1-27", "canary"} {
			if target != current {
				changed(c, i, "target changed to "+target, emit, func(_ *cluster, ns *clusterNamespace) {
					ns.Annotations[AnnotationTargetRevision] = target
				})
			}
		}
	})
}

// --- people ---

func askRollback(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		for _, scope := range []RollbackScope{RollbackWave, RollbackAll} {
			if ns.Annotations[AnnotationRollback] != string(scope) {
				changed(c, i, "rollback "+string(scope)+" asked", emit, func(_ *cluster, ns *clusterNamespace) {
					ns.Annotations[AnnotationRollback] = string(scope)
				})
			}
		}
	})
}

func pausedOrResumed(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		if _, ok := ns.Annotations[AnnotationPaused]; ok {
			changed(c, i, "resumed ("+AnnotationPaused+" removed)", emit, func(_ *cluster, ns *clusterNamespace) { delete(ns.Annotations, AnnotationPaused) })
		} else {
			changed(c, i, "paused", emit, func(_ *cluster, ns *clusterNamespace) { ns.Annotations[AnnotationPaused] = "true" })
		}
	})
}

func optedOutOrIn(x *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		if _, ok := ns.Annotations[AnnotationTargetRevision]; ok {
			changed(c, i, "opted out (target removed)", emit, func(_ *cluster, ns *clusterNamespace) { delete(ns.Annotations, AnnotationTargetRevision) })
		} else {
			target := x.targets[ns.Name]
			changed(c, i, "opted in to "+target, emit, func(_ *cluster, ns *clusterNamespace) { ns.Annotations[AnnotationTargetRevision] = target })
		}
	})
}

func priorityChanged(_ *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		if _, ok := ns.Annotations[AnnotationPriority]; ok {
			changed(c, i, "priority removed", emit, func(_ *cluster, ns *clusterNamespace) { delete(ns.Annotations, AnnotationPriority) })
		} else {
			changed(c, i, "priority 1", emit, func(_ *cluster, ns *clusterNamespace) { ns.Annotations[AnnotationPriority] = "1" })
		}
	})
}

// --- GitOps owners ---

// labelPutBack is a GitOps owner's self-heal of the namespace: istio.io/rev
// back to the value git holds, the source.
func labelPutBack(x *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		if ns.Labels[LabelRev] != x.gitLabel {
			changed(c, i, LabelRev+" put back to "+x.gitLabel+" by GitOps", emit, func(_ *cluster, ns *clusterNamespace) {
				ns.Labels[LabelRev] = x.gitLabel
			})
		}
	})
}

// workloadPutBack is a GitOps owner's sync of a workload it applies: its
// annotations and template back to what git holds, which drops the move
// record and the restart stamp. A template that changed rolls out new
// pods, injected by the revision the label names now; the ReplicaSet that
// carried the stamp stays (RolledOutRestart).
func workloadPutBack(x *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		for _, name := range slices.Sorted(maps.Keys(x.gitWorkloads[ns.Name])) {
			git := x.gitWorkloads[ns.Name][name]
			w := ns.workload(name)
			if w == nil || maps.Equal(w.Annotations, git.Annotations) && maps.Equal(w.TemplateAnnotations, git.TemplateAnnotations) {
				continue
			}
			changed(c, i, name+" put back whole from git", emit, func(c *cluster, ns *clusterNamespace) {
				ns.ownLedgers()
				w := ns.workload(name)
				templateChanged := !maps.Equal(w.TemplateAnnotations, git.TemplateAnnotations) || !maps.Equal(w.TemplateLabels, git.TemplateLabels)
				w.Annotations = maps.Clone(git.Annotations)
				w.TemplateAnnotations = maps.Clone(git.TemplateAnnotations)
				w.TemplateLabels = maps.Clone(git.TemplateLabels)
				if templateChanged {
					c.recreatePods(ns, w)
					if r, ok := ns.restarts[name]; ok {
						r.outside = true
						ns.restarts[name] = r
					}
				}
			})
		}
	})
}

// --- the clock ---

// windowEdge moves the clock to the next edge of the configured
// maintenance window: its close while it is open, its opening while it is
// closed.
func windowEdge(x *exploration, c *cluster, emit func(transition)) {
	ws := x.cfg.MaintenanceWindows
	if len(ws) == 0 {
		return
	}
	edge, what := c.now, "closes"
	if WindowsOpen(c.now, ws) {
		for WindowsOpen(edge, ws) {
			edge = edge.Truncate(time.Minute).Add(time.Minute)
		}
	} else {
		var ok bool
		if edge, ok = NextOpening(c.now, ws); !ok {
			return
		}
		what = "opens"
	}
	next := c.clone()
	next.now = edge
	emit(transition{label: fmt.Sprintf("clock to %s: the maintenance window %s", edge.Format("Jan 2 15:04"), what), to: next, ns: -1})
}

// --- invalid values ---

// invalidValue is a value of an annotation meshwave reads, one it cannot
// use, on the namespace or on a workload.
type invalidValue struct {
	key, value string
	// workload is "" for the namespace.
	workload string
}

// invalidValues are an invalid or empty value of every annotation the
// agent reads from a person: the namespace's and the first workload's.
var invalidValues = []invalidValue{
	{key: AnnotationTargetRevision, value: ""},
	{key: AnnotationTargetRevision, value: "1.26/next"},
	{key: AnnotationPriority, value: ""},
	{key: AnnotationPaused, value: "maybe"},
	{key: AnnotationRollback, value: ""},
	{key: AnnotationFailurePolicy, value: "Sometimes"},
	{key: AnnotationAllowDowngrade, value: ""},
	{key: AnnotationMaintenanceWindow, value: "{not json"},
	// Never meets the configured window (noon to one, daily): three in the
	// morning on New Year's Day.
	{key: AnnotationMaintenanceWindow, value: `{"schedule":"0 3 1 1 *","duration":"1h"}`},
	{key: AnnotationWave, value: "", workload: "a"},
	{key: AnnotationSkip, value: "maybe", workload: "a"},
	{key: AnnotationReadinessTimeout, value: "-5s", workload: "a"},
}

// invalidValueEvent sets each invalid value, or fixes it where it is set: the
// key removed, or the namespace's own target put back.
func invalidValueEvent(x *exploration, c *cluster, emit func(transition)) {
	each(c, func(i int, ns *clusterNamespace) {
		for _, v := range invalidValues {
			annotations := ns.Annotations
			object := "namespace"
			if v.workload != "" {
				w := ns.workload(v.workload)
				if w == nil {
					continue
				}
				annotations, object = w.Annotations, v.workload
			}
			current, set := annotations[v.key]
			if v.key == AnnotationTargetRevision && !set {
				continue // not opted in: nothing to spoil
			}
			edit := func(ns *clusterNamespace) map[string]string {
				if v.workload != "" {
					return ns.ownWorkload(v.workload).Annotations
				}
				return ns.Annotations
			}
			if set && current == v.value {
				changed(c, i, fmt.Sprintf("%s on %s fixed", v.key, object), emit, func(_ *cluster, ns *clusterNamespace) {
					if v.key == AnnotationTargetRevision {
						edit(ns)[v.key] = x.targets[ns.Name]
						return
					}
					delete(edit(ns), v.key)
				})
				continue
			}
			changed(c, i, fmt.Sprintf("%s=%q on %s", v.key, v.value, object), emit, func(_ *cluster, ns *clusterNamespace) {
				edit(ns)[v.key] = v.value
			})
		}
	})
}
