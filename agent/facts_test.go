package agent

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshwave/meshwave/canary"
)

// gatherFacts gathers namespace shop and returns each workload's facts
// by ID.
func gatherFacts(t *testing.T, caches *Caches) map[string]*canary.Facts {
	t.Helper()
	ns, err := caches.Namespaces.Get("shop")
	require.NoError(t, err)
	snap, err := caches.Gather(ns, "istio-system")
	require.NoError(t, err)
	out := map[string]*canary.Facts{}
	for _, w := range snap.Workloads {
		require.NotNil(t, w.Facts, w.Name)
		require.Equal(t, canary.ReadFacts(&w), w.Facts, "%s: the facts kept are not the workload's own", w.Name)
		out[w.Name] = w.Facts
	}
	return out
}

// Every workload of a gather carries its facts; they are read once per
// object the cache holds, and read again from the new object an update
// brings, however its resourceVersion reads.
func TestGatherKeepsEachCachedObjectsFactsUntilItChanges(t *testing.T) {
	client := fake.NewClientset(append(objects(), kindObjects()...)...)
	caches := NewCaches(client, 0, nil)
	ctx := startCaches(t, caches)

	first := gatherFacts(t, caches)
	require.Len(t, first, 3)
	again := gatherFacts(t, caches)
	for id, f := range first {
		require.Same(t, f, again[id], "%s: its facts were read again from an object that did not change", id)
	}
	require.Equal(t, 1, caches.facts.deployments.len())
	require.Equal(t, 1, caches.facts.statefulSets.len())
	require.Equal(t, 1, caches.facts.daemonSets.len())

	// An update at the same resourceVersion (a fake client does not
	// bump it; an apiserver restored from a backup may hand one out
	// again) still brings a new object, and new facts.
	d, err := client.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
	require.NoError(t, err)
	rv := d.ResourceVersion
	d.Annotations[canary.AnnotationSkip] = "true"
	d.Labels = map[string]string{"istio": "ingressgateway"}
	_, err = client.AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := caches.Deployments.Deployments("shop").Get("cart")
		return err == nil && c.Annotations[canary.AnnotationSkip] == "true"
	}, 10*time.Second, 10*time.Millisecond)
	c, _ := caches.Deployments.Deployments("shop").Get("cart")
	require.Equal(t, rv, c.ResourceVersion)

	after := gatherFacts(t, caches)
	require.True(t, after["cart"].Settings.Skip)
	require.Equal(t, "gateway (istio=ingressgateway)", after["cart"].Gateway)
	require.Same(t, first["StatefulSet/db"], after["StatefulSet/db"])

	// The facts of the object the update replaced go with it.
	require.Eventually(t, func() bool {
		runtime.GC()
		return caches.facts.deployments.len() == 1
	}, 10*time.Second, 50*time.Millisecond, "the replaced Deployment's facts are still kept")
}

func TestFactsAreDroppedWithTheirObject(t *testing.T) {
	var kept factsOf[appsv1.Deployment]
	for i := 0; i < 100; i++ {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop", Annotations: map[string]string{canary.AnnotationWave: "2"}}}
		w := workloadOf(d)
		require.Equal(t, 2, kept.get(d, &w).Settings.Wave)
	}
	require.Eventually(t, func() bool {
		runtime.GC()
		return kept.len() == 0
	}, 10*time.Second, 50*time.Millisecond, "%d objects freed and their facts still kept", kept.len())
}

// Caches that are done with (PlanNow's, HoldersNow's, a controller's
// after Shutdown) go with every object they held. A kept fact's cleanup
// is a root of the garbage collector's for as long as its object lives;
// were it to reach the caches, the caches would keep their objects, and
// so their cleanups, and so themselves, for ever.
func TestCachesDoneWithAreFreedWithTheirObjects(t *testing.T) {
	gathered := func() (weak.Pointer[Caches], weak.Pointer[appsv1.Deployment]) {
		caches := cachesOf(t, transform(nil), objects()...)
		ns, err := caches.Namespaces.Get("shop")
		require.NoError(t, err)
		snap, err := caches.Gather(ns, "istio-system")
		require.NoError(t, err)
		require.NotNil(t, snap.Workloads[0].Facts)
		d, err := caches.Deployments.Deployments("shop").Get("cart")
		require.NoError(t, err)
		return weak.Make(caches), weak.Make(d)
	}
	caches, cart := gathered()
	require.Eventually(t, func() bool {
		runtime.GC()
		return caches.Value() == nil && cart.Value() == nil
	}, 5*time.Second, 50*time.Millisecond, "the caches and the objects they held are never freed")
}
