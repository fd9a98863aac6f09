package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/harness"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// BenchmarkAPICost migrates 200 workloads in 20 namespaces (4 in 2 when
// small) from 1-25 to 1-26 with meshwave, counting every request its
// client sends, then moves them back with a faithful replay of the
// runbook's loop, counted the same way, and records both side by side.
func BenchmarkAPICost(b *testing.B) {
	nss, per := 20, 10
	if small() {
		nss, per = 2, 2
	}
	for i := 0; i < b.N; i++ {
		f := fixture.New(b, world.Options{NoPrometheus: true})
		var names []string
		for n := 0; n < nss; n++ {
			ns := fmt.Sprintf("bench-%02d", n)
			names = append(names, ns)
			g := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
			for w := 0; w < per; w++ {
				g.Deployment(ns, fmt.Sprintf("svc-%02d", w), fixture.Replicas(1))
			}
		}
		for _, ns := range names {
			f.Given().RolledOut(ns)
		}

		cfg := harness.Config(f)
		cfg.Concurrency = nss
		counter := harness.NewCounter()
		harness.Start(f, cfg, counter, "bench", nil)
		// The informers list by watching (client-go's watch-list): once
		// every informer watches and the agent leads, the caches are
		// synced, and reads are counted from there.
		f.Eventually("the agent's caches to sync", func() (bool, string) {
			return counter.Sum("WATCH ") >= 6 && counter.Sum("PUT leases") > 0, strings.Join(counter.Lines(), "; ")
		})
		time.Sleep(time.Second)
		syncedReads := reads(counter)
		start := time.Now()
		for _, ns := range names {
			t := "1-26"
			f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &t)
		}
		waves := 0
		for _, ns := range names {
			st := waitCompleted(f, ns, 10*time.Minute)
			waves += st.Wave
		}
		elapsed := time.Since(start)
		moves := nss * per
		deployWrites := counter.Sum("PATCH deployments ")
		nsWrites := counter.Sum("PATCH namespaces ")
		readsAfter := reads(counter) - syncedReads
		leases := counter.Sum("GET leases") + counter.Sum("PUT leases")
		events := counter.Sum("POST events") + counter.Sum("PATCH events")

		rb := harness.NewCounter()
		rbStart := time.Now()
		runbook(b, f, rb, names, "1-25")
		rbElapsed := time.Since(rbStart)

		b.ReportMetric(float64(deployWrites)/float64(moves), "deploy-writes/move")
		b.ReportMetric(float64(nsWrites)/float64(waves), "ns-writes/wave")
		b.ReportMetric(float64(readsAfter), "reads-after-sync")
		record(b, fmt.Sprintf("apiserver requests: %d workloads in %d namespaces", moves, nss),
			"| | meshwave | runbook loop |",
			"|---|---|---|",
			fmt.Sprintf("| Deployment writes | %d (%.2f per move) | %d (%.2f per move) |", deployWrites, float64(deployWrites)/float64(moves), rb.Sum("PATCH deployments "), float64(rb.Sum("PATCH deployments "))/float64(moves)),
			fmt.Sprintf("| Namespace writes | %d for %d waves (%.2f per wave) | %d (label switches) |", nsWrites, waves, float64(nsWrites)/float64(waves), rb.Sum("PATCH namespaces ")),
			fmt.Sprintf("| LIST and GET after the caches synced (leases apart) | %d | %d |", readsAfter, reads(rb)),
			fmt.Sprintf("| WATCH requests | %d in all (the informers' own) | %d |", counter.Sum("WATCH "), rb.Sum("WATCH ")),
			fmt.Sprintf("| Lease requests (leader election) | %d | none |", leases),
			fmt.Sprintf("| Events written | %d | none |", events),
			fmt.Sprintf("| Wall time | %s | %s |", elapsed.Round(100*time.Millisecond), rbElapsed.Round(100*time.Millisecond)),
			"",
			"meshwave's gates: rollout, injection and xDS sync against the real istiod (no Prometheus here); concurrency "+fmt.Sprint(nss)+", canary 1, batches of 5. The runbook loop: per namespace the label switch and one LIST of Deployments, then per workload one LIST of its pods, one merge patch and `kubectl rollout status` (a LIST and a WATCH of that Deployment).")
	}
}

// reads counts the LIST and GET requests, leases apart.
func reads(c *harness.Counter) int {
	return c.Sum("LIST ") + c.Sum("GET ") - c.Sum("GET leases")
}

func waitCompleted(f *fixture.Fixture, ns string, timeout time.Duration) *canary.Status {
	f.T.Helper()
	var st *canary.Status
	f.EventuallyWithin("namespace "+ns+" to complete", timeout, func() (bool, string) {
		n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, _, err = canary.ParseStatus(n.Annotations)
		if err != nil || st == nil {
			return false, fmt.Sprint(err)
		}
		return st.Phase == canary.PhaseCompleted, string(st.Phase) + ": " + st.Reason
	})
	return st
}

// runbook replays the runbook's loop, namespace after namespace, with a
// client whose requests counter counts: switch the label, LIST the
// Deployments; then for each, LIST its pods (the jq that computes the
// persisted settings reads the first injected one), patch it, and wait
// for `kubectl rollout status`, which lists and watches the Deployment.
func runbook(b testing.TB, f *fixture.Fixture, counter *harness.Counter, namespaces []string, revision string) {
	b.Helper()
	rc := rest.CopyConfig(f.World.Cluster.Config)
	rc.Wrap(counter.Wrap)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(b, err)
	ctx := f.Ctx
	for _, ns := range namespaces {
		label := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, mesh.LabelRev, revision)
		_, err := client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(label), metav1.PatchOptions{})
		require.NoError(b, err)
		deps, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		require.NoError(b, err)
		for _, d := range deps.Items {
			sel := labels.Set(d.Spec.Selector.MatchLabels).String()
			_, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			require.NoError(b, err)
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, canary.AnnotationRestartedAt, time.Now().UTC().Format(time.RFC3339))
			_, err = client.AppsV1().Deployments(ns).Patch(ctx, d.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			require.NoError(b, err)
			require.NoError(b, rolloutStatus(ctx, client, ns, d.Name), "rollout status %s/%s", ns, d.Name)
		}
	}
}

// rolloutStatus waits as `kubectl rollout status deploy` does: a list and
// watch of the one Deployment until its new ReplicaSet is fully available.
func rolloutStatus(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.AppsV1().Deployments(ns).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.AppsV1().Deployments(ns).Watch(ctx, o)
		},
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.Deployment{}, nil, func(e watch.Event) (bool, error) {
		d, ok := e.Object.(*appsv1.Deployment)
		if !ok {
			return false, nil
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		return d.Generation <= s.ObservedGeneration && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want, nil
	})
	return err
}
