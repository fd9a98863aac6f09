package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
