package agent

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshwave/meshwave/canary"
)

func TestFleetStatusShowsEachClusterInRingOrderWithWhatItWaitsFor(t *testing.T) {
	done := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	started := done.Add(-10 * time.Minute)
	completed, err := (&canary.Status{Phase: canary.PhaseCompleted, Target: "1-26", TargetRevision: "1-26", SourceRevision: "1-25", Wave: 2, TotalWaves: 2,
		StartedAt: &started, Reason: "moved 2 workloads to 1-26 in 2 waves", CompletedAt: &done}).Encode()
	require.NoError(t, err)
	waiting, err := (&canary.Status{Phase: canary.PhasePending, Target: "1-26", TargetRevision: "1-26",
		Reason: "the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26, and must stay completed until 2026-12-02T11:42:00Z"}).Encode()
	require.NoError(t, err)
	ns := func(annotations map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: annotations}}
	}
	down := fake.NewClientset()
	down.PrependReactor("list", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.0.0.9:6443: connect: connection refused")
	})
	clients := map[string]kubernetes.Interface{
		"staging": fake.NewClientset(ns(map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: completed})),
		"prod-eu": fake.NewClientset(ns(map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: waiting})),
		"prod-us": down,
	}
	f := FleetConfig{Cluster: "staging", Rings: []RingConfig{
		{Name: "staging", Clusters: []string{"staging"}},
		{Name: "prod", Clusters: []string{"prod-eu", "prod-us", "prod-ap"}},
	}}
	got := FleetStatusNow(context.Background(), f, clients, done)
	require.Len(t, got, 4)
	assert.Equal(t, []string{"staging", "prod-eu", "prod-us", "prod-ap"}, []string{got[0].Cluster, got[1].Cluster, got[2].Cluster, got[3].Cluster})
	var out bytes.Buffer
	require.NoError(t, RenderFleetStatus(&out, got, "table"))
	assert.Equal(t, `RING     CLUSTER  NAMESPACE  TARGET  PHASE       WAVE  REASON
staging  staging  shop       1-26    Completed   2/2   moved 2 workloads to 1-26 in 2 waves
prod     prod-eu  shop       1-26    Pending     0/0   the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26, and must stay completed until 2026-12-02T11:42:00Z
prod     prod-us  -          -       Unreadable  -     dial tcp 10.0.0.9:6443: connect: connection refused
prod     prod-ap  -          -       Unreadable  -     no kubeconfig context of this name
`, out.String())
}
