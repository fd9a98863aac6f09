package tests

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
)

// watchInformer hands inf's events to handler, starts factory and waits
// for its caches; the informers stop when t ends.
func watchInformer(t *testing.T, factory informers.SharedInformerFactory, inf cache.SharedIndexInformer, handler cache.ResourceEventHandler) {
	_, err := inf.AddEventHandler(handler)
	require.NoError(t, err)
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	t.Cleanup(func() { close(stop); factory.Shutdown() })
}

// watchPhases records each status a namespace is written with, as "target
// phase", in the order the apiserver delivers them, repeats left out.
func watchPhases(t *testing.T, f *fixture.Fixture, ns string) func() []string {
	var mu sync.Mutex
	var seen []string
	factory := informers.NewSharedInformerFactoryWithOptions(f.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + ns
	}))
	record := func(obj any) {
		n, ok := obj.(*corev1.Namespace)
		if !ok {
			return
		}
		st, _, err := canary.ParseStatus(n.Annotations)
		if err != nil || st == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p := st.Target + " " + string(st.Phase); len(seen) == 0 || seen[len(seen)-1] != p {
			seen = append(seen, p)
		}
	}
	watchInformer(t, factory, factory.Core().V1().Namespaces().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: record, UpdateFunc: func(_, o any) { record(o) },
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// podLog watches a namespace's pods and keeps, in order, the pods that
// began to go away, and the most pods of a set that were down at once.
type podLog struct {
	mu      sync.Mutex
	going   []string
	seen    map[string]bool
	maxDown int
}

// watchPods starts a podLog of the pods of ns; want are the pods counted
// down at once.
func watchPods(t *testing.T, f *fixture.Fixture, ns string, want []string) *podLog {
	l := &podLog{seen: map[string]bool{}}
	factory := informers.NewSharedInformerFactoryWithOptions(f.Client, 0, informers.WithNamespace(ns))
	lister := factory.Core().V1().Pods().Lister()
	update := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		l.mu.Lock()
		defer l.mu.Unlock()
		if ok && p.DeletionTimestamp != nil && !l.seen[string(p.UID)] {
			l.seen[string(p.UID)] = true
			l.going = append(l.going, p.Name)
		}
		down := 0
		for _, name := range want {
			p, err := lister.Pods(ns).Get(name)
			if err != nil || p.DeletionTimestamp != nil || !fixture.PodReady(p) {
				down++
			}
		}
		l.maxDown = max(l.maxDown, down)
	}
	watchInformer(t, factory, factory.Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc: update, UpdateFunc: func(_, o any) { update(o) }, DeleteFunc: update,
	})
	return l
}

func (l *podLog) result() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.going), l.maxDown
}
