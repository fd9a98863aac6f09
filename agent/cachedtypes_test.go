package agent

import (
	"context"
	"reflect"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/consistencydetector"

	"github.com/meshwave/meshwave/canary"
)

// streamed is what a reflector's store holds of list once a streaming
// list ends: each item transformed, then transformed again on its way
// into the informer's queue.
func streamed(t *testing.T, tf func(any) (any, error), list runtime.Object) []any {
	t.Helper()
	items, err := meta.ExtractList(list)
	require.NoError(t, err)
	var out []any
	for _, item := range items {
		once, err := tf(item.DeepCopyObject())
		require.NoError(t, err)
		twice, err := tf(once)
		require.NoError(t, err)
		out = append(out, twice)
	}
	return out
}

// With KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true, client-go compares
// every streaming list with a plain LIST passed through the informer's
// transform, and takes each item the transform returns for a
// runtime.Object: the pod and ReplicaSet informers must not panic there.
func TestTheWatchListConsistencyCheckReadsThePodAndReplicaSetCaches(t *testing.T) {
	tf := transform(map[string]bool{canary.AnnotationSidecar: true})
	d := appliedDeployment("shop", "cart", 3)
	pods := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "50010"}}
	for i := range 3 {
		pods.Items = append(pods.Items, *istioInjectedPod("shop", "cart", i))
	}
	rss := &appsv1.ReplicaSetList{ListMeta: metav1.ListMeta{ResourceVersion: "50010"}}
	for r, hash := range []string{"5b6c7d8e9f", templateHash} {
		rss.Items = append(rss.Items, *replicaSetOf(d, hash, r+1))
	}
	storedPods, storedRSs := streamed(t, tf, pods), streamed(t, tf, rss)

	assert.NotPanics(t, func() {
		consistencydetector.CheckDataConsistency(context.Background(), "pods", "50010",
			func(context.Context, metav1.ListOptions) (*corev1.PodList, error) { return pods.DeepCopy(), nil },
			consistencydetector.TransformFunc(tf), metav1.ListOptions{}, func() []any { return storedPods })
	}, "pods")
	assert.NotPanics(t, func() {
		consistencydetector.CheckDataConsistency(context.Background(), "replicasets", "50010",
			func(context.Context, metav1.ListOptions) (*appsv1.ReplicaSetList, error) { return rss.DeepCopy(), nil },
			consistencydetector.TransformFunc(tf), metav1.ListOptions{}, func() []any { return storedRSs })
	}, "replicasets")
}

// With KUBE_CACHE_MUTATION_DETECTOR=true, client-go deep-copies every
// object it caches and later compares the two with reflect.DeepEqual: a
// copy equals its object and shares none of its maps, those of the pool
// included, so that a write into a cached pod's labels shows.
func TestACachedPodsCopyIsEqualAndItsOwn(t *testing.T) {
	tf := transform(map[string]bool{canary.AnnotationSidecar: true})
	istiod := istioInjectedPod("istio-system", "istiod", 0)
	istiod.Labels["app"] = "istiod"
	for _, obj := range []runtime.Object{istioInjectedPod("shop", "cart", 0), istiod, replicaSetOf(appliedDeployment("shop", "cart", 1), templateHash, 2)} {
		kept, err := tf(obj)
		require.NoError(t, err)
		cached := kept.(runtime.Object)
		copied := cached.DeepCopyObject()
		require.True(t, reflect.DeepEqual(cached, copied), "%T", cached)

		m, err := meta.Accessor(copied)
		require.NoError(t, err)
		if m.GetLabels() != nil {
			m.GetLabels()["written"] = "by mistake"
		}
		m.GetOwnerReferences()[0].Name = "another"
		assert.False(t, reflect.DeepEqual(cached, copied), "%T", cached)
		original, err := meta.Accessor(cached)
		require.NoError(t, err)
		assert.NotContains(t, original.GetLabels(), "written")
		assert.NotEqual(t, "another", original.GetOwnerReferences()[0].Name)
	}
}

// Every cached object keeps its resourceVersion: a shared informer tells
// an update from a resync by it (an update whose object keeps its
// resourceVersion reaches a handler only at its resync), and its store
// records the newest it saw.
func TestTheCachedObjectsKeepTheirResourceVersion(t *testing.T) {
	tf := transform(map[string]bool{canary.AnnotationSidecar: true})
	for i, obj := range clusterAsServed() {
		m, err := meta.Accessor(obj)
		require.NoError(t, err)
		m.SetResourceVersion(strconv.Itoa(48000 + i))
		kept, err := tf(obj.DeepCopyObject())
		require.NoError(t, err)
		k, err := meta.Accessor(kept)
		require.NoError(t, err)
		assert.Equal(t, m.GetResourceVersion(), k.GetResourceVersion(), "%T %s", obj, m.GetName())
	}
}
