package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshwave/meshwave/canary"
)

// TestANamespaceCacheBehindARollbackRestartsNothing: the wave's rollback
// was decided and written (the namespace's status says RollingBack, cart
// carries its rollback record), but the namespace cache still shows the
// status of the wave under test (a watch that fell behind for longer than
// the expectations live, or a new leader whose namespace watch lags its
// Deployment watch). Whatever that cache says, cart must not be moved to
// the target a second time for the same wave: a decision made from a
// namespace resourceVersion that is not the current one must get a
// conflict before it touches a Deployment.
func TestANamespaceCacheBehindARollbackRestartsNothing(t *testing.T) {
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), nil)
	apiserverResourceVersions(client)
	nsStore := c.caches.informers["namespaces"].GetStore()

	// Wave 1 starts: the status, then cart's move.
	require.NoError(t, c.sync(ctx, "shop"))
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("shop")
		return err == nil && c.expect.satisfied(ns, c.cachedWorkload("shop"), c.cachedPod("shop"), now)
	}, 5*time.Second, 10*time.Millisecond)
	ns, err := c.caches.Namespaces.Get("shop")
	require.NoError(t, err)
	underTest := ns.DeepCopy()
	st, _, err := canary.ParseStatus(ns.Annotations)
	require.NoError(t, err)
	require.Equal(t, canary.WaveVerifying, st.WaveState)

	// cart does not roll out: the wave fails and is rolled back, written
	// as the agent writes it.
	snap, err := c.caches.Gather(ns, c.cfg.RootNamespace)
	require.NoError(t, err)
	fail := canary.Verdict{Gate: "rollout", Result: canary.ResultFail, Reason: "cart did not roll out",
		Failed: []canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart did not roll out"}}}
	d := canary.Decide(canary.Input{Snapshot: snap, Status: st, Verdicts: []canary.Verdict{fail}, Now: now, Config: c.decisions})
	require.Equal(t, canary.PhaseRollingBack, d.Status.Phase)
	require.Len(t, d.Moves, 1)
	require.NoError(t, c.act(ctx, ns, st, d))
	require.Eventually(t, func() bool {
		dep, err := c.caches.Deployments.Deployments("shop").Get("cart")
		if err != nil {
			return false
		}
		r, ok := canary.ReadMoveRecord(dep.Annotations)
		ns, _ := c.caches.Namespaces.Get("shop")
		s, _, _ := canary.ParseStatus(ns.Annotations)
		return ok && r.Rollback && s != nil && s.Phase == canary.PhaseRollingBack
	}, 5*time.Second, 10*time.Millisecond)
	current, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)

	// The namespace watch falls behind: its cache shows the wave under
	// test again, and the expectations of our own writes have expired.
	c.clock.(*clocktesting.FakeClock).Step(time.Minute)
	require.NoError(t, nsStore.Update(underTest))
	client.ClearActions()

	err = c.sync(ctx, "shop")
	require.True(t, apierrors.IsConflict(errors.Unwrap(err)), "the decision from namespace %s meets the namespace at %s: %v", underTest.ResourceVersion, current.ResourceVersion, err)
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "deployments" {
			t.Errorf("cart was patched again from a namespace at resourceVersion %s while the namespace is at %s: %s",
				underTest.ResourceVersion, current.ResourceVersion, a.(k8stesting.PatchAction).GetPatch())
		}
	}
}

// TestRestartsDecidedFromABehindNamespaceAreFenced: a decision that only
// patches Deployments (the restarts a crash between the status write and
// the patches left unsent) still goes through the namespace, fenced with
// the resourceVersion it was decided from. From a namespace cache that is
// behind, it meets a conflict and patches nothing.
func TestRestartsDecidedFromABehindNamespaceAreFenced(t *testing.T) {
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), nil)
	apiserverResourceVersions(client)
	ns, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	stale := ns.DeepCopy()
	_, err = client.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"payments"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	dep, err := client.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
	require.NoError(t, err)
	rec := canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: now, Migration: canary.MigrationID("1-26", now)}
	move := canary.Move{Workload: "cart", Record: rec, Patch: canary.MovePatch(canary.Workload{ResourceVersion: dep.ResourceVersion}, canary.TemplateChanges{}, rec)}
	client.ClearActions()

	err = c.act(ctx, stale, nil, canary.Decision{Moves: []canary.Move{move}})
	require.True(t, apierrors.IsConflict(errors.Unwrap(err)), "%v", err)
	require.Len(t, writesOf(client.Actions()), 1)
	a := writesOf(client.Actions())[0].(k8stesting.PatchAction)
	assert.Equal(t, "namespaces", a.GetResource().Resource)
	assert.JSONEq(t, `{"metadata":{"resourceVersion":"`+stale.ResourceVersion+`"}}`, string(a.GetPatch()))

	// From the current namespace, the same fence passes, writes nothing
	// to the namespace, and the restart goes out.
	current, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	client.ClearActions()
	require.NoError(t, c.act(ctx, current, nil, canary.Decision{Moves: []canary.Move{move}}))
	var resources []string
	for _, a := range writesOf(client.Actions()) {
		resources = append(resources, a.GetVerb()+" "+a.GetResource().Resource)
	}
	assert.Equal(t, []string{"patch namespaces", "patch deployments"}, resources)
}

// writesOf drops the reads from a fake client's actions: the informers
// list and watch again whenever they like.
func writesOf(actions []k8stesting.Action) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		out = append(out, a)
	}
	return out
}

// The gates' observer is told of each evaluation of the wave's gates: the wave
// they were shown, their verdicts, and when.
func TestObserveGatesSeesEveryEvaluation(t *testing.T) {
	type seen struct {
		ns       string
		wave     int
		members  []string
		verdicts []canary.Verdict
		at       time.Time
	}
	var got []seen
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), func(c *Controller) {
		c.observe = func(w canary.WaveUnderTest, vs []canary.Verdict, at time.Time) {
			var members []string
			for _, m := range w.Workloads {
				members = append(members, m.Name)
			}
			got = append(got, seen{w.Namespace, w.Wave, members, vs, at})
		}
	})
	// Writes bump resourceVersions, as the apiserver's do: the cache is
	// caught up only once it shows them.
	apiserverResourceVersions(client)
	require.NoError(t, c.sync(ctx, "shop"))
	require.Empty(t, got, "no wave was under test before the first")
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("shop")
		return err == nil && c.expect.satisfied(ns, c.cachedWorkload("shop"), c.cachedPod("shop"), now)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.sync(ctx, "shop"))
	require.Len(t, got, 1)
	assert.Equal(t, "shop", got[0].ns)
	assert.Equal(t, 1, got[0].wave)
	assert.Equal(t, []string{"cart"}, got[0].members)
	assert.Equal(t, now, got[0].at)
	// The fake client's cart reads as rolled out; its pod is the old one.
	require.Len(t, got[0].verdicts, 2)
	assert.Equal(t, [2]string{"rollout", string(canary.ResultPass)}, [2]string{got[0].verdicts[0].Gate, string(got[0].verdicts[0].Result)})
	assert.Equal(t, [3]string{"injection", string(canary.ResultFail), "pod cart-abc-1 was injected by 1-25, not 1-26"},
		[3]string{got[0].verdicts[1].Gate, string(got[0].verdicts[1].Result), got[0].verdicts[1].Reason})
}
