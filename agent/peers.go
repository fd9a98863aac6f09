package agent

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshwave/meshwave/canary"
)

// peerMemo keeps each namespace's canary.PeerOf by what it was read from.
// Every admission reads every other namespace as a peer, and a status is
// JSON: at hundreds of opted-in namespaces, parsing each one again for
// each reconcile made the work of one status change grow with the square
// of their number. An entry is kept by the values PeerOf read, not by the
// namespace's resourceVersion: a resourceVersion can come back with other
// contents (an etcd restored without a revision bump, while a replica
// keeps its caches; a fake clientset that does not bump it), and a slot
// read from stale contents lets one more namespace start. Comparing the
// strings costs little: an unchanged cached namespace hands back the same
// strings, which compare by their pointers.
//
// An answer that read the namespace's workloads (a peer without a status,
// or one whose status ended, which its workloads' move records may
// contradict) is kept with the namespace's workload stamp
// (workloadStamps): any change the informers deliver of one of its
// Deployments, StatefulSets or DaemonSets reads the peer again. Caches
// that keep no stamps, and a namespace without one, keep no such answer. So is the target's resolution,
// when PeerOf asked for it: a tag repointed reads the peer again.
type peerMemo struct {
	mu      sync.Mutex
	entries map[string]peerEntry
}

type peerEntry struct {
	read peerInput
	// resolver says whether PeerOf was given a resolve function, and
	// resolved is the target's resolution it read; nil when it read none.
	resolver bool
	resolved *resolution
	// readWorkloads says whether PeerOf read the workloads, and stamp is
	// the namespace's workload stamp from before it read them.
	readWorkloads bool
	stamp         uint64
	peer          canary.Peer
	ok            bool
}

// resolution is one answer of a resolve function.
type resolution struct {
	name, rev string
	ok        bool
}

// peerInput is what canary.PeerOf reads of a namespace's annotations: its
// target and the mode to move to, priority, status and a rollback asked.
type peerInput struct {
	target, priority, status, mode, rollback                string
	hasTarget, hasPriority, hasStatus, hasMode, hasRollback bool
}

func peerInputOf(annotations map[string]string) peerInput {
	var in peerInput
	in.target, in.hasTarget = annotations[canary.AnnotationTargetRevision]
	in.priority, in.hasPriority = annotations[canary.AnnotationPriority]
	in.status, in.hasStatus = annotations[canary.AnnotationStatus]
	in.mode, in.hasMode = annotations[canary.AnnotationTargetMode]
	in.rollback, in.hasRollback = annotations[canary.AnnotationRollback]
	return in
}

// readFromWorkloads returns the peer kept for a namespace when that answer
// read its workloads' move records: ok is false when none is kept, or the
// one kept was settled by the namespace's annotations alone.
func (m *peerMemo) readFromWorkloads(name string) (canary.Peer, bool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, hit := m.entries[name]
	if !hit || !e.readWorkloads {
		return canary.Peer{}, false, false
	}
	return e.peer, e.ok, true
}

// of returns ns as a peer. resolve resolves its target (nil reads the
// status's own revision); workloads lists its workloads, only when its
// annotations do not settle the answer; stamp is its workload stamp, ok
// false when none is kept.
func (m *peerMemo) of(ns *corev1.Namespace, resolve func(string) (string, bool), workloads func() ([]canary.Workload, error), stamp func() (uint64, bool)) (canary.Peer, bool) {
	in := peerInputOf(ns.Annotations)
	m.mu.Lock()
	e, hit := m.entries[ns.Name]
	m.mu.Unlock()
	if hit && e.read == in && e.stillResolves(resolve) && e.sameWorkloads(stamp) {
		return e.peer, e.ok
	}
	// The stamp is read before the workloads: a change the cache shows
	// while they are read stamps the namespace anew, after it.
	next := peerEntry{read: in, resolver: resolve != nil}
	stamped := false
	next.stamp, stamped = stamp()
	failed := false
	resolveRead := resolve
	if resolve != nil {
		resolveRead = func(name string) (string, bool) {
			rev, ok := resolve(name)
			next.resolved = &resolution{name: name, rev: rev, ok: ok}
			return rev, ok
		}
	}
	next.peer, next.ok = canary.PeerOf(ns.Name, ns.Annotations, resolveRead, func() ([]canary.Workload, error) {
		next.readWorkloads = true
		ws, err := workloads()
		failed = err != nil
		return ws, err
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[string]peerEntry{}
	}
	if failed || next.readWorkloads && (!stamped || next.stamp == 0) {
		delete(m.entries, ns.Name)
	} else {
		m.entries[ns.Name] = next
	}
	return next.peer, next.ok
}

// stillResolves reports whether the target resolves as it did when e was
// read.
func (e peerEntry) stillResolves(resolve func(string) (string, bool)) bool {
	if e.resolver != (resolve != nil) {
		return false
	}
	if e.resolved == nil {
		return true
	}
	rev, ok := resolve(e.resolved.name)
	return rev == e.resolved.rev && ok == e.resolved.ok
}

// sameWorkloads reports whether the namespace's workloads are as they were
// when e was read.
func (e peerEntry) sameWorkloads(stamp func() (uint64, bool)) bool {
	if !e.readWorkloads {
		return true
	}
	now, ok := stamp()
	return ok && now == e.stamp
}

// keepOnly forgets the namespaces not in names: those deleted.
func (m *peerMemo) keepOnly(names map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.entries {
		if !names[name] {
			delete(m.entries, name)
		}
	}
}

// size is the number of namespaces remembered.
func (m *peerMemo) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// workloadStamps stamps each namespace whenever the informers deliver a
// change of what its peers' records are read from, of one of its
// Deployments, StatefulSets or DaemonSets (stampsOnUpdate). A stamp is
// drawn from one counter for all namespaces, so it never comes back, and
// 0 is no stamp: a namespace without workloads has none (it is dropped
// with its last workload), and none before its first add is delivered. An
// answer read at stamp 0 is never kept: the informers call their handlers
// after their cache holds a change, so a namespace can show workloads that
// no handler has stamped yet, and a stamp dropped and drawn again must not
// find an answer kept from before.
//
// Because each handler is called after its cache holds the change (a
// handler's enqueued key always finds at least that version in the
// lister), a stamp read before reading the cache was drawn before any
// change that read may miss: an answer kept with it is read again once
// that change is delivered.
type workloadStamps struct {
	mu   sync.Mutex
	next uint64
	m    map[string]nsStamp
}

// nsStamp is a namespace's stamp and how many of its workloads the
// handlers have seen added and not deleted.
type nsStamp struct {
	stamp     uint64
	workloads int
}

func newWorkloadStamps() *workloadStamps {
	return &workloadStamps{m: map[string]nsStamp{}}
}

// added stamps ns for a workload added.
func (s *workloadStamps) added(ns string) { s.change(ns, 1) }

// changed stamps ns for a workload changed.
func (s *workloadStamps) changed(ns string) { s.change(ns, 0) }

// deleted stamps ns for a workload deleted, and drops the stamp of a
// namespace left without any.
func (s *workloadStamps) deleted(ns string) { s.change(ns, -1) }

func (s *workloadStamps) change(ns string, workloads int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[ns]
	e.workloads += workloads
	if e.workloads <= 0 && workloads < 0 {
		delete(s.m, ns)
		return
	}
	s.next++
	e.stamp = s.next
	s.m[ns] = e
}

// of is the stamp of ns: 0 when it has none.
func (s *workloadStamps) of(ns string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[ns].stamp
}

func (s *workloadStamps) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
