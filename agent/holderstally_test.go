package agent

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

// told reports whether every handler has been told of every object its
// informer held when it was added.
func (t *holderTally) told() bool {
	for _, h := range t.handlers {
		if !h.HasSynced() {
			return false
		}
	}
	return true
}

// fullCount counts every pod of the caches from scratch, as a scrape did
// before the counts were kept by namespace.
func fullCount(t *testing.T, c *Caches) map[holderKey]int {
	t.Helper()
	return fullCountAt(t, c, time.Now())
}

// fullCountAt is fullCount read at now.
func fullCountAt(t *testing.T, c *Caches, now time.Time) map[holderKey]int {
	t.Helper()
	pods, err := c.Pods.List(labels.Everything())
	require.NoError(t, err)
	all, _, err := c.holdersOf(pods, "istio-system", canary.Config{}, func(string) bool { return true }, now)
	require.NoError(t, err)
	out := map[holderKey]int{}
	for rev, h := range all {
		for code, n := range h.PodsByReason() {
			out[holderKey{rev, code}] += n
		}
	}
	require.NoError(t, c.countAmbient(pods, "istio-system", func(_, rev string) { out[holderKey{rev, canary.ReasonAmbient}]++ }))
	return out
}

// quietTally is a tally over aMixedCluster's caches once every mark its
// handlers were told of at start has been counted.
func quietTally(t *testing.T) (*holderTally, *Caches, kubernetes.Interface) {
	t.Helper()
	objs, jobs := aMixedCluster()
	client := fake.NewClientset(objs...)
	caches := NewCaches(client, 0, nil)
	caches.WatchJobs(metadataClient(jobs...), 0)
	startCaches(t, caches)
	tally := newHolderTally(caches, "istio-system", canary.Config{})
	tally.recounted = map[string]int{}
	tally.watch()
	require.Eventually(t, tally.told, 10*time.Second, 10*time.Millisecond)
	_, _, err := tally.counts()
	require.NoError(t, err)
	return tally, caches, client
}

// settled waits until the tally's counts are want and equal a count from
// scratch, and its revisions are revisions, and returns the namespaces it
// read to get there.
func settled(t *testing.T, tally *holderTally, caches *Caches, want map[holderKey]int, revisions ...string) []string {
	t.Helper()
	wantRevisions := map[string]bool{}
	for _, rev := range revisions {
		wantRevisions[rev] = true
	}
	before := maps.Clone(tally.recounted)
	require.Eventually(t, func() bool {
		got, revs, err := tally.counts()
		require.NoError(t, err)
		if !assert.ObjectsAreEqual(want, got) || !assert.ObjectsAreEqual(fullCount(t, caches), got) || !assert.ObjectsAreEqual(wantRevisions, revs) {
			return false
		}
		// The caches hold a change before their handlers mark it: the
		// counts can be right before the last mark arrives.
		time.Sleep(100 * time.Millisecond)
		return !pending(tally)
	}, 10*time.Second, 20*time.Millisecond)
	return readSince(tally, before)
}

// pending reports whether a mark waits for the next scrape.
func pending(tally *holderTally) bool {
	tally.marksMu.Lock()
	defer tally.marksMu.Unlock()
	return tally.all || len(tally.dirty) > 0
}

// readSince lists the namespaces the tally read since it had read before.
func readSince(tally *holderTally, before map[string]int) []string {
	var read []string
	for ns, n := range tally.recounted {
		if n > before[ns] {
			read = append(read, ns)
		}
	}
	slices.Sort(read)
	return read
}

func TestTheHoldersCountFollowsEachChangeAndRecountsOnlyItsNamespace(t *testing.T) {
	tally, caches, client := quietTally(t)
	ctx := context.Background()
	want := map[holderKey]int{
		{"1-25", canary.ReasonWillMove}: 4, {"1-25", canary.ReasonCronJob}: 1, {"1-25", canary.ReasonJob}: 1,
		{"1-25", canary.ReasonReplicaSet}: 1, {"1-25", canary.ReasonBarePod}: 1, {"1-25", canary.ReasonPodSucceeded}: 1,
		{"1-25", canary.ReasonPodFailed}: 1, {"1-26", canary.ReasonBarePod}: 1,
	}
	got, revisions, err := tally.counts()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, map[string]bool{"1-25": true, "1-26": true}, revisions)

	// A bare pod of batch moves to 1-26: batch alone is read again.
	debug, err := client.CoreV1().Pods("batch").Get(ctx, "debug", metav1.GetOptions{})
	require.NoError(t, err)
	debug.Annotations[canary.AnnotationSidecar] = `{"containers":["istio-proxy"],"revision":"1-26"}`
	_, err = client.CoreV1().Pods("batch").Update(ctx, debug, metav1.UpdateOptions{})
	require.NoError(t, err)
	delete(want, holderKey{"1-25", canary.ReasonBarePod})
	want[holderKey{"1-26", canary.ReasonBarePod}] = 2
	assert.Equal(t, []string{"batch"}, settled(t, tally, caches, want, "1-25", "1-26"), "one namespace changed, one is read")

	// shop opts out: its Deployment, StatefulSet and DaemonSet pods are
	// no longer moved.
	shop, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	delete(shop.Annotations, canary.AnnotationTargetRevision)
	_, err = client.CoreV1().Namespaces().Update(ctx, shop, metav1.UpdateOptions{})
	require.NoError(t, err)
	delete(want, holderKey{"1-25", canary.ReasonWillMove})
	want[holderKey{"1-25", canary.ReasonNotOptedIn}] = 4
	assert.Equal(t, []string{"shop"}, settled(t, tally, caches, want, "1-25", "1-26"))

	// The ReplicaSet behind cart's pods is deleted: they are bare pods now.
	require.NoError(t, client.AppsV1().ReplicaSets("shop").Delete(ctx, "cart-5d8f9", metav1.DeleteOptions{}))
	want[holderKey{"1-25", canary.ReasonNotOptedIn}] = 2
	want[holderKey{"1-25", canary.ReasonReplicaSet}] = 3
	assert.Equal(t, []string{"shop"}, settled(t, tally, caches, want, "1-25", "1-26"), "a ReplicaSet's change reads its namespace again")

	// A new revision is installed: every namespace is read again, and it
	// has its series, at 0.
	_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-1-27", Labels: map[string]string{canary.LabelRev: "1-27"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"batch", "shop"}, settled(t, tally, caches, want, "1-25", "1-26", "1-27"), "a webhook's change reads every namespace, and the new revision has its series")

	// Every pod of batch is deleted: batch counts for nothing.
	pods, err := client.CoreV1().Pods("batch").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		require.NoError(t, client.CoreV1().Pods("batch").Delete(ctx, p.Name, metav1.DeleteOptions{}))
	}
	want = map[holderKey]int{{"1-25", canary.ReasonNotOptedIn}: 2, {"1-25", canary.ReasonReplicaSet}: 2}
	assert.Equal(t, []string{"batch"}, settled(t, tally, caches, want, "1-25", "1-26", "1-27"), "installed revisions keep their series")
	assert.NotContains(t, tally.byNamespace, "batch")

	before := maps.Clone(tally.recounted)
	for range 3 {
		_, _, err = tally.counts()
		require.NoError(t, err)
	}
	assert.Empty(t, readSince(tally, before), "a scrape after no change reads no namespace")
}

func TestTheNamespacesWithMaintenanceWindowsAreRecountedWhenTheMinuteTurns(t *testing.T) {
	tally, _, client := quietTally(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Minute).Add(10 * time.Second)
	tally.now = func() time.Time { return now }
	shop, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	shop.Annotations[canary.AnnotationMaintenanceWindow] = `{"schedule":"0 2 * * *","duration":"2h","timeZone":"UTC"}`
	_, err = client.CoreV1().Namespaces().Update(ctx, shop, metav1.UpdateOptions{})
	require.NoError(t, err)
	turn := now.Truncate(time.Minute).Add(time.Minute)
	require.Eventually(t, func() bool {
		_, _, err := tally.counts()
		require.NoError(t, err)
		return tally.wake["shop"].Equal(turn)
	}, 10*time.Second, 20*time.Millisecond)

	before := maps.Clone(tally.recounted)
	now = now.Add(30 * time.Second)
	_, _, err = tally.counts()
	require.NoError(t, err)
	assert.Empty(t, readSince(tally, before), "within the minute, nothing is read")
	now = turn
	_, _, err = tally.counts()
	require.NoError(t, err)
	assert.Equal(t, []string{"shop"}, readSince(tally, before), "as the minute turns, shop alone is read")
	assert.Equal(t, map[string]time.Time{"shop": turn.Add(time.Minute)}, tally.wake, "and it is due again at the next minute")
}

func TestAResyncMarksNothing(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", ResourceVersion: "7"}}
	changed := pod.DeepCopy()
	changed.ResourceVersion = "8"
	assert.True(t, resynced(pod, pod.DeepCopy()))
	assert.False(t, resynced(pod, changed))
	assert.False(t, resynced(&corev1.Pod{}, &corev1.Pod{}), "objects without a version (fakes, tests) are changes")
}

func TestAMarkOfTheRootNamespaceOrOfAClusterObjectRecountsEverything(t *testing.T) {
	tally := newHolderTally(&Caches{}, "istio-system", canary.Config{})
	tally.take()
	for _, tc := range []struct {
		obj  any
		all  bool
		mark string
	}{
		{obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a"}}, mark: "shop"},
		{obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, mark: "shop"},
		{obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod-1"}}, all: true},
		{obj: &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, all: true},
		{obj: "not an object", all: true},
	} {
		tally.markObject(tc.obj, false)
		dirty, all := tally.take()
		assert.Equal(t, tc.all, all, "%T", tc.obj)
		if tc.mark != "" {
			assert.Equal(t, map[string]bool{tc.mark: true}, dirty, "%T", tc.obj)
		} else {
			assert.Empty(t, dirty)
		}
	}
}

// A namespace whose migration stopped and whose target is set again to the
// same revision is read as a retry made now, and a rollback on record
// dated after that instant (by a leader whose clock runs ahead, or by
// hand) is not history yet: the status adopted rolls back, and b, which it
// returned, is not planned. Once the clock passes the record's date, b
// will move. Nothing in the cluster changes, and shop has no maintenance
// window: the tally recounts it at the date its reading gave.
func TestTheHoldersCountFollowsTheClockWhereTheReadingDependsOnIt(t *testing.T) {
	now := time.Now().UTC()
	started := now.Truncate(time.Second).Add(-time.Hour)
	migration := canary.MigrationID("1-26", started)
	forward := canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: started.Add(time.Minute), Migration: migration}.Encode()
	ahead := now.Add(3 * time.Second)
	back := canary.MoveRecord{Revision: "1-25", From: "1-26", Wave: 1, At: ahead, Rollback: true, Migration: migration}.Encode()
	deployment := func(name, record string) []runtime.Object {
		d, rs := types.UID("d-"+name), types.UID("rs-"+name)
		return []runtime.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: d,
				Annotations: map[string]string{"deployment.kubernetes.io/revision": "1", canary.AnnotationMove: record}},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)}},
			&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name + "-rs", Namespace: "shop", UID: rs,
				Annotations:     map[string]string{"deployment.kubernetes.io/revision": "1"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: d, Controller: ptr.To(true)}}}},
			injectedPod("shop", name+"-rs-x", "1-25", corev1.PodRunning,
				[]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs", UID: rs, Controller: ptr.To(true)}}),
		}
	}
	objs := []runtime.Object{
		&admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-1-25", Labels: map[string]string{canary.LabelRev: "1-25"}}},
		&admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-1-26", Labels: map[string]string{canary.LabelRev: "1-26"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26",
				canary.AnnotationStatus: `{"phase":"Stopped","target":"1-26","targetRevision":"1-26","wave":0,"totalWaves":0,"counts":{}}`}}},
	}
	objs = append(objs, deployment("a", forward)...)
	objs = append(objs, deployment("b", back)...)
	caches := NewCaches(fake.NewClientset(objs...), 0, nil)
	startCaches(t, caches)
	tally := newHolderTally(caches, "istio-system", canary.Config{})
	tally.recounted = map[string]int{}
	clock := now
	tally.now = func() time.Time { return clock }
	tally.watch()
	require.Eventually(t, tally.told, 10*time.Second, 10*time.Millisecond)

	got, _, err := tally.counts()
	require.NoError(t, err)
	require.Equal(t, map[holderKey]int{{"1-25", canary.ReasonMoved}: 1, {"1-25", canary.ReasonNotPlanned}: 1}, got,
		"before the record's date: a moved, b returned by the rollback")
	assert.Equal(t, map[string]time.Time{"shop": ahead}, tally.wake)

	before := maps.Clone(tally.recounted)
	clock = ahead.Add(-time.Millisecond)
	_, _, err = tally.counts()
	require.NoError(t, err)
	assert.Empty(t, readSince(tally, before), "before the date, nothing is read")

	clock = ahead
	want := fullCountAt(t, caches, clock)
	require.Equal(t, map[holderKey]int{{"1-25", canary.ReasonMoved}: 1, {"1-25", canary.ReasonWillMove}: 1}, want,
		"from the date on, a count from scratch: b will move")
	got, _, err = tally.counts()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"shop"}, readSince(tally, before), "shop alone is read, at the date")
	assert.Empty(t, tally.wake, "and its reading no longer depends on the clock")
}

// The pods in ambient hold the revision of the ztunnel on their node:
// meshwave_revision_holders counts them under reason ambient, and follows
// a pod redirected, a ztunnel of another revision, and a namespace
// enrolled, each from its event.
func TestTheHoldersCountTheAmbientPodsThroughTheirNodesZtunnel(t *testing.T) {
	tally, caches, client := quietTally(t)
	ctx := context.Background()
	want, _, err := tally.counts()
	require.NoError(t, err)
	onNode := func(p *corev1.Pod, node string) *corev1.Pod {
		p.Spec.NodeName = node
		return p
	}
	zt := onNode(injectedPod("istio-system", "ztunnel-a", "", corev1.PodRunning, owned("apps/v1", "DaemonSet", "ztunnel")), "n1")
	zt.Labels["app"], zt.Annotations = "ztunnel", map[string]string{canary.LabelRev: "1-26"}
	_, err = client.CoreV1().Pods("istio-system").Create(ctx, zt, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "amb"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// Enrolled by the namespace (not yet), redirected; on the host's
	// network, never redirected.
	web := onNode(injectedPod("amb", "web-1", "", corev1.PodRunning, nil), "n1")
	web.Annotations = map[string]string{canary.AnnotationRedirection: canary.RedirectionEnabled}
	_, err = client.CoreV1().Pods("amb").Create(ctx, web, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.CoreV1().Pods("amb").Create(ctx, onNode(injectedPod("amb", "exporter", "", corev1.PodRunning, nil), "n1"), metav1.CreateOptions{})
	require.NoError(t, err)
	settled(t, tally, caches, want, "1-25", "1-26")

	ns, err := client.CoreV1().Namespaces().Get(ctx, "amb", metav1.GetOptions{})
	require.NoError(t, err)
	ns.Labels = map[string]string{canary.LabelDataplaneMode: canary.DataplaneAmbient}
	_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	want[holderKey{"1-26", canary.ReasonAmbient}] = 1
	assert.Equal(t, []string{"amb"}, settled(t, tally, caches, want, "1-25", "1-26"), "the namespace enrolled: its pod redirected holds 1-26's ztunnel")

	zt.Annotations[canary.LabelRev] = "1-27"
	_, err = client.CoreV1().Pods("istio-system").Update(ctx, zt, metav1.UpdateOptions{})
	require.NoError(t, err)
	delete(want, holderKey{"1-26", canary.ReasonAmbient})
	want[holderKey{"1-27", canary.ReasonAmbient}] = 1
	settled(t, tally, caches, want, "1-25", "1-26", "1-27")
}
