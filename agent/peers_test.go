package agent

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func TestThePeerMemoReadsANamespaceAgainWhenItChanges(t *testing.T) {
	var m peerMemo
	never := func() bool { t.Fatal("a namespace with a status needs no workloads"); return false }
	migrating := encodedStatus(t, canary.PhaseMigrating)
	ns := peerNamespace("shop", "10", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: migrating})
	p, ok := m.of(ns, never)
	assert.True(t, ok)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 100, Phase: canary.PhaseMigrating, HoldsSlot: true}, p)

	// The same annotations give the same answer, whatever the
	// resourceVersion and the other annotations.
	p, _ = m.of(peerNamespace("shop", "11", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: migrating, "team": "payments"}), never)
	assert.True(t, p.HoldsSlot)
	assert.Equal(t, 1, m.size())

	// Other annotations are read again.
	completed := encodedStatus(t, canary.PhaseCompleted)
	p, _ = m.of(peerNamespace("shop", "12", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed}), never)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 100, Phase: canary.PhaseCompleted}, p)
	p, _ = m.of(peerNamespace("shop", "13", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed, canary.AnnotationPriority: "5"}), never)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 5, Phase: canary.PhaseCompleted}, p)
	p, _ = m.of(peerNamespace("shop", "14", map[string]string{canary.AnnotationTargetRevision: "1-27", canary.AnnotationStatus: completed, canary.AnnotationPriority: "5"}), never)
	assert.Equal(t, canary.Peer{Name: "shop", Priority: 5, Phase: canary.PhasePending}, p, "a target changed after completion waits for a slot")
}

// A resourceVersion is not the contents it was read at: an etcd restored
// without a revision bump hands out resourceVersions again, and a replica
// that kept its caches meets a namespace at a resourceVersion it read
// other contents at (so does a fake clientset, which does not bump it).
func TestThePeerMemoReadsANamespaceAgainAtAResourceVersionItHasSeen(t *testing.T) {
	var m peerMemo
	never := func() bool { t.Fatal("a namespace with a status needs no workloads"); return false }
	completed := encodedStatus(t, canary.PhaseCompleted)
	p, _ := m.of(peerNamespace("shop", "150", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed}), never)
	assert.False(t, p.HoldsSlot)

	migrating := encodedStatus(t, canary.PhaseMigrating)
	p, _ = m.of(peerNamespace("shop", "150", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: migrating}), never)
	assert.True(t, p.HoldsSlot, "shop migrates at a resourceVersion it was once read Completed at")

	// Without a resourceVersion at all, as a test's objects may be.
	p, _ = m.of(peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed}), never)
	assert.False(t, p.HoldsSlot)
	p, _ = m.of(peerNamespace("shop", "", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: "{"}), never)
	assert.True(t, p.HoldsSlot, "an unreadable status holds a slot")
}

func TestThePeerMemoNeverKeepsAnAnswerReadFromWorkloads(t *testing.T) {
	var m peerMemo
	ns := peerNamespace("shop", "10", map[string]string{canary.AnnotationTargetRevision: "1-26"})
	moved := false
	asked := 0
	onRecord := func() bool { asked++; return moved }
	p, _ := m.of(ns, onRecord)
	assert.False(t, p.HoldsSlot)
	// A workload gains a move record; the namespace does not change.
	moved = true
	p, _ = m.of(ns, onRecord)
	assert.True(t, p.HoldsSlot, "a namespace without a status holds a slot once a workload carries a move record")
	assert.Equal(t, 2, asked)
	assert.Zero(t, m.size())
}

func TestThePeerMemoForgetsDeletedNamespaces(t *testing.T) {
	var m peerMemo
	for _, name := range []string{"a", "b", "c"} {
		m.of(peerNamespace(name, "1", map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: encodedStatus(t, canary.PhaseCompleted)}), nil)
	}
	assert.Equal(t, 3, m.size())
	m.keepOnly(map[string]bool{"b": true})
	assert.Equal(t, 1, m.size())
}

// A status write wakes the namespaces whose decision reads the peers:
// those waiting for a slot. One paused before its first wave waits for a
// person, not a slot, and one migrating or done decides the same whatever
// the others do; each of those wakes on its own changes.
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
	for name, ann := range map[string]map[string]string{
		"waiting":       {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: status(canary.PhasePending, 0)},
		"new":           {canary.AnnotationTargetRevision: "1-26"},
		"paused-before": {canary.AnnotationTargetRevision: "1-26", canary.AnnotationPaused: "true", canary.AnnotationStatus: status(canary.PhasePaused, 0)},
		"migrating":     {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: status(canary.PhaseMigrating, 1)},
		"paused-after":  {canary.AnnotationTargetRevision: "1-26", canary.AnnotationPaused: "true", canary.AnnotationStatus: status(canary.PhasePaused, 1)},
		"done":          {canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: status(canary.PhaseCompleted, 0)},
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

	ns, err := client.CoreV1().Namespaces().Get(ctx, "migrating", metav1.GetOptions{})
	require.NoError(t, err)
	ns.Annotations[canary.AnnotationStatus] = status(canary.PhaseMigrating, 2)
	_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.queue.Len() > 0 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	var woken []string
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		woken = append(woken, key)
		c.queue.Done(key)
	}
	sort.Strings(woken)
	// shop: opted in with no status (objects()).
	assert.Equal(t, []string{"migrating", "new", "shop", "waiting"}, woken)
}
