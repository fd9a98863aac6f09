package agent

import (
	"runtime"
	"sync"
	"weak"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/meshwave/meshwave/canary"
)

// workloadFacts keeps the canary.Facts of each cached Deployment,
// StatefulSet and DaemonSet: every reconcile decides over every workload
// of its namespace, and reading their labels and annotations each time
// was most of a decision over ten thousand of them.
type workloadFacts struct {
	deployments  factsOf[appsv1.Deployment]
	statefulSets factsOf[appsv1.StatefulSet]
	daemonSets   factsOf[appsv1.DaemonSet]
}

// factsOf keeps facts by the identity of the cached object they were read
// from, for as long as the cache holds that object. The cache never
// changes an object it holds (an update replaces it with a new one), so
// facts kept for one are never stale: nothing is trusted to stand for the
// object's contents, neither its resourceVersion, which an apiserver
// restored from a backup may hand out again with other contents, nor its
// name. An entry is dropped once the garbage collector frees its object.
//
// The entries are in a table of their own, allocated apart from the
// caches: the cleanup that drops an entry is a root of the garbage
// collector's while its object lives, so it must not reach the caches,
// which hold the object. Were the table a field of Caches, caches done
// with (PlanNow's, a controller's after Shutdown) would keep every object
// they held, and with them their cleanups, and so themselves.
type factsOf[T any] struct {
	once  sync.Once
	table *factsTable[T]
}

// factsTable is factsOf's entries.
type factsTable[T any] struct {
	mu sync.RWMutex
	m  map[weak.Pointer[T]]*canary.Facts
}

// get returns obj's facts, reading them from w, the workload built from
// obj, the first time.
func (f *factsOf[T]) get(obj *T, w *canary.Workload) *canary.Facts {
	return f.entries().get(obj, w)
}

// len is how many objects have facts kept.
func (f *factsOf[T]) len() int {
	return f.entries().len()
}

// entries is the table, made the first time.
func (f *factsOf[T]) entries() *factsTable[T] {
	f.once.Do(func() { f.table = &factsTable[T]{m: map[weak.Pointer[T]]*canary.Facts{}} })
	return f.table
}

func (t *factsTable[T]) get(obj *T, w *canary.Workload) *canary.Facts {
	key := weak.Make(obj)
	t.mu.RLock()
	facts, ok := t.m[key]
	t.mu.RUnlock()
	if ok {
		return facts
	}
	facts = canary.ReadFacts(w)
	t.mu.Lock()
	defer t.mu.Unlock()
	if kept, ok := t.m[key]; ok {
		return kept // another worker read them first
	}
	t.m[key] = facts
	runtime.AddCleanup(obj, t.drop, key)
	return facts
}

// drop forgets the facts of an object the garbage collector freed.
func (t *factsTable[T]) drop(key weak.Pointer[T]) {
	t.mu.Lock()
	delete(t.m, key)
	t.mu.Unlock()
}

func (t *factsTable[T]) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m)
}
