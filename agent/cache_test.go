package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	admissionreglisters "k8s.io/client-go/listers/admissionregistration/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

// startCaches starts c's informers, waits for them to sync, and stops
// them when the test ends; it returns the context they run in.
func startCaches(t testing.TB, c *Caches) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Shutdown() })
	c.Start(ctx)
	require.True(t, c.WaitForSync())
	return ctx
}

// cachesOf builds caches straight from indexers holding objs, each
// passed through tf first.
func cachesOf(t testing.TB, tf cache.TransformFunc, objs ...runtime.Object) *Caches {
	t.Helper()
	index := func() cache.Indexer {
		return cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	byKind := map[string]cache.Indexer{}
	for _, kind := range []string{"namespaces", "deployments", "replicasets", "statefulsets", "daemonsets", "revisions", "pods", "pdbs", "webhooks"} {
		byKind[kind] = index()
	}
	for _, obj := range objs {
		var kind string
		switch obj.(type) {
		case *corev1.Namespace:
			kind = "namespaces"
		case *appsv1.Deployment:
			kind = "deployments"
		case *appsv1.ReplicaSet:
			kind = "replicasets"
		case *appsv1.StatefulSet:
			kind = "statefulsets"
		case *appsv1.DaemonSet:
			kind = "daemonsets"
		case *appsv1.ControllerRevision:
			kind = "revisions"
		case *corev1.Pod:
			kind = "pods"
		default:
			kind = "webhooks"
		}
		kept, err := tf(obj.DeepCopyObject())
		require.NoError(t, err)
		require.NoError(t, byKind[kind].Add(kept))
	}
	return &Caches{
		Namespaces:   corelisters.NewNamespaceLister(byKind["namespaces"]),
		Deployments:  appslisters.NewDeploymentLister(byKind["deployments"]),
		ReplicaSets:  NewReplicaSetLister(byKind["replicasets"]),
		StatefulSets: appslisters.NewStatefulSetLister(byKind["statefulsets"]),
		DaemonSets:   appslisters.NewDaemonSetLister(byKind["daemonsets"]),
		Revisions:    NewRevisionLister(byKind["revisions"]),
		Pods:         NewPodLister(byKind["pods"]),
		PDBs:         policylisters.NewPodDisruptionBudgetLister(byKind["pdbs"]),
		Webhooks:     admissionreglisters.NewMutatingWebhookConfigurationLister(byKind["webhooks"]),
	}
}

// clusterAsServed is objects() and kindObjects(), each workload with the
// fields the apiserver and kubectl add that meshwave does not read, and
// namespace load-000 with applied Deployments (one paused), their
// ReplicaSets and injected pods; opted in, with a restart rolled out
// once.
func clusterAsServed() []runtime.Object {
	objs := append(objects(), kindObjects()...)
	for _, obj := range objs {
		m, ok := obj.(metav1.Object)
		if !ok {
			continue
		}
		m.SetManagedFields([]metav1.ManagedFieldsEntry{managedBy("kubectl", metav1.ManagedFieldsOperationUpdate, "", `{"f:metadata":{}}`)})
		m.SetAnnotations(with(m.GetAnnotations(), corev1.LastAppliedConfigAnnotation, `{"kind":"as applied"}`))
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			o.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
			o.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}
		case *appsv1.DaemonSet:
			o.Status.Conditions = []appsv1.DaemonSetCondition{{Type: "Unknown", Message: "read by nobody"}}
		case *appsv1.ControllerRevision:
			o.Data = runtime.RawExtension{Raw: []byte(`{"spec":{"template":{}}}`)}
		}
	}
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "load-000", Labels: map[string]string{canary.LabelRev: "1-25"},
		Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26", corev1.LastAppliedConfigAnnotation: "{}"}}})
	for _, app := range []string{"svc-00", "svc-01"} {
		d := appliedDeployment("load-000", app, 2)
		d.Spec.Template.Annotations = map[string]string{canary.AnnotationRestartedAt: "2025-03-01T12:00:00Z"}
		d.Spec.Paused = app == "svc-01"
		objs = append(objs, d)
		for r, hash := range []string{"5b6c7d8e9f", templateHash} {
			rs := replicaSetOf(d, hash, r+2)
			rs.Spec.Template.Annotations = map[string]string{canary.AnnotationRestartedAt: "2025-02-0" + string(rune('1'+r)) + "T12:00:00Z"}
			objs = append(objs, rs)
		}
		for i := range 2 {
			objs = append(objs, istioInjectedPod("load-000", app, i))
		}
	}
	return objs
}

// podsByName sorts each workload's pods by name: listers list in no
// order.
func podsByName(s canary.Snapshot) canary.Snapshot {
	for _, w := range s.Workloads {
		slices.SortFunc(w.Pods, func(a, b canary.Pod) int { return strings.Compare(a.Name, b.Name) })
	}
	return s
}

// with is annotations with key set to value, in a new map.
func with(annotations map[string]string, key, value string) map[string]string {
	out := map[string]string{key: value}
	for k, v := range annotations {
		out[k] = v
	}
	return out
}

// The caches keep of each object only what meshwave reads: a snapshot and
// the holders read from them are those read from the whole objects (but
// for kubectl's last applied configuration, which a snapshot would pass
// on and nothing reads).
func TestTheCachesKeepWhatMeshwaveReads(t *testing.T) {
	objs := clusterAsServed()
	keep := map[string]bool{canary.AnnotationSidecar: true, "sidecar.istio.io/proxyCPU": true}
	slim := cachesOf(t, transform(keep), objs...)
	// Pods, ReplicaSets and ControllerRevisions, which the caches hold in
	// types of their own, are kept alike on both sides:
	// TestTheTransformKeepsWhatTheOwnTypesHold and the gather tests check
	// what is kept of them.
	whole := cachesOf(t, func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			return slimPod(o, keep), nil
		case *appsv1.ReplicaSet:
			return slimReplicaSet(o), nil
		case *appsv1.ControllerRevision:
			return slimRevision(o), nil
		}
		m := obj.(metav1.Object)
		m.SetAnnotations(withoutLastApplied(m.GetAnnotations()))
		return obj, nil
	}, objs...)
	for _, name := range []string{"shop", "load-000"} {
		ns, err := whole.Namespaces.Get(name)
		require.NoError(t, err)
		want, err := whole.Gather(ns, "istio-system")
		require.NoError(t, err)
		require.NotEmpty(t, want.Workloads, name)
		kept, err := slim.Namespaces.Get(name)
		require.NoError(t, err)
		got, err := slim.Gather(kept, "istio-system")
		require.NoError(t, err)
		assert.Equal(t, podsByName(want), podsByName(got), name)
	}
	sizes := canary.WaveSizes{CanarySize: 1, BatchSize: 5}
	want, err := whole.Holders("istio-system", canary.Config{Sizes: sizes}, func(string) bool { return true })
	require.NoError(t, err)
	got, err := slim.Holders("istio-system", canary.Config{Sizes: sizes}, func(string) bool { return true })
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// The transform runs twice on what a streaming list returns: once into
// the reflector's store, once into the informer's queue.
func TestTheTransformKeepsAKeptObject(t *testing.T) {
	tf := transform(map[string]bool{canary.AnnotationSidecar: true})
	for _, obj := range clusterAsServed() {
		once, err := tf(obj)
		require.NoError(t, err)
		twice, err := tf(once)
		require.NoError(t, err)
		assert.Equal(t, once, twice)
	}
}

// A ReplicaSet keeps its UID, controller, revision and restart stamp, and
// an istiod pod its images.
func TestTheTransformKeepsWhatTheOwnTypesHold(t *testing.T) {
	rs := replicaSetOf(appliedDeployment("shop", "cart", 1), templateHash, 4)
	rs.OwnerReferences = append([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller"}}, rs.OwnerReferences...)
	rs.Spec.Template.Annotations = map[string]string{canary.AnnotationRestartedAt: "2025-03-01T12:00:00Z", "sidecar.istio.io/proxyCPU": "100m"}
	kept := slimReplicaSet(rs)
	assert.Equal(t, &CachedReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "cart-" + templateHash, Namespace: "shop", UID: rs.UID, ResourceVersion: "40004",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "cart", UID: rs.OwnerReferences[1].UID, Controller: ptr.To(true)}}},
		Revision: "4", RestartedAt: "2025-03-01T12:00:00Z"}, kept)
	assert.Equal(t, "cart", metav1.GetControllerOf(kept).Name)

	istiod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "istiod-1-26-x", Namespace: "istio-system", Labels: map[string]string{"app": "istiod"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.26.1", Args: []string{"discovery"}}}}}
	assert.Equal(t, "docker.io/istio/pilot:1.26.1", istiodImage(slimPod(istiod, nil)))
}

// The pod informer hands its handlers the kept pods: a change of an
// istiod pod, in a namespace meshwave does not move, still requeues every
// namespace that opted in, since istiod's readiness decides prechecks.
func TestAnIstiodPodsChangeRequeuesEveryNamespace(t *testing.T) {
	c, client, ctx := startTestController(t, nil, nil)
	// Let the events of the initial list arrive, then forget them.
	time.Sleep(100 * time.Millisecond)
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Forget(key)
		c.queue.Done(key)
	}

	_, err := client.CoreV1().Pods("istio-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "istiod-1-26-y", Namespace: "istio-system",
		Labels: map[string]string{"app": "istiod", canary.LabelRev: "1-26"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.queue.Len() == 1 }, 5*time.Second, 10*time.Millisecond)
	key, _ := c.queue.Get()
	defer c.queue.Done(key)
	assert.Equal(t, "shop", key)
}
