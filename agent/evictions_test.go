package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

// budgetRefuses is the Eviction API's answer when budget allows no
// disruption, as the apiserver words it (checkAndDecrement).
func budgetRefuses(budget string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s needs 3 healthy pods and has 3 currently", budget)})
	return err
}

// ledgerObjects are namespace ledger, opted in to 1-26, holding an OnDelete
// StatefulSet db of three Ready pods of revision db-1 whose budgets pdbs
// allow no disruption, with a readiness timeout of 10s. update is its
// status's updateRevision: db-2 once it saw a template that replaces none
// of them.
func ledgerObjects(update string, pdbs ...string) []runtime.Object {
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ledger", ResourceVersion: "30", Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationPriority: "10"}}},
		&appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ledger", UID: "uid-db", ResourceVersion: "40", Generation: 1,
				Annotations: map[string]string{canary.AnnotationReadinessTimeout: "10s"}},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}}},
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
				CurrentRevision: "db-1", UpdateRevision: update},
		},
	}
	for i := range 3 {
		objs = append(objs, readyPod("ledger", fmt.Sprintf("db-%d", i), map[string]string{"app": "db", appsv1.ControllerRevisionHashLabelKey: "db-1"},
			controlledBy("apps/v1", "StatefulSet", "db", "uid-db")))
	}
	for _, name := range pdbs {
		objs = append(objs, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ledger"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				MaxUnavailable: ptr.To(intstr.FromInt32(0))}})
	}
	return objs
}

// startLedger runs a controller over objects() and objs, evictions
// answered by evict, at clock.
func startLedger(t *testing.T, clock *clocktesting.FakeClock, evict func(*policyv1.Eviction) error, objs ...runtime.Object) (*Controller, *fake.Clientset, *record.FakeRecorder, context.Context) {
	t.Helper()
	client := fake.NewClientset(append(objects(), objs...)...)
	apiserverResourceVersions(client)
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, evict(action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction))
	})
	cfg := DefaultConfig()
	cfg.LeaderElection.Enabled = false
	recorder := record.NewFakeRecorder(100)
	c, err := New(Options{Client: client, Config: cfg, Clock: clock, Recorder: recorder})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Shutdown)
	client.ClearActions()
	return c, client, recorder, ctx
}

// events drains what the recorder holds.
func events(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// refusedOf gathers ledger and hands its workloads the refusals of stage;
// it returns StatefulSet/db's.
func refusedOf(t *testing.T, c *Controller, stage string) string {
	t.Helper()
	ns, err := c.caches.Namespaces.Get("ledger")
	require.NoError(t, err)
	snap, err := c.caches.Gather(ns, "istio-system")
	require.NoError(t, err)
	c.refusedEvictions.attach("ledger", stage, snap.Workloads)
	for _, w := range snap.Workloads {
		if w.Name == "StatefulSet/db" {
			return w.EvictionRefused
		}
	}
	t.Fatal("no StatefulSet/db gathered")
	return ""
}

const refusedAnswer = "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget db-pdb needs 3 healthy pods and has 3 currently (429 TooManyRequests)"

// A budget's 429 is remembered, naming the budget, the pod and the
// answer, for the wave it was refused in, until an eviction of the
// workload succeeds; the EvictionWaiting Event names the budget too.
func TestABudgetsRefusalIsRememberedForItsWaveUntilAnEvictionSucceeds(t *testing.T) {
	var answer error = budgetRefuses("db-pdb")
	c, _, recorder, ctx := startLedger(t, clocktesting.NewFakeClock(now), func(*policyv1.Eviction) error { return answer }, ledgerObjects("db-2", "db-pdb")...)
	const stage = "1-26@2026-11-29T12:00:00Z wave 1 forward"
	evict := []canary.Eviction{{Workload: "StatefulSet/db", Pod: "db-2", UID: "uid-db-2", Message: "evicting pod db-2"}}

	evs := c.applyEvictions(ctx, "ledger", stage, evict)
	assert.Equal(t, []canary.Event{{Workload: "StatefulSet/db", Type: canary.EventNormal, Reason: "EvictionWaiting",
		Message: "pod db-2 waits for PodDisruptionBudget db-pdb to allow an eviction: " + refusedAnswer}}, evs)
	want := "PodDisruptionBudget db-pdb refused to evict pod db-2: " + refusedAnswer
	assert.Equal(t, want, refusedOf(t, c, stage))
	assert.Equal(t, want, refusedOf(t, c, stage), "it stays while the pod waits")

	// A successful eviction of the workload forgets it.
	answer = nil
	evs = c.applyEvictions(ctx, "ledger", stage, evict)
	assert.Equal(t, []string{"PodEvicted"}, reasonsOf(evs))
	assert.Empty(t, refusedOf(t, c, stage))

	// Another wave, or the rollback of the same one, forgets it.
	answer = budgetRefuses("db-pdb")
	c.applyEvictions(ctx, "ledger", stage, evict)
	assert.Empty(t, refusedOf(t, c, "1-26@2026-11-29T12:00:00Z wave 1 rollback"))
	assert.Empty(t, refusedOf(t, c, stage), "forgotten, not kept aside")
	c.applyEvictions(ctx, "ledger", stage, evict)
	assert.Empty(t, refusedOf(t, c, "1-26@2026-11-29T12:00:00Z wave 2 forward"))

	// A pod evicted by someone else since (replaced under its name) is not
	// the one refused.
	c.applyEvictions(ctx, "ledger", stage, []canary.Eviction{{Workload: "StatefulSet/db", Pod: "db-2", UID: "uid-db-2-before"}})
	assert.Empty(t, refusedOf(t, c, stage))

	// Nothing is remembered outside a wave.
	c.applyEvictions(ctx, "ledger", "", evict)
	assert.Empty(t, refusedOf(t, c, ""))
	events(recorder)
}

// A 429 that no budget made (the apiserver's own throttling) is not a
// budget's refusal: nothing is remembered, and the Event reads as before.
// The budget is named by the answer's cause when the caches hold no single
// budget of the pod, and the reason is bounded whatever the answer.
func TestOnlyABudgetsAnswerIsRememberedAndNamedAsTheAnswerSays(t *testing.T) {
	const stage = "1-26@2026-11-29T12:00:00Z wave 1 forward"
	evict := []canary.Eviction{{Workload: "StatefulSet/db", Pod: "db-2", UID: "uid-db-2"}}

	throttled := apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
	c, _, _, ctx := startLedger(t, clocktesting.NewFakeClock(now), func(*policyv1.Eviction) error { return throttled }, ledgerObjects("db-2", "db-pdb")...)
	evs := c.applyEvictions(ctx, "ledger", stage, evict)
	assert.Equal(t, []canary.Event{{Workload: "StatefulSet/db", Type: canary.EventNormal, Reason: "EvictionWaiting",
		Message: "pod db-2 waits for its PodDisruptionBudget to allow an eviction: Too many requests, please try again later. (429 TooManyRequests)"}}, evs)
	assert.Empty(t, refusedOf(t, c, stage))

	for _, tc := range []struct {
		name string
		pdbs []string
	}{
		{"no budget cached", nil},
		{"two budgets select the pod", []string{"db-pdb-a", "db-pdb-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, _, ctx := startLedger(t, clocktesting.NewFakeClock(now), func(*policyv1.Eviction) error { return budgetRefuses("db-pdb") }, ledgerObjects("db-2", tc.pdbs...)...)
			c.applyEvictions(ctx, "ledger", stage, evict)
			assert.Equal(t, "PodDisruptionBudget db-pdb refused to evict pod db-2: "+refusedAnswer, refusedOf(t, c, stage))
		})
	}

	t.Run("an answer of any length", func(t *testing.T) {
		long := apierrors.NewTooManyRequests(strings.Repeat("é", 2000), 0)
		long.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "an unexpected wording"}}
		c, _, _, ctx := startLedger(t, clocktesting.NewFakeClock(now), func(*policyv1.Eviction) error { return long }, ledgerObjects("db-2")...)
		c.applyEvictions(ctx, "ledger", stage, evict)
		got := refusedOf(t, c, stage)
		assert.LessOrEqual(t, len(got), maxRefusalReason)
		assert.True(t, strings.HasPrefix(got, "a PodDisruptionBudget refused to evict pod db-2: éé"), got)
		assert.True(t, strings.HasSuffix(got, "é…"), "cut on a rune: %q", got)
	})
}

// An OnDelete StatefulSet whose budget refuses every eviction fails its
// wave at its readiness timeout, and the status's reason and failure name
// the budget and its answer, not only the replicas updated.
func TestAWaveHeldByABudgetFailsNamingTheBudget(t *testing.T) {
	clock := clocktesting.NewFakeClock(now)
	c, client, recorder, ctx := startLedger(t, clock, func(*policyv1.Eviction) error { return budgetRefuses("db-pdb") }, ledgerObjects("db-1", "db-pdb")...)

	require.NoError(t, c.sync(ctx, "ledger"))
	assert.Equal(t, []string{"patch namespaces ledger", "patch statefulsets ledger/db"}, writeTargets(client.Actions()))
	// The StatefulSet controller sees the new template; under OnDelete it
	// replaces no pod.
	sts, err := client.AppsV1().StatefulSets("ledger").Get(ctx, "db", metav1.GetOptions{})
	require.NoError(t, err)
	sts.Status.UpdateRevision, sts.Status.UpdatedReplicas = "db-2", 0
	sts.ResourceVersion = "2000"
	require.NoError(t, client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("statefulsets"), sts, "ledger"))
	waitCaughtUp(t, c, "ledger", func() bool {
		s, err := c.caches.StatefulSets.StatefulSets("ledger").Get("db")
		return err == nil && s.ResourceVersion == "2000"
	})
	client.ClearActions()

	// The wave evicts db-2 first; its budget refuses.
	require.NoError(t, c.sync(ctx, "ledger"))
	assert.Contains(t, writeTargets(client.Actions()), "create pods ledger/db-2")
	ns, err := client.CoreV1().Namespaces().Get(ctx, "ledger", metav1.GetOptions{})
	require.NoError(t, err)
	waitCaughtUp(t, c, "ledger", func() bool {
		n, err := c.caches.Namespaces.Get("ledger")
		return err == nil && n.ResourceVersion == ns.ResourceVersion
	})

	// Past the readiness timeout, the wave fails naming the budget.
	clock.Step(11 * time.Second)
	require.NoError(t, c.sync(ctx, "ledger"))
	ns, err = client.CoreV1().Namespaces().Get(ctx, "ledger", metav1.GetOptions{})
	require.NoError(t, err)
	st, _, err := canary.ParseStatus(ns.Annotations)
	require.NoError(t, err)
	failure := "StatefulSet/db did not roll out within 10s: 0 of 3 replicas updated; PodDisruptionBudget db-pdb refused to evict pod db-2: " + refusedAnswer
	assert.Equal(t, canary.PhaseRollingBack, st.Phase)
	assert.Equal(t, "wave 1 failed: rollout fail: "+failure, st.Reason)
	require.Len(t, st.Failures, 1)
	assert.Equal(t, failure, st.Failures[0].Reason)
	assert.Contains(t, events(recorder), "Warning WorkloadFailed wave 1, rollout: "+failure)
}

// waitCaughtUp waits until the caches show ready() and every write of ns
// the controller expects.
func waitCaughtUp(t *testing.T, c *Controller, ns string, ready func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := c.caches.Namespaces.Get(ns)
		return err == nil && ready() && c.expect.satisfied(n, c.cachedWorkload(ns), c.cachedPod(ns), c.clock.Now())
	}, 5*time.Second, 10*time.Millisecond)
}

// reasonsOf are the Events' reasons.
func reasonsOf(evs []canary.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}
