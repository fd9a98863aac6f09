package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func objects() []runtime.Object {
	controller := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: ptr.To(true), APIVersion: "apps/v1"}}
	}
	injected := map[string]string{canary.AnnotationSidecar: `{"revision":"1-25"}`, "sidecar.istio.io/proxyCPU": "50m", "prometheus.io/port": "9090"}
	pod := func(name string, ns string, labels map[string]string, ann map[string]string, owner []metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann, OwnerReferences: owner},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	mwc := func(name, rev string) *admissionregv1.MutatingWebhookConfiguration {
		return &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{canary.LabelRev: rev}}}
	}
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "5", Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26"}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop", ResourceVersion: "7", Generation: 1,
				Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cart"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cart"}}}},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1},
		},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "cart-abc", Namespace: "shop", OwnerReferences: controller("Deployment", "cart"),
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}},
		pod("cart-abc-1", "shop", map[string]string{"app": "cart"}, injected, controller("ReplicaSet", "cart-abc")),
		mwc("istio-sidecar-injector-1-25", "1-25"),
		mwc("istio-sidecar-injector-1-26", "1-26"),
		pod("istiod-1-26-x", "istio-system", map[string]string{"app": "istiod", canary.LabelRev: "1-26"}, nil, nil),
	}
}

// startTestController runs a controller's caches over a fake clientset
// holding objects(), with leader election off and the clock at now. before
// adjusts the controller ahead of the caches' start. Actions recorded so
// far are cleared.
func startTestController(t *testing.T, recorder record.EventRecorder, before func(*Controller)) (*Controller, *fake.Clientset, context.Context) {
	t.Helper()
	client := fake.NewClientset(objects()...)
	cfg := DefaultConfig()
	cfg.LeaderElection.Enabled = false
	c, err := New(Options{Client: client, Config: cfg, Clock: clocktesting.NewFakeClock(now), Recorder: recorder})
	require.NoError(t, err)
	if before != nil {
		before(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Shutdown)
	client.ClearActions()
	return c, client, ctx
}

// TestOneSyncStartsTheCanaryWithExactlyTheseWrites checks the API actions
// of the first reconcile of an opted-in namespace: one namespace write,
// fenced with the resourceVersion the decision was made from, carrying the
// status and the label switch together; then one merge patch of the
// canary Deployment.
func TestOneSyncStartsTheCanaryWithExactlyTheseWrites(t *testing.T) {
	recorder := record.NewFakeRecorder(20)
	c, client, ctx := startTestController(t, recorder, nil)

	require.NoError(t, c.sync(ctx, "shop"))

	var writes []k8stesting.PatchAction
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			writes = append(writes, p)
		}
	}
	require.Len(t, writes, 2, "the namespace once, one deployment")

	assert.Equal(t, "namespaces", writes[0].GetResource().Resource)
	var nsPatch struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
			Labels          map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(writes[0].GetPatch(), &nsPatch))
	assert.Equal(t, "5", nsPatch.Metadata.ResourceVersion)
	assert.Equal(t, map[string]string{canary.LabelRev: "1-26"}, nsPatch.Metadata.Labels)
	require.Len(t, nsPatch.Metadata.Annotations, 1)
	st, _, err := canary.ParseStatus(nsPatch.Metadata.Annotations)
	require.NoError(t, err)
	assert.Equal(t, canary.PhaseMigrating, st.Phase)
	assert.Equal(t, 1, st.Wave)
	assert.Equal(t, []canary.WorkloadState{{Name: "cart", State: canary.StateMoving}}, st.Workloads)

	assert.Equal(t, "deployments", writes[1].GetResource().Resource)
	assert.Equal(t, "cart", writes[1].GetName())
	assert.JSONEq(t, `{
	  "metadata": {"resourceVersion": "7", "annotations": {"meshwave.io/move": "{\"revision\":\"1-26\",\"from\":\"1-25\",\"wave\":1,\"at\":\"2026-11-29T12:00:00Z\",\"migration\":\"1-26@2026-11-29T12:00:00Z\"}"}},
	  "spec": {"template": {"metadata": {"annotations": {
	    "kubectl.kubernetes.io/restartedAt": "2026-11-29T12:00:00Z",
	    "sidecar.istio.io/proxyCPU": "50m"
	  }}}}
	}`, string(writes[1].GetPatch()))

	close(recorder.Events)
	var events []string
	for e := range recorder.Events {
		events = append(events, e)
	}
	assert.Equal(t, []string{
		"Normal MigrationStarted moving 1 workloads from 1-25 to 1-26 in 1 waves",
		"Warning PrecheckWarning deployment cart has one replica and no PodDisruptionBudget: it is unavailable while it restarts",
		"Normal WaveStarted wave 1/1 (canary) started: cart",
		"Normal Restarted moving to 1-26 in wave 1",
	}, events)
}

// TestASyncOnACacheBehindItsOwnWritesWaits checks that after writing, the
// next reconcile does not decide until the cache shows those writes, and
// decides as soon as it does.
func TestASyncOnACacheBehindItsOwnWritesWaits(t *testing.T) {
	c, client, ctx := startTestController(t, record.NewFakeRecorder(20), func(c *Controller) {
		c.expect.expectMove("shop", "cart", "8", `{"revision":"1-26"}`, now)
	})

	require.NoError(t, c.sync(ctx, "shop"))
	for _, a := range client.Actions() {
		assert.NotEqual(t, "patch", a.GetVerb(), "no write while the cache lags: %v", a)
	}

	// The cache catches up: cart is at resourceVersion 8 (someone else's
	// write after ours counts too). Now the namespace is decided on.
	dep, err := client.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
	require.NoError(t, err)
	dep.ResourceVersion = "9"
	require.NoError(t, c.caches.informers["deployments"].GetStore().Update(dep))
	require.NoError(t, c.sync(ctx, "shop"))
	patched := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patched++
		}
	}
	assert.Equal(t, 2, patched, "the namespace and the canary")
}
