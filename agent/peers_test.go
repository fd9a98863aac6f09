package agent

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshwave/meshwave/canary"
)

func peerNamespace(name, rv string, annotations map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Annotations: annotations}}
}

func encodedStatus(t *testing.T, phase canary.Phase) string {
	t.Helper()
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := &canary.Status{Phase: phase, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 1, WaveState: canary.WaveVerifying, StartedAt: &started, WaveStartedAt: &started, GatesSince: &started}
	if phase == canary.PhaseCompleted {
		st.WaveState, st.CompletedAt, st.GatesSince = "", &started, nil
	}
	raw, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// mesh126 resolves 1-26, 1-27 and the tag canary (to 1-26).
var mesh126 = canary.Mesh{Revisions: map[string]canary.Revision{"1-26": {Name: "1-26"}, "1-27": {Name: "1-27"}}, Tags: map[string]string{"canary": "1-26"}}

// noWorkloads is a namespace without workloads.
func noWorkloads() ([]canary.Workload, error) { return nil, nil }

// stamped is a namespace whose workloads never change.
func stamped() (uint64, bool) { return 1, true }

func TestThePeerMemoReadsANamespaceAgainWhenItChanges(t *testing.T) {
	var m peerMemo
	never := func() ([]canary.Workload, error) {
		t.Fatal("a namespace migrating needs no workloads")
		return nil, nil
	}
	migrating := encodedStatus(t, canary.PhaseMigrating)
	ns := peerNamespace("shop", "10", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: migrating})
	p, ok := m.of(ns, mesh126.Resolve, never, stamped)
	assert.True(t, ok)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 100, Phase: canary.PhaseMigrating, HoldsSlot: true}, p)

	// The same annotations give the same answer, whatever the
	// resourceVersion and the other annotations.
	p, _ = m.of(peerNamespace("shop", "11", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: migrating, "team": "payments"}), mesh126.Resolve, never, stamped)
	assert.True(t, p.HoldsSlot)
	assert.Equal(t, 1, m.size())

	// Other annotations are read again.
	completed := encodedStatus(t, canary.PhaseCompleted)
	p, _ = m.of(peerNamespace("shop", "12", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed}), mesh126.Resolve, noWorkloads, stamped)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 100, Phase: canary.PhaseCompleted}, p)
	p, _ = m.of(peerNamespace("shop", "13", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed, canary.AnnotationPriority: "5"}), mesh126.Resolve, noWorkloads, stamped)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 5, Phase: canary.PhaseCompleted}, p)
	p, _ = m.of(peerNamespace("shop", "14", map[string]string{canary.AnnotationTargetRevision: "1-27", canary.AnnotationStatus: completed, canary.AnnotationPriority: "5"}), mesh126.Resolve, never, stamped)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 5, Phase: canary.PhasePending}, p, "a target changed after completion waits for a slot")
}

// A resourceVersion is not the contents it was read at: an etcd restored
// without a revision bump hands out resourceVersions again, and a replica
// that kept its caches meets a namespace at a resourceVersion it read
// other contents at (so does a fake clientset, which does not bump it).
func TestThePeerMemoReadsANamespaceAgainAtAResourceVersionItHasSeen(t *testing.T) {
	var m peerMemo
	completed := encodedStatus(t, canary.PhaseCompleted)
	p, _ := m.of(peerNamespace("shop", "150", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed}), mesh126.Resolve, noWorkloads, stamped)
	assert.False(t, p.HoldsSlot)

	migrating := encodedStatus(t, canary.PhaseMigrating)
	p, _ = m.of(peerNamespace("shop", "150", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: migrating}), mesh126.Resolve, noWorkloads, stamped)
	assert.True(t, p.HoldsSlot, "shop migrates at a resourceVersion it was once read Completed at")

	// Without a resourceVersion at all, as a test's objects may be.
	p, _ = m.of(peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed}), mesh126.Resolve, noWorkloads, stamped)
	assert.False(t, p.HoldsSlot)
	p, _ = m.of(peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: "{"}), mesh126.Resolve, noWorkloads, stamped)
	assert.True(t, p.HoldsSlot, "an unreadable status holds a slot")
}

// recorded is a Deployment of shop carrying a move record of migration
// 1-26 started at the given time, or none when started is zero.
func recorded(name string, started time.Time) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Annotations: map[string]string{}}}
	if !started.IsZero() {
		r := canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: started, Migration: canary.MigrationID("1-26", started)}
		d.Annotations[canary.AnnotationMove] = r.Encode()
	}
	return d
}

func asWorkloads(deps ...*appsv1.Deployment) []canary.Workload {
	var out []canary.Workload
	for _, d := range deps {
		out = append(out, workloadOf(d))
	}
	return out
}

// A peer whose answer its workloads settle (no status; a status that
// ended, which newer move records may contradict) is read again whenever
// its namespace's workloads are stamped, and not otherwise.
func TestThePeerMemoReadsAPeerAgainWhenItsWorkloadsChange(t *testing.T) {
	var m peerMemo
	stamps := newWorkloadStamps()
	stamps.added("shop")
	deps := []*appsv1.Deployment{recorded("a", time.Time{})}
	lists := 0
	workloads := func() ([]canary.Workload, error) { lists++; return asWorkloads(deps...), nil }
	stamp := func() (uint64, bool) { return stamps.of("shop"), true }
	read := func(annotations map[string]string) canary.Peer {
		t.Helper()
		p, ok := m.of(peerNamespace("shop", "10", annotations), mesh126.Resolve, workloads, stamp)
		require.True(t, ok)
		return p
	}
	optedIn := map[string]string{canary.AnnotationTargetRevision: "1-26"}
	assert.False(t, read(optedIn).HoldsSlot)
	assert.False(t, read(optedIn).HoldsSlot)
	assert.Equal(t, 1, lists, "nothing changed: the kept answer")

	// A workload gains a move record; the namespace does not change.
	deps = []*appsv1.Deployment{recorded("a", time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC))}
	stamps.changed("shop")
	assert.True(t, read(optedIn).HoldsSlot, "a namespace without a status holds a slot once a workload carries a move record")

	// A status that ended at 12:00, under the records of the migration
	// that started at 13:00, holds the slot until shop adopts them.
	ended := map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)}
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 100, Phase: canary.PhaseCompleted, HoldsSlot: true}, read(ended))
	// The records of its own migration agree with it.
	deps = []*appsv1.Deployment{recorded("a", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))}
	stamps.changed("shop")
	assert.False(t, read(ended).HoldsSlot)
	// A workload added is read too; so is the namespace left without one,
	// its stamp dropped.
	deps = append(deps, recorded("b", time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)))
	stamps.added("shop")
	assert.True(t, read(ended).HoldsSlot)
	deps = nil
	stamps.deleted("shop")
	stamps.deleted("shop")
	assert.Zero(t, stamps.of("shop"), "no workloads: no stamp")
	assert.False(t, read(ended).HoldsSlot)
	assert.Zero(t, m.size(), "an answer read at no stamp is not kept")

	// Caches that keep no stamps keep no answer read from workloads.
	lists = 0
	unstamped := func() (uint64, bool) { return 0, false }
	for range 2 {
		_, _ = m.of(peerNamespace("shop", "10", ended), mesh126.Resolve, workloads, unstamped)
	}
	assert.Equal(t, 2, lists)
	assert.Zero(t, m.size())
}

// The records a status is checked against are those of the revision its
// target resolves to now: a tag repointed since is read again.
func TestThePeerMemoReadsAPeerAgainWhenItsTagIsRepointed(t *testing.T) {
	var m peerMemo
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := &canary.Status{Phase: canary.PhaseCompleted, Target: "canary", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 1, StartedAt: &started, WaveStartedAt: &started, CompletedAt: &started}
	raw, err := st.Encode()
	require.NoError(t, err)
	later := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "shop", Annotations: map[string]string{
		canary.AnnotationMove: (&canary.MoveRecord{Revision: "1-27", From: "1-25", Wave: 1, At: later, Migration: canary.MigrationID("1-27", later)}).Encode()}}}
	workloads := func() ([]canary.Workload, error) { return asWorkloads(d), nil }
	ns := peerNamespace("shop", "10", map[string]string{canary.AnnotationTargetRevision: "canary", canary.AnnotationStatus: raw})
	p, _ := m.of(ns, mesh126.Resolve, workloads, stamped)
	assert.False(t, p.HoldsSlot, "canary is 1-26: the records of 1-27 are another migration's")
	repointed := canary.Mesh{Revisions: mesh126.Revisions, Tags: map[string]string{"canary": "1-27"}}
	p, _ = m.of(ns, repointed.Resolve, workloads, stamped)
	assert.True(t, p.HoldsSlot, "canary is 1-27 now: shop adopts the newer migration to it")
	p, _ = m.of(ns, nil, workloads, stamped)
	assert.False(t, p.HoldsSlot, "read without a resolver: the status's own revision, never an answer kept with one")
}

// A namespace whose workloads cannot be listed holds its slot, and the
// answer is not kept.
func TestThePeerMemoKeepsNoAnswerWhenTheWorkloadsCannotBeRead(t *testing.T) {
	var m peerMemo
	p, _ := m.of(peerNamespace("shop", "10", map[string]string{canary.AnnotationTargetRevision: "1-26"}), mesh126.Resolve,
		func() ([]canary.Workload, error) { return nil, errors.New("not synced") }, stamped)
	assert.True(t, p.HoldsSlot)
	assert.Zero(t, m.size())
}

func TestThePeerMemoForgetsDeletedNamespaces(t *testing.T) {
	var m peerMemo
	for _, name := range []string{"a", "b", "c"} {
		m.of(peerNamespace(name, "1", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)}), mesh126.Resolve, noWorkloads, stamped)
	}
	assert.Equal(t, 3, m.size())
	m.keepOnly(map[string]bool{"b": true})
	assert.Equal(t, 1, m.size())
}

// A status write that changes a namespace as a peer wakes the namespaces
// whose decision reads the peers: those waiting for a slot. One paused
// before its first wave waits for a person, one Blocked for its input or
// a precheck to be fixed, and one migrating or done decides the same
// whatever the others do; each of those wakes on its own changes. A
// wave's progress, which changes nothing the peers read, wakes no one but
// its own namespace.
func TestAStatusWriteWakesOnlyTheNamespacesWaitingForASlot(t *testing.T) {
	c, client, ctx := startTestController(t, nil, nil)
	status := func(phase canary.Phase, wave int) string {
		st := &canary.Status{Phase: phase, Target: "1-26", TargetRevision: "1-26", Wave: wave, SourceLabel: "1-25", SourceRevision: "1-25"}
		if wave > 0 {
			st.TotalWaves, st.WaveState = wave, canary.WaveVerifying
		}
		raw, err := st.Encode()
		require.NoError(t, err)
		return raw
	}
	blocked, err := (&canary.Status{Phase: canary.PhaseBlocked, BlockedKind: canary.BlockedPrecheck, BlockedPhase: canary.PhasePending,
		Reason: "no istiod of revision 1-26 is ready", Target: "1-26", TargetRevision: "1-26"}).Encode()
	require.NoError(t, err)
	for name, ann := range map[string]map[string]string{
		"waiting":       {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: status(canary.PhasePending, 0)},
		"new":           {canary.AnnotationTargetRevision: "1-26"},
		"paused-before": {canary.AnnotationTargetRevision: "1-26", canary.AnnotationPaused: "true", canary.AnnotationStatus: status(canary.PhasePaused, 0)},
		"migrating":     {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: status(canary.PhaseMigrating, 1)},
		"paused-after":  {canary.AnnotationTargetRevision: "1-26", canary.AnnotationPaused: "true", canary.AnnotationStatus: status(canary.PhasePaused, 1)},
		"done":          {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: status(canary.PhaseCompleted, 0)},
		"blocked":       {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: blocked},
		"not-opted-in":  nil,
	} {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { _, err := c.caches.Namespaces.Get("not-opted-in"); return err == nil }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Forget(key)
		c.queue.Done(key)
	}

	write := func(st string) []string {
		t.Helper()
		ns, err := client.CoreV1().Namespaces().Get(ctx, "migrating", metav1.GetOptions{})
		require.NoError(t, err)
		ns.Annotations[canary.AnnotationStatus] = st
		_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return c.queue.Len() > 0 }, 5*time.Second, 10*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		var woken []string
		for c.queue.Len() > 0 {
			key, _ := c.queue.Get()
			woken = append(woken, key)
			c.queue.Forget(key)
			c.queue.Done(key)
		}
		sort.Strings(woken)
		return woken
	}
	assert.Equal(t, []string{"migrating"}, write(status(canary.PhaseMigrating, 2)), "the next wave holds the same slot")
	// The slot freed: shop is opted in with no status (objects()).
	assert.Equal(t, []string{"migrating", "new", "shop", "waiting"}, write(status(canary.PhaseCompleted, 0)))
}

// The informers stamp a namespace on every change of its workloads, so the
// peer read from them follows the cache: a move record of a newer
// migration arriving under an ended status takes the slot, and the
// namespace left without workloads loses its stamp.
func TestAPeerFollowsItsWorkloadsInTheCache(t *testing.T) {
	a := recorded("a", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	shop := peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)})
	client := fake.NewClientset(shop, a)
	c := NewCaches(client, 0, nil)
	ctx := startCaches(t, c)
	peer := func() canary.Peer {
		ns, err := c.Namespaces.Get("shop")
		require.NoError(t, err)
		p, ok := c.peerOf(ns, mesh126.Resolve)
		require.True(t, ok)
		return p
	}
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 100, Phase: canary.PhaseCompleted}, peer())
	// The handlers hear of the initial adds after the cache holds them.
	require.Eventually(t, func() bool { return c.stamps.of("shop") != 0 }, 5*time.Second, time.Millisecond)

	// Updated until the cache shows it: a fake clientset drops what
	// happens before its watch starts.
	newer := recorded("a", time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC))
	require.Eventually(t, func() bool {
		_, err := client.AppsV1().Deployments("shop").Update(ctx, newer, metav1.UpdateOptions{})
		require.NoError(t, err)
		return peer().HoldsSlot
	}, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, client.AppsV1().Deployments("shop").Delete(ctx, "a", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { return !peer().HoldsSlot }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, c.stamps.of("shop"))
	assert.Zero(t, c.stamps.len())
}

// A workload's update stamps its namespace only when it changes what a
// peer's records are read from: its annotations, or a Deployment's pause.
// A rollout's status update, or a resync, reads no peer again.
func TestOnlyAnUpdateOfWhatRecordsAreReadFromStampsANamespace(t *testing.T) {
	d := recorded("a", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	status := d.DeepCopy()
	status.Status.ReadyReplicas, status.ResourceVersion = 3, "42"
	assert.False(t, stampsOnUpdate(d, d), "a resync")
	assert.False(t, stampsOnUpdate(d, status), "a rollout's status")
	annotated := d.DeepCopy()
	annotated.Annotations[canary.AnnotationSkip] = "true"
	assert.True(t, stampsOnUpdate(d, annotated))
	paused := d.DeepCopy()
	paused.Spec.Paused = true
	assert.True(t, stampsOnUpdate(d, paused))
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", Annotations: map[string]string{"a": "1"}}}
	moved := sts.DeepCopy()
	moved.Annotations[canary.AnnotationMove] = d.Annotations[canary.AnnotationMove]
	assert.False(t, stampsOnUpdate(sts, sts.DeepCopy()))
	assert.True(t, stampsOnUpdate(sts, moved))
}

// The tests below drive a NewCaches' informer stores and its stamp
// handlers by hand, in the order a shared informer does: the store holds a
// change first, and the handlers hear of it afterwards, on each listener's
// own goroutine (so after WaitForSync at start-up too: the initial adds
// are still being delivered). Reads of the peers run on the workers,
// concurrently with both.

// truth is the peer canary.PeerOf reads from shop's annotations and what
// the cache holds now, without any memo.
func truth(t *testing.T, c *Caches, annotations map[string]string) canary.Peer {
	t.Helper()
	p, ok := canary.PeerOf("shop", annotations, mesh126.Resolve, func() ([]canary.Workload, error) { return c.recordsOf("shop") })
	require.True(t, ok)
	return p
}

// mustRecords lists the workloads of shop the cache holds, as records.
func mustRecords(t *testing.T, c *Caches) []canary.Workload {
	ws, err := c.recordsOf("shop")
	require.NoError(t, err)
	return ws
}

// A hold that nothing explains would never lift. shop's status says its
// migration completed at 12:00. A Deployment whose move record names a
// newer migration (13:00) is created in shop (a manifest copied with its
// annotations, a restore) and deleted again before shop's own reconcile
// adopted it. An admission read shop between the store taking the
// Deployment and the stamp handler hearing of it: stamp 0, one
// conflicting record, HoldsSlot. The add is then stamped, the delete is
// stamped, and shop, left without workloads, has its stamp forgotten: 0
// again. The memo does not hand back the hold it kept at stamp 0: shop's
// own decision has nothing to adopt and writes nothing, no workload of shop
// changes any more, so nothing would read shop again, and every other
// namespace would wait for a slot shop does not hold.
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

// Never more namespaces migrating than concurrency allows. shop's status
// says its migration completed at 12:00; shop has a StatefulSet db, and a
// peer read keeps "holds no slot" at db's stamp. db is then replaced by a
// Deployment a carrying the record of a newer migration (13:00; a restore,
// an app moved from one kind to another). The Deployment informer has
// stored a but its handler has not run yet when the StatefulSet informer's
// handler for db's delete runs, leaving shop without a stamp. Dropping
// that stamp does not wipe one a's handler has just drawn: a kept answer
// at that stamp would come back while a contradicts the status, and web
// would be admitted beside shop, whose next reconcile adopts a's
// migration.
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
