package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

// The controller's side of the concurrency slots: held only by a
// namespace that migrates, whatever its writes met.

// addOptedInNamespace creates another namespace opted in to 1-26 with one
// injected Deployment, as objects() does for shop.
func addOptedInNamespace(t *testing.T, c *Controller, name string) {
	t.Helper()
	ctx := context.Background()
	controller := func(kind, owner string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: owner, Controller: ptr.To(true), APIVersion: "apps/v1"}}
	}
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "5",
		Labels: map[string]string{canary.LabelRev: "1-25"}, Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.client.AppsV1().Deployments(name).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: name, ResourceVersion: "7", Generation: 1,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"}}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.client.AppsV1().ReplicaSets(name).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "api-abc", Namespace: name,
		OwnerReferences: controller("Deployment", "api"), Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.client.CoreV1().Pods(name).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "api-abc-1", Namespace: name, Labels: map[string]string{"app": "api"},
			Annotations: map[string]string{canary.AnnotationSidecar: `{"revision":"1-25"}`}, OwnerReferences: controller("ReplicaSet", "api-abc")},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.2",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// A refused write changes nothing, and a concurrency slot is held only by
// a namespace that migrates.
//
// Scenario: concurrency 1; shop (priority 100) and web (priority 100, after
// shop by name) are opted in. An admission policy refuses every meshwave
// write to namespace shop with 403 (say, "istio.io/rev is managed by the
// platform team"). shop's first decision starts its canary: writeNamespace
// marks it starting before the PATCH, and a refused PATCH undoes that, so
// web does not wait "for a free slot: 1 of 1 in use by shop" while shop
// never changed anything.
func TestARefusedNamespaceWriteHoldsNoSlot(t *testing.T) {
	var clock *clocktesting.FakeClock
	c, client, ctx := startTestController(t, record.NewFakeRecorder(1000), func(c *Controller) {
		addOptedInNamespace(t, c, "web")
		clock = c.clock.(*clocktesting.FakeClock)
	})
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "shop",
		errString(`admission webhook "protect-rev.example" denied the request: istio.io/rev is managed by platform`))
	client.PrependReactor("patch", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() == "shop" {
			return true, nil, forbidden
		}
		return false, nil, nil
	})

	for minute := 0; minute < 3; minute++ {
		err := c.sync(ctx, "shop")
		require.ErrorAs(t, err, new(refusedWrite), "minute %d", minute)
		clock.Step(time.Second)
		require.Eventually(t, func() bool {
			ns, err := c.caches.Namespaces.Get("web")
			return err == nil && c.expect.satisfied(ns, c.cachedWorkload("web"), c.cachedPod("web"), clock.Now())
		}, 5*time.Second, 10*time.Millisecond)
		require.NoError(t, c.sync(ctx, "web"))
		ns, err := client.CoreV1().Namespaces().Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		st, _, err := canary.ParseStatus(ns.Annotations)
		require.NoError(t, err)
		// shop started nothing, so it holds no slot; it is still first in
		// line (same priority, first by name) until a person lets its
		// writes through or opts it out.
		assert.Equal(t, "Pending: waiting for its turn: shop (priority 100) go first", string(st.Phase)+": "+st.Reason, "minute %d", minute)
		c.startMu.Lock()
		_, starting := c.starting["shop"]
		c.startMu.Unlock()
		assert.False(t, starting, "minute %d: a start whose write was refused is forgotten", minute)
		clock.Step(time.Minute - time.Second) // shop's refused write is asked again
	}
}

// Never more namespaces migrating than concurrency allows, with the peers
// kept between reconciles.
//
// Scenario: concurrency 1; shop and web are opted in. shop is paused
// before its first wave, so it holds no slot, and each status write reads
// it as such. A person removes meshwave.io/paused and shop starts. The
// apiserver bumps the resourceVersion of every write, but the fake
// clientset here does not, as an apiserver over an etcd restored without
// a revision bump can hand out a resourceVersion again: shop migrates at
// the resourceVersion it was paused at. A peer reading kept by
// resourceVersion alone would read shop as still paused, and web's
// decision would start web too.
func TestAPeerIsReadAgainWhenItsAnnotationsChangeAtTheSameResourceVersion(t *testing.T) {
	var clock *clocktesting.FakeClock
	c, client, ctx := startTestController(t, record.NewFakeRecorder(1000), func(c *Controller) {
		addOptedInNamespace(t, c, "web")
		clock = c.clock.(*clocktesting.FakeClock)
		ns, err := c.client.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{})
		require.NoError(t, err)
		ns.Annotations[canary.AnnotationPaused] = "true"
		_, err = c.client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{})
		require.NoError(t, err)
	})
	cachedPhase := func(name string) canary.Phase {
		ns, err := c.caches.Namespaces.Get(name)
		if err != nil {
			return ""
		}
		st, _, _ := canary.ParseStatus(ns.Annotations)
		if st == nil {
			return ""
		}
		return st.Phase
	}
	settled := func(name string) bool {
		ns, err := c.caches.Namespaces.Get(name)
		return err == nil && c.expect.satisfied(ns, c.cachedWorkload(name), c.cachedPod(name), clock.Now())
	}

	require.NoError(t, c.sync(ctx, "shop"))
	require.Eventually(t, func() bool { return cachedPhase("shop") == canary.PhasePaused && settled("shop") }, 5*time.Second, 10*time.Millisecond)
	// Every reconcile reads its peers: web's, here, reads shop paused.
	_, err := c.caches.peers("web", nil)
	require.NoError(t, err)

	_, err = client.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"meshwave.io/paused":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("shop")
		_, paused := ns.Annotations[canary.AnnotationPaused]
		return err == nil && !paused
	}, 5*time.Second, 10*time.Millisecond)
	clock.Step(time.Second)
	require.NoError(t, c.sync(ctx, "shop"))
	require.Eventually(t, func() bool { return cachedPhase("shop") == canary.PhaseMigrating && settled("shop") }, 5*time.Second, 10*time.Millisecond)
	c.startMu.Lock()
	delete(c.starting, "shop") // long after the start: the cache alone says who migrates
	c.startMu.Unlock()

	require.Eventually(t, func() bool { return settled("web") }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.sync(ctx, "web"))
	ns, err := client.CoreV1().Namespaces().Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	st, _, err := canary.ParseStatus(ns.Annotations)
	require.NoError(t, err)
	require.NotNil(t, st)
	assert.Equal(t, "Pending: waiting for a free slot: 1 of 1 in use by shop", string(st.Phase)+": "+st.Reason)
}

// Never more namespaces migrating than concurrency allows, with a status
// restored over newer move records.
//
// Scenario: concurrency 1; shop and web are opted in. shop starts its
// canary; then its meshwave.io/status is replaced by an old copy that says
// a migration to the same target completed an hour before (a GitOps
// re-sync of a stale manifest). shop's next reconcile adopts the migration
// its Deployments' records show, without asking for a slot: adoption
// never does. Read from its annotations alone, shop has ended; read with
// its records, it holds its slot, and web waits.
func TestAnEndedStatusRestoredOverANewerMigrationHoldsItsSlot(t *testing.T) {
	var clock *clocktesting.FakeClock
	recorder := record.NewFakeRecorder(1000)
	c, client, ctx := startTestController(t, recorder, func(c *Controller) {
		addOptedInNamespace(t, c, "web")
		clock = c.clock.(*clocktesting.FakeClock)
	})
	settled := func(name string) bool {
		ns, err := c.caches.Namespaces.Get(name)
		return err == nil && c.expect.satisfied(ns, c.cachedWorkload(name), c.cachedPod(name), clock.Now())
	}
	statusOf := func(name string) *canary.Status {
		ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		st, _, err := canary.ParseStatus(ns.Annotations)
		require.NoError(t, err)
		return st
	}

	require.NoError(t, c.sync(ctx, "shop"))
	started := statusOf("shop")
	require.Equal(t, canary.PhaseMigrating, started.Phase)
	require.Eventually(t, func() bool { return settled("shop") }, 5*time.Second, 10*time.Millisecond)

	old := started.DeepCopy()
	before := started.StartedAt.Add(-time.Hour)
	old.Phase, old.Reason, old.WaveState = canary.PhaseCompleted, "", ""
	old.StartedAt, old.WaveStartedAt, old.GatesSince, old.CompletedAt = &before, &before, nil, ptr.To(before.Add(10*time.Minute))
	raw, err := old.Encode()
	require.NoError(t, err)
	ns, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	ns.Annotations[canary.AnnotationStatus] = raw
	_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("shop")
		return err == nil && ns.Annotations[canary.AnnotationStatus] == raw
	}, 5*time.Second, 10*time.Millisecond)

	// Long after shop's start: this process no longer counts it as
	// starting (withStarting), only as its annotations and records say.
	clock.Step(2 * time.Minute)
	require.Eventually(t, func() bool { return settled("web") }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.sync(ctx, "web"))
	web := statusOf("web")
	assert.Equal(t, "Pending: waiting for a free slot: 1 of 1 in use by shop", string(web.Phase)+": "+web.Reason)

	require.NoError(t, c.sync(ctx, "shop"))
	shop := statusOf("shop")
	assert.Equal(t, canary.PhaseMigrating, shop.Phase)
	assert.Equal(t, started.StartedAt, shop.StartedAt, "shop continues the migration on record")
	assert.True(t, shop.HoldsSlot())
	var adopted []string
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, "StatusAdopted") {
			adopted = append(adopted, e)
		}
	}
	require.Len(t, adopted, 1)
	assert.Contains(t, adopted[0], "newer than the status's")
}
