package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshwave/meshwave/canary"
)

// These tests drive a NewCaches' informer stores and its stamp handlers by
// hand, in the order a shared informer does: the store holds a change
// first, and the handlers hear of it afterwards, on each listener's own
// goroutine (so after WaitForSync at start-up too: the initial adds are
// still being delivered). Reads of the peers run on the workers,
// concurrently with both.

// truth is the peer canary.PeerOf reads from shop's annotations and what
// the cache holds now, without any memo.
func truth(t *testing.T, c *Caches, annotations map[string]string) canary.Peer {
	t.Helper()
	p, ok := canary.PeerOf("shop", annotations, mesh126.Resolve, func() ([]canary.Workload, error) { return c.recordsOf("shop") })
	require.True(t, ok)
	return p
}

// Invariant 8, the other way: a hold nothing explains never lifts.
//
// Scenario: shop's status says its migration completed at 12:00. A
// Deployment whose move record names a newer migration (13:00) is created
// in shop (a manifest copied with its annotations, a restore) and deleted
// again before shop's own reconcile adopted it. An admission read shop
// between the store taking the Deployment and the stamp handler hearing of
// it: stamp 0, one conflicting record, HoldsSlot. The add is then
// stamped, the delete is stamped, and shop, left without workloads, has
// its stamp forgotten: 0 again. The memo hands back the hold kept at
// stamp 0. shop's own decision has nothing to adopt and writes nothing, no
// workload of shop changes any more, so nothing ever reads shop again:
// every other namespace waits for a slot shop does not hold, forever.
func TestAPeerHoldReadBeforeItsStampIsNotKeptOnceTheWorkloadsAreGone(t *testing.T) {
	c := NewCaches(fake.NewClientset(), 0, nil)
	deps := c.informers["deployments"].GetIndexer()
	shop := peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)})
	copied := recorded("a", time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC))

	require.NoError(t, deps.Add(copied)) // the store holds it ...
	p, _ := c.peerOf(shop, mesh126.Resolve)
	require.True(t, p.HoldsSlot, "the records of 13:00 contradict the status of 12:00")
	c.stamps.added("shop") // ... and then the handler hears of it

	require.NoError(t, deps.Delete(copied))
	c.stamps.deleted("shop")
	require.Zero(t, c.stamps.of("shop"), "shop has no workloads left: its stamp is dropped")

	want := truth(t, c, shop.Annotations)
	require.False(t, want.HoldsSlot, "nothing contradicts shop's status any more")
	p, _ = c.peerOf(shop, mesh126.Resolve)
	assert.Equal(t, want, p, "the memo hands back the hold it kept at stamp 0, a stamp that came back")
	ok, why := canary.Admit(canary.Peer{Name: "web", Priority: 100}, []canary.Peer{p}, 1)
	assert.True(t, ok, "web waits for a slot nobody holds: %s", why)
}

// Invariant 8: never more namespaces migrating than concurrency.
//
// Scenario: shop's status says its migration completed at 12:00; shop has
// a StatefulSet db, and a peer read keeps "holds no slot" at db's stamp.
// db is then replaced by a Deployment a carrying the record of a newer
// migration (13:00; a restore, an app moved from one kind to another).
// The Deployment informer has stored a but its handler has not run yet
// when the StatefulSet informer's handler for db's delete runs, leaving
// shop without a stamp. When the stamp was dropped by listing the caches
// for what was left, it could wipe a stamp a's handler had just drawn, and
// a kept answer at that stamp came back while a contradicted the status.
func TestAStampDroppedAsAWorkloadArrivesHidesNoRecords(t *testing.T) {
	c := NewCaches(fake.NewClientset(), 0, nil)
	deps := c.informers["deployments"].GetIndexer()
	stss := c.informers["statefulsets"].GetIndexer()
	shop := peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)})

	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}}
	require.NoError(t, stss.Add(db))
	c.stamps.added("shop")
	p, _ := c.peerOf(shop, mesh126.Resolve)
	require.False(t, p.HoldsSlot, "nothing contradicts the status")

	a := recorded("a", time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC))
	require.NoError(t, deps.Add(a)) // a's handler has not run yet
	require.NoError(t, stss.Delete(db))
	c.stamps.deleted("shop") // db's delete: no stamp now
	for _, step := range []string{"before a's handler ran", "after a's handler ran"} {
		want := truth(t, c, shop.Annotations)
		require.True(t, want.HoldsSlot, "a's record of 13:00 contradicts the status of 12:00: shop's next decision adopts it")
		p, _ = c.peerOf(shop, mesh126.Resolve)
		assert.Equal(t, want, p, "%s: stamp %d, and the cache holds %d workloads of shop", step, c.stamps.of("shop"), len(mustRecords(t, c)))
		ok, _ := canary.Admit(canary.Peer{Name: "web", Priority: 100}, []canary.Peer{p}, 1)
		assert.False(t, ok, "%s: web is admitted beside shop, whose next reconcile adopts without admission", step)
		c.stamps.added("shop")
	}
}

func mustRecords(t *testing.T, c *Caches) []canary.Workload {
	ws, err := c.recordsOf("shop")
	require.NoError(t, err)
	return ws
}

// The same, with real informers: a workload's add is in the cache before
// the stamp handler has heard of it (at start-up, about half of the time,
// measured), and a peer read then must not be kept. a is created once the
// informers watch (a fake clientset drops what happens before its watch
// starts), and read as soon as the cache shows it.
func TestAPeerHoldReadAtStartUpOutlivesNoneOfTheWorkloadsItRead(t *testing.T) {
	for attempt := 0; attempt < 20; attempt++ {
		shop := peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)})
		client := fake.NewClientset(shop)
		c := NewCaches(client, 0, nil)
		ctx, cancel := context.WithCancel(context.Background())
		c.Start(ctx)
		require.True(t, c.WaitForSync())
		a := recorded("a", time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC))
		require.Eventually(t, func() bool {
			if _, err := c.Deployments.Deployments("shop").Get("a"); err == nil {
				return true
			}
			if _, err := client.AppsV1().Deployments("shop").Create(ctx, a, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				_, _ = client.AppsV1().Deployments("shop").Update(ctx, a, metav1.UpdateOptions{}) // the create came before the watch
			}
			return false
		}, 5*time.Second, time.Millisecond)
		ns, err := c.Namespaces.Get("shop")
		require.NoError(t, err)
		p, _ := c.peerOf(ns, mesh126.Resolve)
		require.True(t, p.HoldsSlot, "attempt %d", attempt)
		c.peerMemo.mu.Lock()
		kept, ok := c.peerMemo.entries["shop"]
		c.peerMemo.mu.Unlock()
		assert.False(t, ok && kept.stamp == 0, "attempt %d: an answer read at stamp 0 is kept", attempt)
		require.NoError(t, client.AppsV1().Deployments("shop").Delete(ctx, "a", metav1.DeleteOptions{}))
		require.Eventually(t, func() bool { return c.stamps.len() == 0 && len(mustRecords(t, c)) == 0 }, 5*time.Second, time.Millisecond)
		want := truth(t, c, ns.Annotations)
		require.False(t, want.HoldsSlot)
		p, _ = c.peerOf(ns, mesh126.Resolve)
		assert.Equal(t, want, p, "attempt %d: shop has no workloads, yet holds the slot a's record gave it", attempt)
		cancel()
		c.Shutdown()
	}
}
