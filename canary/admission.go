package canary

import (
	"fmt"
	"sort"
	"strings"
)

// Admit decides whether a namespace may start migrating now: fewer than
// concurrency namespaces hold a slot, and no pending namespace that comes
// first by priority and name is waiting for the same slot.
func Admit(self Peer, peers []Peer, concurrency int) (bool, string) {
	var active, ahead []string
	for _, p := range peers {
		if p.Name == self.Name {
			continue
		}
		if p.HoldsSlot {
			active = append(active, p.Name)
			continue
		}
		if (p.Phase == PhasePending || p.Phase == "") && !p.WaitsForRing && (p.Priority < self.Priority || (p.Priority == self.Priority && p.Name < self.Name)) {
			ahead = append(ahead, fmt.Sprintf("%s (priority %d)", p.Name, p.Priority))
		}
	}
	sort.Strings(active)
	free := concurrency - len(active)
	if free <= 0 {
		return false, fmt.Sprintf("waiting for a free slot: %d of %d in use by %s", len(active), concurrency, strings.Join(active, ", "))
	}
	if len(ahead) >= free {
		return false, fmt.Sprintf("waiting for its turn: %s go first", strings.Join(ahead, ", "))
	}
	return true, ""
}

// PeerOf reads another namespace's place in the queue from its
// annotations, as its own decision reads it (Read): ok is false when it
// has not opted in (and holds no slot). It holds a slot when the status
// its decision goes on from holds one: the status it has, one rebuilt from
// its workloads' move records (a status lost, stale, or contradicted by
// them: adoption never asks Admit), or one being rolled back before a new
// target; and, until its own decision writes another status, whenever the
// status written holds one. A status that cannot be read holds its slot
// until the namespace's own decision has rebuilt it, and so does a
// namespace whose workloads cannot be read: the careful answers.
//
// resolve resolves its target as its decision would (nil reads the
// status's own revision). workloads returns the namespace's workloads
// (their names, Paused, and annotations or Facts are read); it is called
// only when the annotations do not settle the answer.
func PeerOf(name string, annotations map[string]string, resolve func(string) (string, bool), workloads func() ([]Workload, error)) (Peer, bool) {
	st, _, err := ParseStatus(annotations)
	if _, ok := annotations[AnnotationTargetRevision]; !ok {
		// Opted out: its decision stops the migration (Stopped holds no
		// slot); until then a status that holds one still does, or its
		// target put back before that decision would go on beside another.
		if err == nil && st.HoldsSlot() {
			settings, _ := ParseNamespace(name, annotations)
			return Peer{Name: name, Priority: settings.Priority, Phase: st.Phase, HoldsSlot: true}, true
		}
		return Peer{}, false
	}
	r := readPeer(Namespace{Name: name, Annotations: annotations}, st, err, resolve, workloads)
	p := Peer{Name: name, Priority: r.Settings.Priority, Phase: r.Status.Phase, HoldsSlot: r.Status.HoldsSlot(),
		WaitsForRing: st != nil && st.WaitsForRing && r.Status.Phase == PhasePending}
	if r.Adopted() && r.Recorded != nil {
		// Its phase is what its status says until its decision writes the
		// status rebuilt from the records.
		p.Phase = r.Recorded.Phase
	}
	switch {
	case r.StatusErr != nil && r.Recorded == nil, r.recordsErr != nil:
		// The careful answers: it may be half-way.
		p.HoldsSlot = true
	case st.HoldsSlot():
		// A status written as holding a slot holds it until the
		// namespace's own decision writes another: a new target (or
		// repointed tag) that starts over is admitted then, and one set
		// back before that decision continues the migration admitted.
		p.HoldsSlot = true
	}
	return p, true
}

// readPeer is Read of a peer: from its annotations, its records read only
// when they may change whether it holds a slot.
func readPeer(ns Namespace, st *Status, statusErr error, resolve func(string) (string, bool), workloads func() ([]Workload, error)) Reading {
	r := Reading{Snapshot: Snapshot{Namespace: ns}, Recorded: st, StatusErr: statusErr, OptedIn: true}
	r.Settings, r.Errors = ParseNamespace(ns.Name, ns.Annotations)
	r.loadRecords = func() (workloadSet, error) {
		if workloads == nil {
			return nil, nil
		}
		ws, err := workloads()
		if err != nil {
			return nil, err
		}
		set, _ := parseWorkloads(ws)
		return set, nil
	}
	if resolve == nil {
		// The status's own revision.
		resolve = func(target string) (string, bool) {
			if st != nil && st.Target == target && st.TargetRevision != "" {
				return st.TargetRevision, true
			}
			return "", false
		}
	}
	r.settle(resolve, true)
	return r
}
