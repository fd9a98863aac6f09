package agent

import (
	"strconv"
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
//
// A write counts as seen when the cached object is at least at the
// resourceVersion the write returned (a later write by someone else counts:
// the cache has caught up with ours), or, where resourceVersions cannot be
// compared, when the cached object shows the written value.
type expectations struct {
	mu   sync.Mutex
	byNS map[string]*nsExpectation
	ttl  time.Duration
}

type written struct {
	resourceVersion string
	value           string
}

type nsExpectation struct {
	namespace *written            // the namespace write: its status annotation
	label     string              // the istio.io/rev value it set, if any
	moves     map[string]*written // workload ID -> its patch: move record annotation
	// evictions are the pods evicted, by name, with their UIDs: the cache
	// has caught up when it shows each gone, going or replaced.
	evictions map[string]string
	deadline  time.Time
}

func newExpectations() *expectations {
	// A write the cache never shows (the object was deleted) must not hold
	// the namespace forever.
	return &expectations{byNS: map[string]*nsExpectation{}, ttl: 30 * time.Second}
}

func (e *expectations) get(ns string, now time.Time) *nsExpectation {
	x, ok := e.byNS[ns]
	if !ok {
		x = &nsExpectation{moves: map[string]*written{}, evictions: map[string]string{}}
		e.byNS[ns] = x
	}
	x.deadline = now.Add(e.ttl)
	return x
}

// expectNamespace remembers a namespace write: the resourceVersion it
// returned, and the status and label it set ("" when it set none).
func (e *expectations) expectNamespace(ns, resourceVersion, status, label string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.get(ns, now)
	x.namespace, x.label = &written{resourceVersion: resourceVersion, value: status}, label
}

func (e *expectations) expectMove(ns, deployment, resourceVersion, record string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(ns, now).moves[deployment] = &written{resourceVersion: resourceVersion, value: record}
}

// expectEviction remembers a pod evicted: until the cache shows it gone or
// going, the namespace is not decided on, so that no second pod of the
// workload is evicted while the first still looks up.
func (e *expectations) expectEviction(ns, pod, uid string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(ns, now).evictions[pod] = uid
}

// caughtUp reports whether a cached object at resourceVersion cached shows
// the write w; shows tells, when resourceVersions cannot be compared,
// whether the object holds what was written.
func caughtUp(w *written, cached string, shows func() bool) bool {
	want, err1 := strconv.ParseUint(w.resourceVersion, 10, 64)
	got, err2 := strconv.ParseUint(cached, 10, 64)
	if err1 == nil && err2 == nil {
		return got >= want
	}
	return shows()
}

// satisfied reports whether the caches show every write expected for ns,
// and forgets the expectation once they do or it expired. deployment
// returns a cached workload's resourceVersion and move record, and whether
// it exists; pod returns a cached pod's UID and whether it exists without
// a deletion timestamp.
func (e *expectations) satisfied(ns *corev1.Namespace, deployment func(name string) (rv, record string, exists bool), pod func(name string) (uid string, live bool), now time.Time) bool {
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
	if w := x.namespace; w != nil && !caughtUp(w, ns.ResourceVersion, func() bool {
		return (w.value == "" || ns.Annotations[canary.AnnotationStatus] == w.value) && (x.label == "" || ns.Labels[canary.LabelRev] == x.label)
	}) {
		return false
	}
	for dep, w := range x.moves {
		rv, record, exists := deployment(dep)
		if exists && !caughtUp(w, rv, func() bool { return record == w.value }) {
			return false
		}
	}
	for name, uid := range x.evictions {
		if got, live := pod(name); live && got == uid {
			return false
		}
	}
	delete(e.byNS, ns.Name)
	return true
}
