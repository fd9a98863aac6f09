package agent

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshwave/meshwave/canary"
)

// expectations remember the writes a reconcile made until the informer
// caches show them. Deciding on a cache that has not caught up would redo
// work: a Deployment whose move record is not visible yet would be patched
// a second time. Until the cache shows every expected write, a namespace is
// only requeued, never decided on.
type expectations struct {
	mu   sync.Mutex
	byNS map[string]*nsExpectation
	ttl  time.Duration
}

type nsExpectation struct {
	status   *string           // the status annotation we wrote
	label    *string           // the istio.io/rev value we set
	moves    map[string]string // deployment -> move record annotation we wrote
	deadline time.Time
}

func newExpectations() *expectations {
	// A write the cache never shows (the object was deleted, or changed
	// again by someone else) must not hold the namespace forever.
	return &expectations{byNS: map[string]*nsExpectation{}, ttl: 30 * time.Second}
}

func (e *expectations) get(ns string, now time.Time) *nsExpectation {
	x, ok := e.byNS[ns]
	if !ok {
		x = &nsExpectation{moves: map[string]string{}}
		e.byNS[ns] = x
	}
	x.deadline = now.Add(e.ttl)
	return x
}

func (e *expectations) expectStatus(ns, value string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(ns, now).status = &value
}

func (e *expectations) expectLabel(ns, value string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(ns, now).label = &value
}

func (e *expectations) expectMove(ns, deployment, record string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(ns, now).moves[deployment] = record
}

// satisfied reports whether the caches show every write expected for ns,
// and forgets the expectation once they do or it expired.
func (e *expectations) satisfied(ns *corev1.Namespace, moveOf func(deployment string) (string, bool), now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.byNS[ns.Name]
	if !ok {
		return true
	}
	if now.After(x.deadline) {
		delete(e.byNS, ns.Name)
		return true
	}
	if x.status != nil && ns.Annotations[canary.AnnotationStatus] != *x.status {
		return false
	}
	if x.label != nil && ns.Labels[canary.LabelRev] != *x.label {
		return false
	}
	for dep, want := range x.moves {
		got, exists := moveOf(dep)
		if exists && got != want {
			return false
		}
	}
	delete(e.byNS, ns.Name)
	return true
}
