package agent

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
)

// holderKey is one series of meshwave_revision_holders.
type holderKey struct {
	revision string
	reason   canary.HolderReason
}

// holderTally keeps the counts of meshwave_revision_holders by namespace,
// so that a scrape recounts only the namespaces whose objects changed
// since the one before: the caches' event handlers mark them. A pod's
// reason depends on its own namespace alone (its owners, its workloads,
// the namespace's target, status and plan) and on the mesh (the
// revisions and tags, the istiods of the root namespace): a change in the
// root namespace or to a webhook configuration recounts every namespace.
//
// A namespace's counts can also change with the clock alone (its
// maintenance windows, a retried migration's rollbacks on record dated
// ahead: canary.Reading.Until), so each namespace whose reading says when
// it may change is recounted at that instant too.
type holderTally struct {
	caches        *Caches
	rootNamespace string
	decisions     canary.Config
	now           func() time.Time
	// handlers are the event handlers watch added.
	handlers []cache.ResourceEventHandlerRegistration

	// marks is what changed since the last recount: namespaces, or all.
	marksMu sync.Mutex
	dirty   map[string]bool
	all     bool

	// mu serialises recounts, and guards what follows.
	mu          sync.Mutex
	byNamespace map[string]map[holderKey]int
	totals      map[holderKey]int
	// wake holds the instant each namespace whose counts depend on the
	// clock is to be recounted.
	wake map[string]time.Time
	// recounted counts the recounts of each namespace when not nil, as
	// tests make it.
	recounted map[string]int
}

func newHolderTally(caches *Caches, rootNamespace string, decisions canary.Config) *holderTally {
	return &holderTally{caches: caches, rootNamespace: rootNamespace, decisions: decisions, now: time.Now,
		dirty: map[string]bool{}, all: true, byNamespace: map[string]map[holderKey]int{},
		totals: map[holderKey]int{}, wake: map[string]time.Time{}}
}

// watch marks the namespaces of the objects the caches' informers add,
// change and delete. A handler added to a started informer is told of
// every object it holds, which marks them all: nothing is missed whatever
// the order.
func (t *holderTally) watch() {
	for name, inf := range t.caches.informers {
		everything := name == "webhooks"
		// An informer not started yet never fails to take a handler.
		reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { t.markObject(obj, everything) },
			UpdateFunc: func(old, obj any) {
				if !resynced(old, obj) {
					t.markObject(obj, everything)
				}
			},
			DeleteFunc: func(obj any) { t.markObject(obj, everything) },
		})
		if reg != nil {
			t.handlers = append(t.handlers, reg)
		}
	}
}

// markObject marks obj's namespace, or the namespace obj is. Objects of
// the root namespace, cluster-scoped ones other than namespaces, and
// those everything says change the mesh mark every namespace.
func (t *holderTally) markObject(obj any, everything bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		t.markAll()
		return
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if ns == "" {
		ns = name // a namespace, or a cluster-scoped object
		everything = everything || !isNamespace(obj)
	}
	if everything || ns == t.rootNamespace {
		t.markAll()
		return
	}
	t.mark(ns)
}

func (t *holderTally) mark(ns string) {
	t.marksMu.Lock()
	t.dirty[ns] = true
	t.marksMu.Unlock()
}

func (t *holderTally) markAll() {
	t.marksMu.Lock()
	t.all = true
	t.marksMu.Unlock()
}

// take returns the marks and clears them.
func (t *holderTally) take() (map[string]bool, bool) {
	t.marksMu.Lock()
	defer t.marksMu.Unlock()
	dirty, all := t.dirty, t.all
	t.dirty, t.all = map[string]bool{}, false
	return dirty, all
}

// counts recounts what changed and returns the totals by revision and
// reason, and every revision installed or carried by a pod. On an error
// the marks are kept for the next scrape.
func (t *holderTally) counts() (map[holderKey]int, map[string]bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for ns, at := range t.wake {
		if !now.Before(at) {
			t.mark(ns)
		}
	}
	dirty, all := t.take()
	if err := t.recount(dirty, all, now); err != nil {
		if all {
			t.markAll()
		}
		for ns := range dirty {
			t.mark(ns)
		}
		return nil, nil, err
	}
	revisions := map[string]bool{}
	for k, n := range t.totals {
		if n > 0 {
			revisions[k.revision] = true
		}
	}
	if m, err := t.caches.mesh(t.rootNamespace); err == nil {
		for rev := range m.Revisions {
			revisions[rev] = true
		}
	}
	out := make(map[holderKey]int, len(t.totals))
	for k, n := range t.totals {
		out[k] = n
	}
	return out, revisions, nil
}

// recount classifies the pods of the namespaces marked, or of every
// namespace, as read at now, and replaces their counts.
func (t *holderTally) recount(dirty map[string]bool, all bool, now time.Time) error {
	if !all && len(dirty) == 0 {
		return nil
	}
	var pods []*CachedPod
	if all {
		ps, err := t.caches.Pods.List(labels.Everything())
		if err != nil {
			return err
		}
		pods = ps
		dirty = map[string]bool{}
		for ns := range t.byNamespace {
			dirty[ns] = true
		}
		for _, p := range pods {
			dirty[p.Namespace] = true
		}
	} else {
		for ns := range dirty {
			ps, err := t.caches.Pods.In(ns).List(labels.Everything())
			if err != nil {
				return err
			}
			pods = append(pods, ps...)
		}
	}
	holders, until, err := t.caches.holdersOf(pods, t.rootNamespace, t.decisions, func(string) bool { return true }, now)
	if err != nil {
		return err
	}
	fresh := map[string]map[holderKey]int{}
	for rev, h := range holders {
		for _, list := range [][]canary.Holder{h.Holders, h.Finished} {
			for _, x := range list {
				if fresh[x.Namespace] == nil {
					fresh[x.Namespace] = map[holderKey]int{}
				}
				fresh[x.Namespace][holderKey{rev, x.Code}] += len(x.Pods)
			}
		}
	}
	// The pods in ambient hold the revision of their node's ztunnel. A
	// ztunnel is a pod of the root namespace, whose every change
	// recounts all.
	if err := t.caches.countAmbient(pods, t.rootNamespace, func(ns, rev string) {
		if fresh[ns] == nil {
			fresh[ns] = map[holderKey]int{}
		}
		fresh[ns][holderKey{rev, canary.ReasonAmbient}]++
	}); err != nil {
		return err
	}
	for ns := range dirty {
		for k, n := range t.byNamespace[ns] {
			if t.totals[k] -= n; t.totals[k] == 0 {
				delete(t.totals, k)
			}
		}
		delete(t.byNamespace, ns)
		if counts := fresh[ns]; counts != nil {
			t.byNamespace[ns] = counts
			for k, n := range counts {
				t.totals[k] += n
			}
		}
		if t.recounted != nil {
			t.recounted[ns]++
		}
		delete(t.wake, ns)
		if at, ok := until[ns]; ok {
			t.wake[ns] = at
		}
	}
	return nil
}

// resynced reports whether an update is an informer's resync: the same
// version of the object delivered again, which changes no count.
func resynced(old, obj any) bool {
	o, err1 := meta.Accessor(old)
	n, err2 := meta.Accessor(obj)
	return err1 == nil && err2 == nil && o.GetResourceVersion() != "" && o.GetResourceVersion() == n.GetResourceVersion()
}

// isNamespace reports whether obj, or the object a deletion's tombstone
// holds, is a Namespace.
func isNamespace(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	_, ok := obj.(*corev1.Namespace)
	return ok
}
