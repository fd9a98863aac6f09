package agent

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshwave/meshwave/canary"
)

// peerMemo keeps each namespace's canary.PeerOf by the annotations it was
// read from. Every reconcile reads every other namespace as a peer, and
// a status is JSON: at hundreds of opted-in namespaces, parsing each one
// again for each reconcile made the work of one status change grow with
// the square of their number. An entry is kept by the values PeerOf reads,
// not by the namespace's resourceVersion: a resourceVersion can come back
// with other contents (an etcd restored without a revision bump, while a
// replica keeps its caches; a fake clientset that does not bump it), and
// a slot read from stale contents lets one more namespace start. Comparing
// the strings costs little: an unchanged cached namespace hands back the
// same strings, which compare by their pointers. Answers that consulted
// the namespace's workloads (a peer without a status, which holds a slot
// if a workload carries a move record) are not kept: a workload can change
// without its namespace changing.
type peerMemo struct {
	mu      sync.Mutex
	entries map[string]peerEntry
}

type peerEntry struct {
	read peerInput
	peer canary.Peer
	ok   bool
}

// peerInput is what canary.PeerOf reads of a namespace's annotations.
type peerInput struct {
	target, priority, status          string
	hasTarget, hasPriority, hasStatus bool
}

func peerInputOf(annotations map[string]string) peerInput {
	var in peerInput
	in.target, in.hasTarget = annotations[canary.AnnotationTargetRevision]
	in.priority, in.hasPriority = annotations[canary.AnnotationPriority]
	in.status, in.hasStatus = annotations[canary.AnnotationStatus]
	return in
}

// of returns ns as a peer, reading its workloads through movedOnRecord
// only when its annotations do not settle it.
func (m *peerMemo) of(ns *corev1.Namespace, movedOnRecord func() bool) (canary.Peer, bool) {
	in := peerInputOf(ns.Annotations)
	m.mu.Lock()
	e, hit := m.entries[ns.Name]
	m.mu.Unlock()
	if hit && e.read == in {
		return e.peer, e.ok
	}
	asked := false
	p, ok := canary.PeerOf(ns.Name, ns.Annotations, func() bool { asked = true; return movedOnRecord() })
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[string]peerEntry{}
	}
	if asked {
		delete(m.entries, ns.Name)
	} else {
		m.entries[ns.Name] = peerEntry{read: in, peer: p, ok: ok}
	}
	return p, ok
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
