package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
	"github.com/meshwave/meshwave/e2e/world"
)

// The fleet demo: two clusters in two rings, staging then prod, each
// with its own control plane, istiods under one plugged-in CA and agent,
// reading each other through the Secrets create-remote-secret makes. The
// namespace shop targets auto in both; the default tag moves from 1-25 to
// 1-26 in each cluster, prod's first, and the fleet moves ring by ring:
// prod waits for staging to complete and soak.

// fleetSoak is staging's soak.
const fleetSoak = 15 * time.Second

// fleetNS is the namespace the fleet moves.
const fleetNS = "shop"

type demoCluster struct {
	name string
	w    *world.World
}

func runFleet(ctx context.Context, dir string, check bool, timeout time.Duration, out io.Writer, say func(string, ...any)) error {
	ca, err := mesh.NewPluggedCA("fleet")
	if err != nil {
		return err
	}
	say("starting two clusters, staging and prod, each with etcd, kube-apiserver, kube-controller-manager, a fake kubelet and istiod 1-25 and 1-26 under the fleet's CA")
	var clusters []demoCluster
	for _, name := range []string{"staging", "prod"} {
		w, err := world.Start(ctx, world.Options{Dir: filepath.Join(dir, name), NoPrometheus: true, CA: ca, Tags: map[string]string{"default": "1-25"}})
		if err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		defer w.Stop()
		clusters = append(clusters, demoCluster{name, w})
		say("cluster %s up in %s; kubeconfig %s", name, w.BootTime.Round(time.Millisecond), w.Cluster.Kubeconfig)
	}
	rings := []agent.RingConfig{
		{Name: "staging", Clusters: []string{"staging"}, Soak: agent.Duration(fleetSoak)},
		{Name: "prod", Clusters: []string{"prod"}},
	}

	// One Prometheus for the fleet: each cluster's proxies, their series
	// labelled with the cluster, and each agent.
	var targets []prom.Target
	for _, c := range clusters {
		targets = append(targets, prom.Target{Job: world.MeshJob, Addr: c.w.Mesh.Traffic().Addr(), Labels: map[string]string{"cluster": c.name}})
	}
	p, err := prom.Start(ctx, prom.Options{Targets: targets, Dir: filepath.Join(dir, "prometheus")})
	if err != nil {
		return err
	}
	defer p.Close()

	for _, from := range clusters {
		secret, err := agent.CreateRemoteSecret(ctx, from.w.Cluster.Client, from.w.Cluster.Config, agent.RemoteSecretOptions{
			Cluster: from.name, AccountNamespace: "istio-system", SecretNamespace: "istio-system", TokenExpiration: time.Hour})
		if err != nil {
			return err
		}
		for _, to := range clusters {
			if to.name != from.name {
				if _, err := to.w.Cluster.Client.CoreV1().Secrets("istio-system").Create(ctx, secret.DeepCopy(), metav1.CreateOptions{}); err != nil {
					return err
				}
			}
		}
	}
	say("each cluster reads the other through the Secret create-remote-secret made: an account that may only get, list and watch namespaces")

	for _, c := range clusters {
		if err := deployFleetSample(ctx, c.w); err != nil {
			return err
		}
	}
	if err := p.WaitForQuery(ctx, `sum by (cluster) (increase(istio_requests_total{reporter="destination"}[10s])) > 50`, len(clusters), 2*time.Minute); err != nil {
		return err
	}
	for _, c := range clusters {
		metricsAddr, shutdown, err := startAgent(ctx, c.w, filepath.Join(dir, c.name), func(cfg *agent.Config) {
			cfg.Fleet = agent.FleetConfig{Cluster: c.name, Rings: rings, Await: "namespace"}
			cfg.Gates.Metrics.Prometheus.URL, cfg.Gates.Metrics.Prometheus.ClusterLabel = p.URL, "cluster"
		})
		if err != nil {
			return err
		}
		defer shutdown()
		if err := p.AddTarget(ctx, prom.Target{Job: "meshwave", Addr: metricsAddr}); err != nil {
			return err
		}
	}
	say("an agent in each cluster: rings staging (soak %s), then prod; the metric checks read the fleet's Prometheus, each its own cluster's series", fleetSoak)

	for _, c := range []demoCluster{clusters[1], clusters[0]} {
		if err := optInTarget(ctx, c.w, fleetNS, canary.TargetAuto, 10); err != nil {
			return err
		}
	}
	say("opted in %s with the target auto in both clusters: it follows the default tag, on 1-25 today", fleetNS)
	for _, c := range clusters {
		if _, err := waitForFleetPhase(ctx, c.w, "1-25", canary.PhaseCompleted, time.Minute); err != nil {
			return fmt.Errorf("cluster %s: %w", c.name, err)
		}
	}
	for _, c := range []demoCluster{clusters[1], clusters[0]} {
		if err := c.w.Mesh.SetTag(ctx, "default", "1-26"); err != nil {
			return err
		}
		say("cluster %s: the default tag moved to 1-26 (istioctl tag set default --revision 1-26 --overwrite)", c.name)
	}

	final, err := followFleet(ctx, clusters, out, timeout)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nPrometheus of the fleet: %s  (try: meshwave_namespace_phase{namespace=%q} == 1, meshwave_fleet_peer_readable)\n", p.URL, fleetNS)
	for _, c := range clusters {
		fmt.Fprintf(out, "kubectl, %s: export KUBECONFIG=%s\n", c.name, c.w.Cluster.Kubeconfig)
	}
	return conclude(ctx, out, check, fleetExpected(ctx, clusters, final),
		fmt.Sprintf("staging moved to 1-26 first; prod waited for it to complete and soak %s, then moved", fleetSoak))
}

// deployFleetSample runs shop's three workloads on 1-25.
func deployFleetSample(ctx context.Context, w *world.World) error {
	c := w.Cluster.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS, Labels: map[string]string{mesh.LabelRev: "1-25"}}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	names := []string{"frontend", "cart", "checkout"}
	for i, name := range names {
		d := fixture.NewDeployment(fleetNS, name, fixture.Annotations(map[string]string{canary.AnnotationWave: fmt.Sprint(min(i, 1))}))
		if _, err := c.AppsV1().Deployments(fleetNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	w.Mesh.Traffic().Route(mesh.WorkloadRef{Namespace: fleetNS, Name: "frontend"}, mesh.WorkloadRef{Namespace: fleetNS, Name: "cart"})
	return waitAvailable(ctx, w, fleetNS, names)
}

// waitForFleetPhase waits until shop's status is of the move to rev, in
// phase.
func waitForFleetPhase(ctx context.Context, w *world.World, rev string, phase canary.Phase, timeout time.Duration) (*canary.Status, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := w.Cluster.Client.CoreV1().Namespaces().Get(ctx, fleetNS, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		st, _, err := canary.ParseStatus(n.Annotations)
		if err == nil && st != nil && st.TargetRevision == rev && st.Phase == phase {
			return st, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not reach %s on %s within %s", fleetNS, phase, rev, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// followFleet prints each cluster's shop as it changes until both have
// ended their move to 1-26.
func followFleet(ctx context.Context, clusters []demoCluster, out io.Writer, timeout time.Duration) (map[string]*canary.Status, error) {
	deadline := time.Now().Add(timeout)
	last := map[string]string{}
	for {
		final := map[string]*canary.Status{}
		ended := true
		for _, c := range clusters {
			rows, err := agent.StatusNow(ctx, c.w.Cluster.Client, time.Now())
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				if r.Namespace != fleetNS {
					continue
				}
				final[c.name] = r.Status
				line := fmt.Sprintf("%-8s %s", c.name, progressLine(r))
				if last[c.name] != line {
					fmt.Fprintf(out, "%s %s\n", time.Now().Format("15:04:05"), line)
					last[c.name] = line
				}
			}
			st := final[c.name]
			if st == nil || st.TargetRevision != "1-26" || (st.Phase != canary.PhaseCompleted && st.Phase != canary.PhaseRolledBack && st.Phase != canary.PhasePaused && st.Phase != canary.PhaseBlocked) {
				ended = false
			}
		}
		if ended {
			return final, nil
		}
		if time.Now().After(deadline) {
			return final, fmt.Errorf("the fleet's migrations did not end within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return final, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fleetExpected lists how the fleet's end differs from the intended one:
// both completed to 1-26, prod's first restart after staging's completion
// and soak.
func fleetExpected(ctx context.Context, clusters []demoCluster, final map[string]*canary.Status) []string {
	var problems []string
	for _, c := range clusters {
		if st := final[c.name]; st == nil || st.Phase != canary.PhaseCompleted || st.TargetRevision != "1-26" {
			problems = append(problems, fmt.Sprintf("%s/%s did not complete the move to 1-26: %+v", c.name, fleetNS, st))
		}
	}
	if len(problems) > 0 {
		return problems
	}
	staging := final["staging"]
	ds, err := clusters[1].w.Cluster.Client.AppsV1().Deployments(fleetNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	for _, d := range ds.Items {
		r, ok := canary.ReadMoveRecord(d.Annotations)
		switch {
		case !ok || r.Revision != "1-26":
			problems = append(problems, fmt.Sprintf("prod's %s carries no move to 1-26", d.Name))
		case r.At.Before(staging.CompletedAt.Add(fleetSoak)):
			problems = append(problems, fmt.Sprintf("prod's %s moved at %s, before staging completed (%s) and soaked %s", d.Name, r.At.Format(time.RFC3339), staging.CompletedAt.Format(time.RFC3339), fleetSoak))
		}
	}
	return problems
}
