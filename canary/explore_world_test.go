package canary

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// The explorer's world: the namespaces as the agent's caches show them, the
// mesh's revision tags and the clock, and beside them what the agent keeps
// in memory (whether a namespace was opted in at its last decision) and
// what the invariants remember of the path that led here (the restarts
// made, the waves the gates passed). It drives only the decision's public
// surface: Decide, WaveToVerify, PeerOf, ParseStatus, ReadMoveRecord.

// cluster is one state of the world.
type cluster struct {
	now        time.Time
	tags       map[string]string
	namespaces []*clusterNamespace
	// keys caches key(true) and key(false): a state is never changed once
	// an event has emitted it.
	keys [2]*[16]byte
}

// clusterNamespace is a namespace, its workloads and what is remembered
// about them.
type clusterNamespace struct {
	Namespace
	workloads []Workload
	// wasOptedIn is the agent's memory: the namespace carried its target
	// at the last decision carried out on it (Input.WasOptedIn). A crash
	// forgets it.
	wasOptedIn bool
	// restarts is, per workload, the last restart meshwave made of it and
	// what happened to that move since (restartLedger).
	restarts map[string]restartLedger
	// passed holds the waves the gates passed (or whose failure was
	// tolerated), as "migration#wave".
	passed map[string]bool
	// written are the statuses meshwave wrote on this path, oldest first:
	// the stale copies a person or a deposed leader may put back. They are
	// not part of the state's key (they would make every path a state of
	// its own): a state is explored with the copies of the path it was
	// expanded from, the first to reach it or a shorter one found later.
	written []string
}

// restartLedger is what the invariants remember of a workload's moves.
//
// A move is one restart of a workload by meshwave in a migration, in one
// direction, to one revision: its key is "<migration>|><revision>" forward
// or "<migration>|<<revision>" back. Meshwave makes each move once: a
// restart whose key is the key of the workload's previous restart is the
// same move made twice, unless the move was undone whole in between
// (template and record put back: a TemplateReverted Event on a workload
// that carries no record of it) and a person resumed the namespace after
// that was reported (a Resumed Event): then it is a new move. A rollback,
// and a retry after one, change the direction, so they are new moves.
type restartLedger struct {
	key  string
	wave int
	// undone: the move was reported undone whole; again: and a person
	// resumed since, so the next restart with the same key is a new move.
	undone, again bool
	// outside: the pods were replaced by someone else since (a GitOps
	// owner put the template back), so they no longer show this move.
	outside bool
}

func restartKey(r MoveRecord) string {
	if r.Rollback {
		return r.Migration + "|<" + r.Revision
	}
	return r.Migration + "|>" + r.Revision
}

// clone copies c for an event to change. The namespaces' maps are copied;
// the workloads' maps and pods, and the ledgers, are shared, and whoever
// changes one in place copies it first (ownWorkload, ownLedgers): most
// events change one namespace annotation, or one workload.
func (c *cluster) clone() *cluster {
	out := &cluster{now: c.now, tags: maps.Clone(c.tags), namespaces: make([]*clusterNamespace, len(c.namespaces))}
	for i, ns := range c.namespaces {
		out.namespaces[i] = &clusterNamespace{
			Namespace:  Namespace{Name: ns.Name, Labels: maps.Clone(ns.Labels), Annotations: maps.Clone(ns.Annotations)},
			workloads:  slices.Clone(ns.workloads),
			wasOptedIn: ns.wasOptedIn,
			restarts:   ns.restarts,
			passed:     ns.passed,
			written:    ns.written[:len(ns.written):len(ns.written)],
		}
	}
	return out
}

// ownWorkload returns the named workload with maps of its own, to change.
func (ns *clusterNamespace) ownWorkload(name string) *Workload {
	w := ns.workload(name)
	if w != nil {
		w.Annotations = maps.Clone(w.Annotations)
		w.TemplateAnnotations = maps.Clone(w.TemplateAnnotations)
		w.TemplateLabels = maps.Clone(w.TemplateLabels)
	}
	return w
}

// ownLedgers gives ns ledgers of its own, to change.
func (ns *clusterNamespace) ownLedgers() {
	ns.restarts = maps.Clone(ns.restarts)
	ns.passed = maps.Clone(ns.passed)
}

// exploredRevisions are the installed revisions: the source 1-25 and two
// targets. Decisions only read them.
var exploredRevisions = map[string]Revision{
	"1-25": {Name: "1-25", Istiods: 1, ReadyIstiods: 1},
	"1-26": {Name: "1-26", Istiods: 1, ReadyIstiods: 1},
	"1-27": {Name: "1-27", Istiods: 1, ReadyIstiods: 1},
}

func (c *cluster) mesh() Mesh {
	return Mesh{Revisions: exploredRevisions, Tags: c.tags}
}

func (ns *clusterNamespace) workload(name string) *Workload {
	for i := range ns.workloads {
		if ns.workloads[i].Name == name {
			return &ns.workloads[i]
		}
	}
	return nil
}

// status is the namespace's status as the agent reads it, shared: it must
// not be changed. A decision is given one of its own (decide).
func (ns *clusterNamespace) status() (*Status, bool, error) {
	return readStatus(ns.Annotations[AnnotationStatus], ns.Annotations)
}

// readStatus is ParseStatus, memoised by the status's value.
func readStatus(raw string, annotations map[string]string) (*Status, bool, error) {
	if _, ok := annotations[AnnotationStatus]; !ok {
		return nil, false, nil
	}
	if r, ok := statuses.Load(raw); ok {
		read := r.(statusRead)
		return read.st, true, read.err
	}
	st, _, err := ParseStatus(annotations)
	statuses.Store(raw, statusRead{st, err})
	return st, true, err
}

type statusRead struct {
	st  *Status
	err error
}

// statuses memoises readStatus.
var statuses sync.Map

// peer is the namespace as its peers read it.
func (c *cluster) peer(ns *clusterNamespace) (Peer, bool) {
	return PeerOf(ns.Name, ns.Annotations, c.mesh().Resolve, func() ([]Workload, error) { return ns.workloads, nil })
}

// injectedPod is a pod created now, injected by the revision the
// namespace's label resolves to: Istio injects at pod creation.
func (c *cluster) injectedPod(ns *clusterNamespace, name string) Pod {
	p := Pod{Name: name, Labels: map[string]string{"app": strings.TrimSuffix(name, "-0")}, Running: true, Ready: true, Current: true}
	if rev, ok := c.mesh().Resolve(ns.Labels[LabelRev]); ok {
		p.Revision = rev
		p.Annotations = sidecarAnnotations[rev]
	}
	return p
}

// sidecarAnnotations are the pods' annotations by revision, shared by
// every pod of the world.
var sidecarAnnotations = map[string]map[string]string{
	"1-25": {AnnotationSidecar: `{"revision":"1-25"}`},
	"1-26": {AnnotationSidecar: `{"revision":"1-26"}`},
	"1-27": {AnnotationSidecar: `{"revision":"1-27"}`},
}

// recreatePods replaces every pod of w, as its controller does when its
// template changes.
func (c *cluster) recreatePods(ns *clusterNamespace, w *Workload) {
	w.Pods = slices.Clone(w.Pods)
	for i, p := range w.Pods {
		w.Pods[i] = c.injectedPod(ns, p.Name)
	}
}

// applyNamespaceWrite is the first write of a decision, as the agent makes
// it: the status, the paused and rollback annotations and the label in one
// patch of the namespace.
func applyNamespaceWrite(ns *clusterNamespace, d Decision) error {
	if d.Status != nil {
		raw, err := d.Status.Encode()
		if err != nil {
			return err
		}
		ns.Annotations[AnnotationStatus] = raw
		ns.written = append(ns.written, raw)
	}
	if d.SetPaused {
		ns.Annotations[AnnotationPaused] = "true"
	}
	if d.ClearRollback {
		delete(ns.Annotations, AnnotationRollback)
	}
	if d.Label != "" {
		ns.Labels[LabelRev] = d.Label
	}
	return nil
}

// patchedWorkload is the part of a workload a move patch writes.
type patchedWorkload struct {
	Metadata struct {
		Annotations     map[string]string `json:"annotations,omitempty"`
		ResourceVersion string            `json:"resourceVersion,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
			} `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
}

// applyMove applies one workload patch as the apiserver merges it. A patch
// that changes the template restarts the workload: its pods are replaced
// by pods injected by the revision the namespace's label resolves to now,
// and its newest ReplicaSet carries the restart stamp (RolledOutRestart).
// A record-only patch replaces no pod.
func (c *cluster) applyMove(ns *clusterNamespace, m Move) error {
	w := ns.workload(m.Workload)
	if w == nil {
		return nil // gone: the apiserver answers NotFound
	}
	var doc patchedWorkload
	doc.Metadata.Annotations = w.Annotations
	doc.Spec.Template.Metadata.Annotations = w.TemplateAnnotations
	doc.Spec.Template.Metadata.Labels = w.TemplateLabels
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	merged, err := jsonpatch.MergePatch(raw, m.Patch)
	if err != nil {
		return fmt.Errorf("patch of %s: %w", m.Workload, err)
	}
	var out patchedWorkload
	if err := json.Unmarshal(merged, &out); err != nil {
		return err
	}
	before := w.TemplateAnnotations[AnnotationRestartedAt]
	w.Annotations = orEmpty(out.Metadata.Annotations)
	w.TemplateAnnotations = orEmpty(out.Spec.Template.Metadata.Annotations)
	w.TemplateLabels = orEmpty(out.Spec.Template.Metadata.Labels)
	stamp := w.TemplateAnnotations[AnnotationRestartedAt]
	if m.RecordOnly || stamp == before {
		return nil
	}
	c.recreatePods(ns, w)
	if at, err := time.Parse(time.RFC3339, stamp); err == nil && at.After(w.RolledOutRestart) {
		w.RolledOutRestart = at
	}
	return nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// applyEviction replaces one pod: its controller creates it again,
// injected by the label's revision.
func (c *cluster) applyEviction(ns *clusterNamespace, e Eviction) {
	w := ns.workload(e.Workload)
	if w == nil {
		return
	}
	w.Pods = slices.Clone(w.Pods)
	for i, p := range w.Pods {
		if p.Name == e.Pod {
			w.Pods[i] = c.injectedPod(ns, p.Name)
		}
	}
}

// key is the state's identity: a hash (sha256, cut to 128 bits) of a
// canonical encoding (lengths before strings, maps in key order) of
// everything a decision reads (the namespaces' labels and annotations, the
// workloads' labels, annotations and templates, their pods' revisions and
// readiness, RolledOutRestart, the tags, the clock) and of what the agent
// and the invariants remember (wasOptedIn, the restarts, the waves
// passed). withClock false leaves out the clock and the memory: what the
// cluster's objects hold.
func (c *cluster) key(withClock bool) [16]byte {
	i := 0
	if withClock {
		i = 1
	}
	if k := c.keys[i]; k != nil {
		return *k
	}
	k := c.computeKey(withClock)
	c.keys[i] = &k
	return k
}

func (c *cluster) computeKey(withClock bool) [16]byte {
	buf := make([]byte, 0, 2048)
	str := func(s string) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	num := func(n int64) { buf = binary.AppendVarint(buf, n) }
	var keys []string
	dict := func(m map[string]string) {
		keys = keys[:0]
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		num(int64(len(m)))
		for _, k := range keys {
			str(k)
			str(m[k])
		}
	}
	flag := func(b bool) {
		if b {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	}
	if withClock {
		num(c.now.UnixNano())
	}
	dict(c.tags)
	for _, ns := range c.namespaces {
		str(ns.Name)
		dict(ns.Labels)
		dict(ns.Annotations)
		if withClock {
			flag(ns.wasOptedIn)
			num(int64(len(ns.restarts)))
			for _, name := range slices.Sorted(maps.Keys(ns.restarts)) {
				r := ns.restarts[name]
				str(name)
				str(r.key)
				num(int64(r.wave))
				flag(r.undone)
				flag(r.again)
				flag(r.outside)
			}
			num(int64(len(ns.passed)))
			for _, k := range slices.Sorted(maps.Keys(ns.passed)) {
				str(k)
			}
		}
		for _, w := range ns.workloads {
			str(w.Name)
			dict(w.Labels)
			dict(w.Annotations)
			dict(w.TemplateLabels)
			dict(w.TemplateAnnotations)
			num(w.RolledOutRestart.UnixNano())
			for _, p := range w.Pods {
				str(p.Revision)
				flag(p.Ready)
				flag(p.Running)
				flag(p.Current)
			}
		}
	}
	sum := sha256.Sum256(buf)
	return [16]byte(sum[:16])
}

// describe says where the world stands, for a counterexample: each
// namespace's status (phase, wave, wave state, rollback), label and the
// revision each workload's pods run.
func (c *cluster) describe() string {
	var parts []string
	for _, ns := range c.namespaces {
		var b strings.Builder
		if len(c.namespaces) > 1 {
			b.WriteString(ns.Name + ": ")
		}
		b.WriteString(statusSummary(ns.Annotations))
		fmt.Fprintf(&b, "; label %s;", ns.Labels[LabelRev])
		for _, w := range ns.workloads {
			revs := make([]string, 0, len(w.Pods))
			for _, p := range w.Pods {
				revs = append(revs, p.Revision)
			}
			rec := ""
			if r, ok := ReadMoveRecord(w.Annotations); ok {
				dir := ">"
				if r.Rollback {
					dir = "<"
				}
				rec = fmt.Sprintf(" [w%d%s%s]", r.Wave, dir, r.Revision)
				if r.Outcome != "" {
					rec = fmt.Sprintf(" [w%d%s%s %s]", r.Wave, dir, r.Revision, r.Outcome)
				}
			}
			fmt.Fprintf(&b, " %s %s%s", w.Name, strings.Join(revs, ","), rec)
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, " | ")
}

// statusSummary is a status in a few words: "Migrating w2/2 Verifying".
func statusSummary(annotations map[string]string) string {
	raw, ok := annotations[AnnotationStatus]
	if !ok {
		return "no status"
	}
	if words, ok := summaries.Load(raw); ok {
		return words.(string)
	}
	words := describeStatusAnnotation(annotations)
	summaries.Store(raw, words)
	return words
}

// summaries memoises statusSummary by the status's value.
var summaries sync.Map

func describeStatusAnnotation(annotations map[string]string) string {
	st, ok, err := ParseStatus(annotations)
	switch {
	case !ok:
		return "no status"
	case err != nil:
		return "unreadable status"
	}
	return statusWords(st)
}

func statusWords(st *Status) string {
	s := fmt.Sprintf("%s w%d/%d", st.Phase, st.Wave, st.TotalWaves)
	if st.BlockedPhase != "" {
		s += " (in " + string(st.BlockedPhase) + ")"
	}
	if st.WaveState != "" {
		s += " " + string(st.WaveState)
	}
	if st.Rollback != RollbackNone {
		s += " rollback " + string(st.Rollback)
	}
	if st.Target != st.TargetRevision && st.TargetRevision != "" {
		s += " " + st.Target + "=" + st.TargetRevision
	} else {
		s += " " + st.Target
	}
	return s
}
