package agent

import (
	"fmt"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionreglisters "k8s.io/client-go/listers/admissionregistration/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
)

// holdersBenchNamespaces is the size of the holders benchmarks' cluster:
// 2,000 namespaces of 10 Deployments of 5 pods (100,000 injected pods),
// or 400 (20,000) when MESHWAVE_BENCH_SMALL is set, as make bench-smoke
// sets it. Each namespace is opted in to 1-26 and half-way there: every
// other Deployment still runs 1-25, so every namespace is planned in full.
func holdersBenchNamespaces() int {
	if os.Getenv("MESHWAVE_BENCH_SMALL") != "" {
		return 400
	}
	return 2000
}

// BenchmarkHoldersScrape measures a scrape of meshwave_revision_holders
// when nothing changed since the one before: what every scrape of a
// quiet cluster costs.
func BenchmarkHoldersScrape(b *testing.B) {
	benchmarkScrape(b, func(*holderTally, int) {})
}

// BenchmarkHoldersScrapeAfterAPodChanged measures a scrape after a pod of
// one namespace changed: that namespace is classified again.
func BenchmarkHoldersScrapeAfterAPodChanged(b *testing.B) {
	benchmarkScrape(b, func(t *holderTally, i int) { t.mark(fmt.Sprintf("team-%03d", i%holdersBenchNamespaces())) })
}

// BenchmarkHoldersScrapeRecountingEverything measures a scrape that
// classifies every pod: the first after the caches sync, and any after a
// revision is installed, removed or repointed.
func BenchmarkHoldersScrapeRecountingEverything(b *testing.B) {
	benchmarkScrape(b, func(t *holderTally, _ int) { t.markAll() })
}

func benchmarkScrape(b *testing.B, change func(t *holderTally, i int)) {
	caches := largeCluster(b, holdersBenchNamespaces(), 10, 5, func(d int) bool { return d%2 == 0 })
	collector := NewHoldersCollector(caches, "istio-system", canary.Config{Sizes: canary.WaveSizes{CanarySize: 1, BatchSize: 5}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)
	gather := func() {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			b.Fatalf("gather: %v, %d families", err, len(mfs))
		}
	}
	gather()
	tally := collector.(*holdersCollector).tally
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		change(tally, i)
		gather()
	}
}

// largeCluster holds namespaces × deployments × pods injected pods, in
// caches built straight from indexers; Deployment d runs 1-25 when
// onSource(d), 1-26 otherwise.
func largeCluster(b *testing.B, namespaces, deployments, pods int, onSource func(d int) bool) *Caches {
	b.Helper()
	index := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	nsIdx, depIdx, rsIdx, podIdx, pdbIdx, mwcIdx, jobIdx := index(), index(), index(), index(), index(), index(), index()
	add := func(idx cache.Indexer, obj any) {
		if err := idx.Add(obj); err != nil {
			b.Fatal(err)
		}
	}
	for _, rev := range []string{"1-25", "1-26"} {
		add(mwcIdx, &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-" + rev, Labels: map[string]string{canary.LabelRev: rev}}})
	}
	for n := 0; n < namespaces; n++ {
		ns := fmt.Sprintf("team-%03d", n)
		add(nsIdx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26"}}})
		for d := 0; d < deployments; d++ {
			name := fmt.Sprintf("svc-%02d", d)
			rs := name + "-7f9c8d"
			rev := "1-26"
			if onSource(d) {
				rev = "1-25"
			}
			add(depIdx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{revisionAnno: "1"}},
				Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}}}})
			add(rsIdx, slimReplicaSet(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: rs, Namespace: ns, OwnerReferences: owned("apps/v1", "Deployment", name),
				Annotations: map[string]string{revisionAnno: "1"}}}))
			for p := 0; p < pods; p++ {
				pod := injectedPod(ns, fmt.Sprintf("%s-%05d", rs, p), rev, corev1.PodRunning, owned("apps/v1", "ReplicaSet", rs))
				pod.Labels["app"] = name
				add(podIdx, slimPod(pod, map[string]bool{canary.AnnotationSidecar: true}))
			}
		}
	}
	return &Caches{
		Namespaces:   corelisters.NewNamespaceLister(nsIdx),
		Deployments:  appslisters.NewDeploymentLister(depIdx),
		StatefulSets: appslisters.NewStatefulSetLister(index()),
		DaemonSets:   appslisters.NewDaemonSetLister(index()),
		Revisions:    NewRevisionLister(index()),
		ReplicaSets:  NewReplicaSetLister(rsIdx),
		Pods:         NewPodLister(podIdx),
		PDBs:         policylisters.NewPodDisruptionBudgetLister(pdbIdx),
		Webhooks:     admissionreglisters.NewMutatingWebhookConfigurationLister(mwcIdx),
		Jobs:         cache.NewGenericLister(jobIdx, jobsResource.GroupResource()),
	}
}
