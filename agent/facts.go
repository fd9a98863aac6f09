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
type factsOf[T any] struct {
	mu sync.RWMutex
	m  map[weak.Pointer[T]]*canary.Facts
}

// get returns obj's facts, reading them from w, the workload built from
// obj, the first time.
func (f *factsOf[T]) get(obj *T, w *canary.Workload) *canary.Facts {
	key := weak.Make(obj)
	f.mu.RLock()
	facts, ok := f.m[key]
	f.mu.RUnlock()
	if ok {
		return facts
	}
	facts = canary.ReadFacts(w)
	f.mu.Lock()
	defer f.mu.Unlock()
	if kept, ok := f.m[key]; ok {
		return kept // another worker read them first
	}
	if f.m == nil {
		f.m = map[weak.Pointer[T]]*canary.Facts{}
	}
	f.m[key] = facts
	runtime.AddCleanup(obj, f.drop, key)
	return facts
}

// drop forgets the facts of an object the garbage collector freed.
func (f *factsOf[T]) drop(key weak.Pointer[T]) {
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
}

// len is how many objects have facts kept.
func (f *factsOf[T]) len() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.m)
}
