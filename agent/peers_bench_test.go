package agent

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
)

// BenchmarkPeers measures one admission's reading of its peers: 400
// namespaces whose migrations to 1-26 completed, 10 Deployments each
// carrying the record of its move. Every one of them is checked against
// its records (an ended status): once, and then from the memo, while no
// workload changes.
func BenchmarkPeers(b *testing.B) {
	benchmarkPeers(b, true)
}

// BenchmarkPeersReadingEveryWorkload is the same without workload stamps:
// every ended peer's records read again on every admission.
func BenchmarkPeersReadingEveryWorkload(b *testing.B) {
	benchmarkPeers(b, false)
}

func benchmarkPeers(b *testing.B, stamped bool) {
	index := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	nsIdx, depIdx := index(), index()
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := &canary.Status{Phase: canary.PhaseCompleted, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 3, TotalWaves: 3, StartedAt: &started, WaveStartedAt: &started, CompletedAt: &started}
	raw, err := st.Encode()
	if err != nil {
		b.Fatal(err)
	}
	record := (&canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 2, At: started, Migration: canary.MigrationID("1-26", started)}).Encode()
	for n := 0; n < 400; n++ {
		ns := fmt.Sprintf("team-%03d", n)
		if err := nsIdx.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationStatus: raw}}}); err != nil {
			b.Fatal(err)
		}
		for d := 0; d < 10; d++ {
			if err := depIdx.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%02d", d), Namespace: ns,
				Annotations: map[string]string{canary.AnnotationMove: record}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	c := &Caches{
		Namespaces:   corelisters.NewNamespaceLister(nsIdx),
		Deployments:  appslisters.NewDeploymentLister(depIdx),
		StatefulSets: appslisters.NewStatefulSetLister(index()),
		DaemonSets:   appslisters.NewDaemonSetLister(index()),
	}
	if stamped {
		c.stamps = newWorkloadStamps()
		for n := 0; n < 400; n++ {
			c.stamps.added(fmt.Sprintf("team-%03d", n))
		}
	}
	mesh := canary.Mesh{Revisions: map[string]canary.Revision{"1-25": {Name: "1-25"}, "1-26": {Name: "1-26"}}}
	peers, err := c.peers("self", mesh.Resolve)
	if err != nil || len(peers) != 400 || peers[0].HoldsSlot {
		b.Fatalf("peers: %v, %d, %+v", err, len(peers), peers[0])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.peers("self", mesh.Resolve); err != nil {
			b.Fatal(err)
		}
	}
}
