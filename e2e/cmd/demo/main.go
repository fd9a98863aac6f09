// Command demo shows meshwave's whole job on the local world: a real
// control plane, Istio's own istiod and injector for revisions 1-25 and
// 1-26 (the proxies and their traffic simulated), a sample application in
// four namespaces and a real Prometheus. The agent
// moves the namespaces to 1-26 in canary waves; one workload breaks on 1-26
// and is caught by the error-rate check and rolled back while the others
// complete. The fourth namespace moves from sidecars to ambient behind a
// waypoint that 1-26's istiod deploys, served by simulated ztunnels and
// istio-cni node agents: onto 1-26's sidecars first, then out of them.
//
// With --check it exits when the migrations end, non-zero unless the
// outcome is the expected one; otherwise it keeps the world up until
// Ctrl-C so it can be explored with kubectl and Prometheus.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/term"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
	"github.com/meshwave/meshwave/e2e/world"
)

// app is the sample application: per namespace, its workloads in wave
// order and the calls between them.
var app = []struct {
	ns        string
	priority  int
	workloads []string
	routes    [][2]string
}{
	{"shop", 10, []string{"frontend", "cart", "checkout"}, [][2]string{{"frontend", "cart"}, {"frontend", "checkout"}}},
	{"reviews", 20, []string{"reviews", "ratings", "details"}, [][2]string{{"reviews", "ratings"}}},
	{"media", 30, []string{"catalog", "stream"}, [][2]string{{"catalog", "stream"}}},
	{ambientNS, 40, []string{"api", "ledger"}, [][2]string{{"api", "ledger"}}},
}

// ambientNS moves from sidecars to ambient, behind the waypoint waypoint.
const ambientNS = "payments"

// broken is the workload that fails on 1-26.
var broken = mesh.WorkloadRef{Namespace: "reviews", Name: "reviews"}

// stagedErrorRatio is the share of 5xx reviews answers on 1-26.
const stagedErrorRatio = 0.3

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", filepath.Join(os.TempDir(), "meshwave-demo"), "where the world keeps its kubeconfig and data")
	check := flag.Bool("check", false, "exit when the migrations end; fail unless shop, media and payments (into ambient) completed and reviews rolled back")
	timeout := flag.Duration("timeout", 8*time.Minute, "give up on the migrations after this long")
	fleet := flag.Bool("fleet", false, "show a fleet instead: two clusters in two rings, staging then prod, moved by the default tag with the target auto")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := os.Stdout
	tty := term.IsTerminal(int(out.Fd()))
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(out, time.Now().Format("15:04:05")+" "+format+"\n", args...)
	}

	if *fleet {
		return runFleet(ctx, *dir, *check, *timeout, out, say)
	}
	say("starting the local world: etcd, kube-apiserver, kube-controller-manager, a fake kubelet, istiod 1-25 and 1-26 (ambient), Prometheus")
	w, err := world.Start(ctx, world.Options{Dir: *dir, Revisions: []mesh.Revision{
		{Name: "1-25"}, {Name: "1-26", Env: map[string]string{"PILOT_ENABLE_AMBIENT": "true"}},
	}})
	if err != nil {
		return err
	}
	defer w.Stop()
	say("world up in %s; kubeconfig %s", w.BootTime.Round(time.Millisecond), w.Cluster.Kubeconfig)
	cni, err := installAmbient(ctx, w)
	if err != nil {
		return err
	}
	defer cni.Stop()
	say("ambient data plane of 1-26 up: Istio's ztunnel and istio-cni charts on every node, the Gateway API CRDs")

	if err := deploySample(ctx, w); err != nil {
		return err
	}
	say("sample application running on 1-25; %s/%s is set to return 30%% 5xx on 1-26", broken.Namespace, broken.Name)
	say("waiting for Prometheus to have one rate window of traffic")
	if err := w.Prometheus.WaitForScrape(ctx, world.MeshJob, time.Minute); err != nil {
		return err
	}
	if err := w.Prometheus.WaitForQuery(ctx, `sum by (destination_workload) (increase(istio_requests_total{reporter="destination"}[10s])) > 50`, 10, 2*time.Minute); err != nil {
		return err
	}

	metricsAddr, shutdownAgent, err := startAgent(ctx, w, *dir, nil)
	if err != nil {
		return err
	}
	defer shutdownAgent()
	if err := w.Prometheus.AddTarget(ctx, prom.Target{Job: "meshwave", Addr: metricsAddr}); err != nil {
		return err
	}
	say("meshwave running; its metrics at http://%s/metrics, scraped by Prometheus", metricsAddr)
	for _, a := range app {
		if err := optIn(ctx, w, a.ns, a.priority); err != nil {
			return err
		}
	}
	say("opted in shop (priority 10), reviews (20), media (30) and payments (40, into ambient behind its waypoint) to revision 1-26")

	final, err := follow(ctx, w, out, tty, *timeout)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := agent.RenderStatus(out, final, "table"); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nPrometheus: %s  (try: meshwave_namespace_phase == 1, meshwave_analysis_value, meshwave_rollbacks_total)\n", w.Prometheus.URL)
	fmt.Fprintf(out, "kubectl:    export KUBECONFIG=%s\n", w.Cluster.Kubeconfig)

	return conclude(ctx, out, *check, expected(final),
		"shop and media completed; reviews was caught by the error-rate check and rolled back; payments runs in ambient behind its waypoint")
}

// conclude says whether the outcome is the expected one; with check it
// returns an error unless it is, else it keeps the world up until Ctrl-C.
func conclude(ctx context.Context, out io.Writer, check bool, problems []string, expectedOutcome string) error {
	if len(problems) > 0 {
		fmt.Fprintln(out, "\nunexpected outcome:\n  "+strings.Join(problems, "\n  "))
	} else {
		fmt.Fprintln(out, "\noutcome as expected: "+expectedOutcome)
	}
	if check {
		if len(problems) > 0 {
			return errors.New("the demo did not end as expected")
		}
		return nil
	}
	fmt.Fprintln(out, "\nthe world stays up; press Ctrl-C to stop")
	<-ctx.Done()
	fmt.Fprintln(out, "stopping...")
	return nil
}

// expected lists how the final state differs from the intended one.
func expected(rows []agent.NamespaceStatus) []string {
	want := map[string]canary.Phase{"shop": canary.PhaseCompleted, "media": canary.PhaseCompleted, "reviews": canary.PhaseRolledBack, ambientNS: canary.PhaseCompleted}
	var problems []string
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Namespace] = true
		if r.Status == nil || r.Status.Phase != want[r.Namespace] {
			phase := canary.Phase("none")
			if r.Status != nil {
				phase = r.Status.Phase
			}
			problems = append(problems, fmt.Sprintf("%s is %s, not %s", r.Namespace, phase, want[r.Namespace]))
			continue
		}
		if r.Namespace == ambientNS && (r.Status.Mode != canary.ModeAmbient || !r.Status.NamespaceEnrolled || r.Status.WaypointSet != "waypoint") {
			problems = append(problems, fmt.Sprintf("payments completed without moving into ambient behind its waypoint: mode %q, enrolled %v, waypoint %q", r.Status.Mode, r.Status.NamespaceEnrolled, r.Status.WaypointSet))
		}
		if r.Namespace == "reviews" && !strings.Contains(r.Status.Reason, "error-rate fail: reviews:") {
			problems = append(problems, "reviews was rolled back for another reason: "+r.Status.Reason)
		}
		if r.Namespace == "reviews" {
			if v, ok := measured(r.Status, "error-rate", "reviews"); !ok || math.Abs(v-stagedErrorRatio) > 0.02 {
				problems = append(problems, fmt.Sprintf("reviews' error rate read %.2f%%, not the %.0f%% staged on 1-26", v*100, stagedErrorRatio*100))
			}
		}
	}
	for ns := range want {
		if !seen[ns] {
			problems = append(problems, ns+" has no status")
		}
	}
	sort.Strings(problems)
	return problems
}

// measured is a check's last value for a workload.
func measured(st *canary.Status, check, workload string) (float64, bool) {
	for _, v := range st.Verdicts {
		for _, m := range v.Measurements {
			if v.Gate == check && m.Workload == workload {
				return m.Value, true
			}
		}
	}
	return 0, false
}

func deploySample(ctx context.Context, w *world.World) error {
	c := w.Cluster.Client
	for _, a := range app {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.ns, Labels: map[string]string{mesh.LabelRev: "1-25"}}}
		if a.ns == ambientNS {
			ns.Annotations = map[string]string{canary.AnnotationTargetMode: "ambient", canary.AnnotationWaypoint: "waypoint"}
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		for i, name := range a.workloads {
			d := fixture.NewDeployment(a.ns, name, fixture.Annotations(map[string]string{canary.AnnotationWave: fmt.Sprint(min(i, 1))}))
			if _, err := c.AppsV1().Deployments(a.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		for _, r := range a.routes {
			w.Mesh.Traffic().Route(mesh.WorkloadRef{Namespace: a.ns, Name: r[0]}, mesh.WorkloadRef{Namespace: a.ns, Name: r[1]})
		}
	}
	w.Mesh.Traffic().SetBehavior(broken, "1-26", mesh.Behavior{ErrorRatio: stagedErrorRatio, LatencyMs: 40})
	if err := waypoint(ctx, w, ambientNS); err != nil {
		return err
	}
	for _, a := range app {
		if err := waitAvailable(ctx, w, a.ns, a.workloads); err != nil {
			return err
		}
	}
	return nil
}

// waitAvailable waits up to a minute for the Deployments to be available.
func waitAvailable(ctx context.Context, w *world.World, ns string, names []string) error {
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			d, err := w.Cluster.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && d.Status.AvailableReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("deployment %s/%s did not become available", ns, name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// startAgent runs meshwave in this process against the world, with the
// xDS gate and the metric checks on, its metrics served on loopback.
func startAgent(ctx context.Context, w *world.World, dir string, adjust func(*agent.Config)) (string, func(), error) {
	c := w.Cluster.Client
	root := w.Mesh.RootNamespace()
	if _, err := c.CoreV1().ServiceAccounts(root).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "meshwave"}}, metav1.CreateOptions{}); err != nil {
		return "", nil, err
	}
	tr, err := c.CoreV1().ServiceAccounts(root).CreateToken(ctx, "meshwave", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{mesh.IstioCAAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	tokenFile := filepath.Join(dir, "istio-token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		return "", nil, err
	}
	cfg := agent.DefaultConfig()
	cfg.CanarySize, cfg.BatchSize = 1, 2
	cfg.DelayBetweenWaves = agent.Duration(2 * time.Second)
	cfg.ReadinessTimeout = agent.Duration(time.Minute)
	cfg.LeaderElection.LeaseDuration = agent.Duration(6 * time.Second)
	cfg.LeaderElection.RenewDeadline = agent.Duration(4 * time.Second)
	cfg.LeaderElection.RetryPeriod = agent.Duration(time.Second)
	cfg.Gates.Sync.TokenFile = tokenFile
	cfg.Gates.Sync.Port = w.Mesh.Ports().GRPCTLS
	cfg.Gates.Sync.Interval = agent.Duration(time.Second)
	m := &cfg.Gates.Metrics
	if w.Prometheus != nil { // a fleet's clusters share one, set by adjust
		m.Prometheus.URL = w.Prometheus.URL
	}
	// The window fits in the bake time: a longer one would reach back to
	// the old revision's traffic (reviews read 16-17% for its staged 30%).
	// 10s holds 200 requests, enough for a steady p99.
	m.Window, m.BakeTime, m.Interval = agent.Duration(10*time.Second), agent.Duration(10*time.Second), agent.Duration(3*time.Second)
	m.RequiredPasses = 2
	m.OutboundErrorRate.Enabled = false
	if adjust != nil {
		adjust(&cfg)
	}

	reg := prometheus.NewRegistry()
	agent.RegisterClientMetrics(reg)
	dyn, err := dynamic.NewForConfig(w.Cluster.Config)
	if err != nil {
		return "", nil, err
	}
	ctrl, err := agent.New(agent.Options{Client: c, Dynamic: dyn, RestConfig: w.Cluster.Config, Config: cfg, Registerer: reg, Identity: "demo"})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: ctrl.Handler(reg), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	logger := klog.NewKlogr()
	if os.Getenv("MESHWAVE_DEMO_LOG") == "" {
		logger = logr.Discard()
	}
	go func() { done <- ctrl.Run(klog.NewContext(actx, logger)) }()
	return l.Addr().String(), func() {
		cancel()
		<-done
		ctrl.Shutdown()
		_ = srv.Close()
	}, nil
}

func optIn(ctx context.Context, w *world.World, ns string, priority int) error {
	return optInTarget(ctx, w, ns, "1-26", priority)
}

// optInTarget annotates ns with its target and priority.
func optInTarget(ctx context.Context, w *world.World, ns, target string, priority int) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:"%d"}}}`, canary.AnnotationTargetRevision, target, canary.AnnotationPriority, priority)
	_, err := w.Cluster.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// follow shows progress until every namespace has ended, refreshing a
// table in place on a terminal and printing a line per change otherwise.
func follow(ctx context.Context, w *world.World, out io.Writer, tty bool, timeout time.Duration) ([]agent.NamespaceStatus, error) {
	deadline := time.Now().Add(timeout)
	last := map[string]string{}
	drawn := 0
	for {
		rows, err := agent.StatusNow(ctx, w.Cluster.Client, time.Now())
		if err != nil {
			return nil, err
		}
		if tty {
			var b strings.Builder
			_ = agent.RenderStatus(&b, rows, "table")
			text := strings.TrimRight(b.String(), "\n")
			if drawn > 0 {
				fmt.Fprintf(out, "\033[%dA\033[J", drawn)
			}
			fmt.Fprintln(out, text)
			drawn = strings.Count(text, "\n") + 1
		} else {
			for _, r := range rows {
				line := progressLine(r)
				if last[r.Namespace] != line {
					fmt.Fprintf(out, "%s %s\n", time.Now().Format("15:04:05"), line)
					last[r.Namespace] = line
				}
			}
		}
		if allEnded(rows) {
			return rows, nil
		}
		if time.Now().After(deadline) {
			return rows, fmt.Errorf("the migrations did not end within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return rows, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func progressLine(r agent.NamespaceStatus) string {
	st := r.Status
	if st == nil {
		return fmt.Sprintf("%-8s opted in, waiting", r.Namespace)
	}
	var moving []string
	for _, m := range st.Workloads {
		moving = append(moving, m.Name+"="+strings.ToLower(m.State))
	}
	mode := "sidecar"
	if st.Mode == canary.ModeAmbient {
		mode = "ambient"
	}
	line := fmt.Sprintf("%-8s %-11s %-7s wave %d/%d  moved %d/%d", r.Namespace, st.Phase, mode, st.Wave, st.TotalWaves, st.Counts.Moved, st.Counts.Total-st.Counts.Skipped)
	if len(moving) > 0 {
		line += "  [" + strings.Join(moving, " ") + "]"
	}
	if st.Reason != "" {
		line += "  " + st.Reason
	}
	return line
}

func allEnded(rows []agent.NamespaceStatus) bool {
	if len(rows) < len(app) {
		return false
	}
	for _, r := range rows {
		if r.Status == nil {
			return false
		}
		switch r.Status.Phase {
		case canary.PhaseCompleted, canary.PhaseRolledBack, canary.PhaseStopped, canary.PhasePaused, canary.PhaseBlocked:
		default:
			return false
		}
		if r.Namespace == ambientNS && r.Status.Phase == canary.PhaseCompleted && r.Status.Mode != canary.ModeAmbient {
			return false // the sidecar step is done; the move to ambient follows
		}
	}
	return true
}

// installAmbient installs 1-26's ambient data plane: the Gateway API CRDs,
// Istio's ztunnel and istio-cni charts, and the simulated node agents'
// redirection; it waits for a Ready ztunnel and node agent on every node.
func installAmbient(ctx context.Context, w *world.World) (*mesh.CNI, error) {
	if err := w.Mesh.InstallGatewayAPI(ctx); err != nil {
		return nil, err
	}
	cni, err := w.Mesh.StartCNI(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.Mesh.InstallZtunnel(ctx, "1-26"); err != nil {
		cni.Stop()
		return nil, err
	}
	if err := w.Mesh.InstallCNI(ctx); err != nil {
		cni.Stop()
		return nil, err
	}
	c, root := w.Cluster.Client, w.Mesh.RootNamespace()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			cni.Stop()
			return nil, err
		}
		ready := map[string]int{}
		for _, sel := range []string{"app=ztunnel", "k8s-app=istio-cni-node"} {
			pods, err := c.CoreV1().Pods(root).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				cni.Stop()
				return nil, err
			}
			for i := range pods.Items {
				if fixture.PodReady(&pods.Items[i]) {
					ready[sel]++
				}
			}
		}
		if ready["app=ztunnel"] == len(nodes.Items) && ready["k8s-app=istio-cni-node"] == len(nodes.Items) {
			return cni, nil
		}
		if time.Now().After(deadline) {
			cni.Stop()
			return nil, fmt.Errorf("ztunnel and istio-cni not Ready on every node: %v of %d", ready, len(nodes.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waypoint creates the Gateway of class istio-waypoint that 1-26's istiod
// deploys as the namespace's waypoint.
func waypoint(ctx context.Context, w *world.World, ns string) error {
	dyn, err := dynamic.NewForConfig(w.Cluster.Config)
	if err != nil {
		return err
	}
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "waypoint", "namespace": ns, "labels": map[string]any{mesh.LabelRev: "1-26"}},
		"spec": map[string]any{"gatewayClassName": "istio-waypoint",
			"listeners": []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}}},
	}}
	gateways := dyn.Resource(schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}).Namespace(ns)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := gateways.Create(ctx, gw, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create the waypoint's Gateway: %w", err)
		}
		time.Sleep(200 * time.Millisecond) // its CRD not established yet
	}
}
