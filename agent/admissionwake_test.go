package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshwave/meshwave/canary"
)

// A namespace read as a peer from its workloads' move records (no status
// yet) holds the slot while a record of a migration under way is on its
// Deployment; the one waiting says so. The record taken off before the
// namespace adopted it changes the peer with no namespace write, and
// wakes the one waiting; so does the namespace's first status (Pending),
// which read against the records as they are now looks like no change to
// it as a peer, though the one waiting may have read the record.
func TestAStatusWriteOfAPeerReadFromItsRecordsWakesTheWaiting(t *testing.T) {
	var clock *clocktesting.FakeClock
	c, client, ctx := startTestController(t, record.NewFakeRecorder(1000), func(c *Controller) {
		addOptedInNamespace(t, c, "app")
		clock = c.clock.(*clocktesting.FakeClock)
	})
	mesh, err := c.caches.revisions()
	require.NoError(t, err)
	shopPeer := func() canary.Peer {
		ns, err := c.caches.Namespaces.Get("shop")
		require.NoError(t, err)
		p, _ := c.caches.peerOf(ns, mesh.Resolve)
		return p
	}
	setRecord := func(raw string) {
		d, err := client.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
		require.NoError(t, err)
		if raw == "" {
			delete(d.Annotations, canary.AnnotationMove)
		} else {
			d.Annotations[canary.AnnotationMove] = raw
		}
		_, err = client.AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	at := now.Add(-time.Hour)
	rec := canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: at, Migration: canary.MigrationID("1-26", at)}
	setRecord(rec.Encode())
	require.Eventually(t, func() bool { return shopPeer().HoldsSlot }, 5*time.Second, 10*time.Millisecond)

	waitSettled(t, c, clock, "app")
	require.NoError(t, c.sync(ctx, "app"))
	require.Eventually(t, func() bool { return cachedStatus(c, "app") != nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "Pending: waiting for a free slot: 1 of 1 in use by shop", string(cachedStatus(c, "app").Phase)+": "+cachedStatus(c, "app").Reason)

	drainQueue(c)
	setRecord("")
	require.Eventually(t, func() bool { return !shopPeer().HoldsSlot }, 5*time.Second, 10*time.Millisecond)
	assert.True(t, drainQueue(c)["app"], "the record's removal wakes the namespace waiting on the slot it held")

	waitSettled(t, c, clock, "shop")
	require.NoError(t, c.sync(ctx, "shop"))
	require.Eventually(t, func() bool { return cachedStatus(c, "shop") != nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, canary.PhasePending, cachedStatus(c, "shop").Phase, cachedStatus(c, "shop").Reason)
	woken := drainQueue(c)

	ok, why := canary.Admit(canary.Peer{Name: "app", Priority: 100, Phase: canary.PhasePending}, func() []canary.Peer {
		ps, err := c.caches.peers("app", mesh.Resolve)
		require.NoError(t, err)
		return ps
	}(), 1)
	require.True(t, ok, why)
	assert.True(t, woken["app"], "shop's first status, read against records the waiting may not have read, wakes them too: app may start, and says %q", cachedStatus(c, "app").Reason)

	// Woken, app starts.
	clock.Step(time.Second)
	require.NoError(t, c.sync(ctx, "app"))
	require.Eventually(t, func() bool { return cachedStatus(c, "app").Phase != canary.PhasePending }, 5*time.Second, 10*time.Millisecond)
}

// A Deployment copied in with a newer move record makes a completed
// namespace hold the slot as a peer; deleted before the namespace adopted
// it, it leaves the namespace's status as it was. The change of the
// workloads alone wakes the namespace waiting on that slot.
func TestAMoveRecordGoneFromAPeerWakesTheWaiting(t *testing.T) {
	var clock *clocktesting.FakeClock
	c, client, ctx := startTestController(t, record.NewFakeRecorder(1000), func(c *Controller) {
		addOptedInNamespace(t, c, "app")
		clock = c.clock.(*clocktesting.FakeClock)
	})
	mesh, err := c.caches.revisions()
	require.NoError(t, err)
	appNS, err := client.CoreV1().Namespaces().Get(ctx, "app", metav1.GetOptions{})
	require.NoError(t, err)
	appNS.Annotations[canary.AnnotationPriority] = "200"
	_, err = client.CoreV1().Namespaces().Update(ctx, appNS, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("app")
		return err == nil && ns.Annotations[canary.AnnotationPriority] == "200"
	}, 5*time.Second, 10*time.Millisecond)
	// shop as a completed migration leaves it.
	started := now.Add(-2 * time.Hour)
	done := &canary.Status{Phase: canary.PhaseCompleted, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 1, StartedAt: &started, WaveStartedAt: &started, CompletedAt: &started}
	raw, err := done.Encode()
	require.NoError(t, err)
	shopNS, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	shopNS.Annotations[canary.AnnotationStatus] = raw
	shopNS.Labels[canary.LabelRev] = "1-26"
	_, err = client.CoreV1().Namespaces().Update(ctx, shopNS, metav1.UpdateOptions{})
	require.NoError(t, err)
	cart, err := client.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
	require.NoError(t, err)
	cart.Annotations[canary.AnnotationMove] = (&canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: started, Migration: canary.MigrationID("1-26", started)}).Encode()
	_, err = client.AppsV1().Deployments("shop").Update(ctx, cart, metav1.UpdateOptions{})
	require.NoError(t, err)
	pod, err := client.CoreV1().Pods("shop").Get(ctx, "cart-abc-1", metav1.GetOptions{})
	require.NoError(t, err)
	pod.Annotations[canary.AnnotationSidecar] = `{"revision":"1-26"}`
	_, err = client.CoreV1().Pods("shop").Update(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return cachedStatus(c, "shop") != nil }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	client.ClearActions()
	waitSettled(t, c, clock, "shop")
	require.NoError(t, c.sync(ctx, "shop"))
	require.Equal(t, canary.PhaseCompleted, cachedStatus(c, "shop").Phase, cachedStatus(c, "shop").Reason)
	drainQueue(c)

	copied := recorded("copy", clock.Now().Add(-time.Second))
	_, err = client.AppsV1().Deployments("shop").Create(ctx, copied, metav1.CreateOptions{})
	require.NoError(t, err)
	shopPeer := func() canary.Peer {
		ns, err := c.caches.Namespaces.Get("shop")
		require.NoError(t, err)
		p, _ := c.caches.peerOf(ns, mesh.Resolve)
		return p
	}
	require.Eventually(t, func() bool { return shopPeer().HoldsSlot }, 5*time.Second, 10*time.Millisecond)
	waitSettled(t, c, clock, "app")
	require.NoError(t, c.sync(ctx, "app"))
	require.Eventually(t, func() bool { return cachedStatus(c, "app") != nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, canary.PhasePending, cachedStatus(c, "app").Phase)
	require.Contains(t, cachedStatus(c, "app").Reason, "in use by shop")
	drainQueue(c)

	require.NoError(t, client.AppsV1().Deployments("shop").Delete(ctx, "copy", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return !shopPeer().HoldsSlot }, 5*time.Second, 10*time.Millisecond)
	woken := drainQueue(c)
	assert.True(t, woken["app"], "app still says %q", cachedStatus(c, "app").Reason)
}

// The peer kept for a namespace is read again when its target mode
// changes: a completed sidecar move given meshwave.io/target-mode: ambient
// starts over, and waits like any new migration.
func TestAPeerIsReadAgainWhenItsTargetModeChanges(t *testing.T) {
	done := encodedStatus(t, canary.PhaseCompleted)
	sidecar := map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: done}
	ambient := map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: done, canary.AnnotationTargetMode: "ambient"}
	want, _ := canary.PeerOf("shop", ambient, mesh126.Resolve, noWorkloads)
	var m peerMemo
	m.of(peerNamespace("shop", "1", sidecar), mesh126.Resolve, noWorkloads, stamped)
	got, _ := m.of(peerNamespace("shop", "2", ambient), mesh126.Resolve, noWorkloads, stamped)
	assert.Equal(t, want, got)
	assert.NotEqual(t, canary.PhaseCompleted, got.Phase)
}

// cachedStatus is a namespace's status as the cache holds it; nil when
// it has none.
func cachedStatus(c *Controller, name string) *canary.Status {
	ns, err := c.caches.Namespaces.Get(name)
	if err != nil {
		return nil
	}
	st, _, _ := canary.ParseStatus(ns.Annotations)
	return st
}

// waitSettled waits until the cache shows the controller's own last writes in
// a namespace, so that its next decision is made.
func waitSettled(t *testing.T, c *Controller, clock *clocktesting.FakeClock, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get(name)
		return err == nil && c.expect.satisfied(ns, c.cachedWorkload(name), c.cachedPod(name), clock.Now())
	}, 5*time.Second, 10*time.Millisecond)
}

// drainQueue empties the queue after the handlers had time to run, and
// returns the namespaces that were in it.
func drainQueue(c *Controller) map[string]bool {
	time.Sleep(200 * time.Millisecond)
	woken := map[string]bool{}
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		woken[key] = true
		c.queue.Forget(key)
		c.queue.Done(key)
	}
	return woken
}
