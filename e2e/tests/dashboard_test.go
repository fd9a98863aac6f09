package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
	"github.com/meshwave/meshwave/e2e/world"
)

// agentProcess is the meshwave binary running `meshwave run` against the
// world, as one replica of the chart's Deployment: its own process, its
// /metrics on a loopback port, the client-go and workqueue metrics that
// only a process of its own exports (the in-process control plane claims
// them in the test binary).
type agentProcess struct {
	t      *testing.T
	args   []string
	env    []string
	addr   string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

func startAgentProcess(t *testing.T, f *fixture.Fixture, name, config string) *agentProcess {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	p := &agentProcess{
		t:    t,
		addr: addr,
		log:  filepath.Join(t.TempDir(), name+".log"),
		args: []string{"run", "--config=" + config, "--metrics-address=" + addr, "--kubeconfig=" + f.World.Cluster.Kubeconfig},
		env:  append(os.Environ(), "POD_NAME="+name),
	}
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			raw, _ := os.ReadFile(p.log)
			t.Logf("%s's log:\n%s", name, raw)
		}
	})
	return p
}

// start runs the process (again, as the kubelet restarts a container).
func (p *agentProcess) start() {
	p.t.Helper()
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(p.t, err)
	cmd := exec.Command(meshwaveCLI(p.t), p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(p.t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
}

// waitExit waits for the process to end by itself.
func (p *agentProcess) waitExit(timeout time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("the agent on %s did not exit within %s", p.addr, timeout)
	}
}

// stop ends the process with SIGTERM, as the kubelet does, then SIGKILL.
func (p *agentProcess) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// agentProcessConfig is the agent's configuration file for the world:
// testConfig's short waits and withMetrics' short windows, as YAML. The
// error check is sequential, with a floor as lenient as the threshold
// mode's 5%, so that its evidence reaches the dashboard beside the
// latency check's threshold.
func agentProcessConfig(t *testing.T, f *fixture.Fixture, concurrency int) string {
	t.Helper()
	token := filepath.Join(t.TempDir(), "istio-token")
	require.NoError(t, os.WriteFile(token, []byte(f.IstioCAToken("meshwave")), 0o600))
	raw := fmt.Sprintf(`concurrency: %d
readinessTimeout: 1m
delayBetweenWaves: 300ms
resyncPeriod: 0s
leaderElection:
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
gates:
  sync:
    tokenFile: %s
    port: %d
    interval: 1s
    timeout: 20s
  metrics:
    prometheus:
      url: %s
    window: 10s
    bakeTime: 10s
    interval: 2s
    requiredPasses: 2
    queryTimeout: 3s
    errorRate:
      mode: sequential
      sequential: {floor: 0.05, step: 1s, history: 30s, maxDuration: 1m}
`, concurrency, token, f.World.Mesh.Ports().GRPCTLS, f.World.Prometheus.URL)
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(raw), 0o644))
	return path
}

// panelTarget is one query of a dashboard panel.
type panelTarget struct {
	// Row is the title of the row the panel is in.
	Row     string
	Panel   string
	Expr    string
	Instant bool
}

// dashboardTargets lists every panel's queries, rows' nested panels
// included, in the dashboard's order.
func dashboardTargets(t *testing.T, raw string) []panelTarget {
	t.Helper()
	type panel struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr    string `json:"expr"`
			Instant bool   `json:"instant"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &d))
	var out []panelTarget
	row := ""
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			require.NoError(t, json.Unmarshal(r, &p))
			if p.Type == "row" {
				// An open row's panels follow it; a collapsed one's are
				// nested in it.
				row = p.Title
			}
			for _, tg := range p.Targets {
				out = append(out, panelTarget{Row: row, Panel: p.Title, Expr: tg.Expr, Instant: tg.Instant})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var grafanaVariable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)`)

// grafanaExpr substitutes Grafana's template variables in a query as
// Grafana does before it sends the query; a variable vars does not name
// is an error.
func grafanaExpr(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVariable.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown template variables %v in %s", missing, expr)
	}
	return out, nil
}

// seriesWithData counts the series that hold at least one number (NaN,
// which Grafana draws as nothing, is not one) and reports the largest.
func seriesWithData(v model.Value) (int, float64) {
	n, largest := 0, math.Inf(-1)
	count := func(values []float64) {
		has := false
		for _, x := range values {
			if math.IsNaN(x) {
				continue
			}
			has = true
			largest = math.Max(largest, x)
		}
		if has {
			n++
		}
	}
	switch v := v.(type) {
	case model.Matrix:
		for _, s := range v {
			var xs []float64
			for _, p := range s.Values {
				xs = append(xs, float64(p.Value))
			}
			count(xs)
		}
	case model.Vector:
		for _, s := range v {
			count([]float64{float64(s.Value)})
		}
	}
	return n, largest
}

// firingAlerts lists the firing alerts as "Name{label=value,...}" without
// severity, sorted.
func firingAlerts(t *testing.T, p *prom.Server) []string {
	t.Helper()
	alerts, err := p.Alerts(t.Context())
	require.NoError(t, err)
	var out []string
	for _, a := range alerts {
		if a.State != promv1.AlertStateFiring {
			continue
		}
		var ls []string
		for k, v := range a.Labels {
			if k != "alertname" && k != "severity" {
				ls = append(ls, fmt.Sprintf("%s=%s", k, v))
			}
		}
		sort.Strings(ls)
		out = append(out, fmt.Sprintf("%s{%s}", a.Labels["alertname"], strings.Join(ls, ",")))
	}
	sort.Strings(out)
	return out
}

// TestTheDashboardAndAlertsOnALiveAgent runs the agent's binary as the
// chart runs it, two replicas scraped by the world's Prometheus, through
// six namespaces, each its own outcome: one completes, one is rolled back
// for a bad revision, one pauses on a failed check (failure policy Pause),
// one is stuck in a wave whose pods never become ready, one is blocked by
// an invalid annotation, one waits for a maintenance window that opens
// hours later. Then every query of the chart's dashboard returns
// data and shows what happened, and the chart's alerts, loaded into the
// same Prometheus with short "for" durations, fire for what the agent
// did; last, the lease is taken from the agent (MeshwaveNotLeading) and
// the agent is stopped (MeshwaveAgentDown).
func TestTheDashboardAndAlertsOnALiveAgent(t *testing.T) {
	f := fixture.New(t, world.Options{})
	p := f.World.Prometheus
	const (
		done, bad, paused, stuck, blocked, later = "dash-done", "dash-bad", "dash-paused", "dash-stuck", "dash-blocked", "dash-later"
	)
	// A daily window that opens twelve hours from now.
	opens := time.Now().UTC().Add(12 * time.Hour)
	window := fmt.Sprintf(`{"schedule":"%d %d * * *","duration":"1h","timeZone":"UTC"}`, opens.Minute(), opens.Hour())
	rev := map[string]string{mesh.LabelRev: "1-25"}
	one := fixture.Replicas(1)
	f.Given().
		Namespace(done, rev, nil).Deployment(done, "front", one, waveAnnotation("0")).Deployment(done, "back", one, waveAnnotation("1")).
		Namespace(bad, rev, nil).Deployment(bad, "reviews", one, waveAnnotation("0")).Deployment(bad, "details", one, waveAnnotation("1")).
		Namespace(paused, rev, map[string]string{canary.AnnotationFailurePolicy: "Pause"}).
		Deployment(paused, "cart", one, waveAnnotation("0")).Deployment(paused, "pay", one, waveAnnotation("1")).
		Namespace(stuck, rev, nil).
		Deployment(stuck, "slow", one, fixture.Annotations(map[string]string{canary.AnnotationWave: "0", canary.AnnotationReadinessTimeout: "1h"})).
		Deployment(stuck, "later", one, waveAnnotation("1")).
		Namespace(blocked, rev, nil).Deployment(blocked, "api", one, waveAnnotation("abc")).
		Namespace(later, rev, map[string]string{canary.AnnotationMaintenanceWindow: window}).Deployment(later, "web", one)
	for _, ns := range []string{done, bad, paused, stuck, blocked, later} {
		f.WaitForNamespaceRolledOut(ns)
	}
	traffic := f.World.Mesh.Traffic()
	traffic.SetBehavior(mesh.WorkloadRef{Namespace: bad, Name: "reviews"}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
	traffic.SetBehavior(mesh.WorkloadRef{Namespace: paused, Name: "cart"}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
	release := holdNew(f, stuck, "slow")
	t.Cleanup(release)
	for _, ns := range []string{done, bad, paused} {
		waitForTraffic(t, f, ns, 2)
	}

	// The chart's alerts and dashboard, rendered with "for" durations a
	// test can wait for. waveStuckAfter is longer than a healthy wave
	// takes here (10 s of bake time and two runs 2 s apart).
	chart := filepath.Join(repoRoot(t), "charts", "meshwave")
	rendered := map[string]*unstructured.Unstructured{}
	for _, o := range decodeObjects(t, helm(t, "template", "meshwave", chart, "--namespace", "istio-system",
		"--set", "prometheusRule.enabled=true", "--set", "dashboard.enabled=true",
		"--set", "prometheusRule.alerts.pausedFor=5s", "--set", "prometheusRule.alerts.waveStuckAfter=40s",
		"--set", "prometheusRule.alerts.waveStuckFor=5s", "--set", "prometheusRule.alerts.blockedFor=5s",
		"--set", "prometheusRule.alerts.agentDownFor=5s", "--set", "prometheusRule.alerts.notLeadingFor=5s")) {
		rendered[o.GetKind()+"/"+o.GetName()] = o
	}
	require.Contains(t, rendered, "PrometheusRule/meshwave")
	require.Contains(t, rendered, "ConfigMap/meshwave-dashboard")
	spec, _, _ := unstructured.NestedMap(rendered["PrometheusRule/meshwave"].Object, "spec")
	rules, err := json.Marshal(spec)
	require.NoError(t, err)
	rulesFile := filepath.Join(t.TempDir(), "meshwave-rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, rules, 0o644))
	require.NoError(t, p.AddRuleFile(f.Ctx, rulesFile))
	dashboardJSON, _, _ := unstructured.NestedString(rendered["ConfigMap/meshwave-dashboard"].Object, "data", "meshwave.json")
	targets := dashboardTargets(t, dashboardJSON)
	require.NotEmpty(t, targets)

	// Two replicas of the agent, as the chart runs them, one job.
	begin := time.Now()
	config := agentProcessConfig(t, f, 5)
	replicas := []*agentProcess{startAgentProcess(t, f, "meshwave-0", config), startAgentProcess(t, f, "meshwave-1", config)}
	for _, r := range replicas {
		require.NoError(t, p.AddTarget(f.Ctx, prom.Target{Job: "meshwave", Addr: r.addr}))
	}
	require.NoError(t, p.WaitForQuery(f.Ctx, `up{job="meshwave"} == 1`, 2, time.Minute))
	require.NoError(t, p.WaitForQuery(f.Ctx, `meshwave_leader == 1`, 1, time.Minute))

	for _, ns := range []string{done, bad, paused, stuck, blocked, later} {
		optIn(f, ns, "1-26", 10)
	}
	waitForPhase(f, done, canary.PhaseCompleted, 3*time.Minute)
	st := waitForPhase(f, bad, canary.PhaseRolledBack, 3*time.Minute)
	require.Regexp(t, `^rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: reviews:`, st.Reason)
	st = waitForPhase(f, paused, canary.PhasePaused, 3*time.Minute)
	require.Regexp(t, `^wave 1 failed: error-rate fail: cart: .*; paused by failure policy Pause$`, st.Reason)
	st = waitForPhase(f, blocked, canary.PhaseBlocked, time.Minute)
	require.Equal(t, canary.BlockedInvalidInput, st.BlockedKind)
	st = waitForPhase(f, later, canary.PhasePending, time.Minute)
	f.EventuallyWithin("namespace "+later+" to wait for its window", time.Minute, func() (bool, string) {
		st = status(f, later)
		return st.NextWindow != nil, st.Reason
	})
	st = status(f, stuck)
	require.Equal(t, canary.PhaseMigrating, st.Phase, "the wave of %s waits for pods that never become ready: %s", stuck, st.Reason)
	require.Equal(t, 1, st.Wave)
	// Prometheus has scraped each namespace's last state from both replicas.
	for ns, phase := range map[string]canary.Phase{done: canary.PhaseCompleted, bad: canary.PhaseRolledBack, paused: canary.PhasePaused,
		stuck: canary.PhaseMigrating, blocked: canary.PhaseBlocked, later: canary.PhasePending} {
		require.NoError(t, p.WaitForQuery(f.Ctx, fmt.Sprintf(`meshwave_namespace_phase{namespace=%q,phase=%q} == 1`, ns, phase), 2, time.Minute))
	}

	t.Run("every panel returns data", func(t *testing.T) {
		end := time.Now()
		// The namespace variable lists the namespaces that opted in.
		names, _, _, err := p.API.LabelValues(f.Ctx, "namespace", []string{"meshwave_namespace_info"}, begin, end)
		require.NoError(t, err)
		assert.Equal(t, model.LabelValues{bad, blocked, done, later, paused, stuck}, names)
		// As Grafana sends them for "All" namespaces over the time since
		// the agents started, from a data source whose scrape interval is
		// the world's 1 s: $__interval is 1 s (the range over a panel's
		// width, at least the scrape interval) and $__rate_interval is
		// max($__interval + 1 s, 4 × 1 s) = 4 s.
		vars := map[string]string{"namespace": ".*", "__interval": "1s", "__rate_interval": "4s", "__range": model.Duration(end.Sub(begin).Round(time.Second)).String()}
		// Queries that may show only zeros here, and why. Every other
		// query must show a non-zero value at some point: each condition
		// a panel counts happened.
		quiet := map[string]string{
			`sum(rate(meshwave_reconcile_errors_total[$__rate_interval]))`: "a reconcile fails only on a write conflict or an API error, which this scenario does not force",
			`sum(meshwave_workqueue_depth)`:                                "a scrape finds the queue empty unless it lands while namespaces wait for a worker",
		}
		var empty, zero []string
		for _, tg := range targets {
			if tg.Row == "Fleet" {
				continue // a fleet's: TestAFleetMovesRingByRing reads them from its Prometheus
			}
			expr, err := grafanaExpr(tg.Expr, vars)
			require.NoError(t, err, tg.Panel)
			var v model.Value
			if tg.Instant {
				v, _, _, err = p.API.Query(f.Ctx, expr, end)
			} else {
				v, _, _, err = p.API.QueryRange(f.Ctx, expr, promv1.Range{Start: begin, End: end, Step: time.Second})
			}
			if err != nil {
				empty = append(empty, fmt.Sprintf("%q: %s: %v", tg.Panel, tg.Expr, err))
				continue
			}
			n, largest := seriesWithData(v)
			t.Logf("%-34s %d series, largest %g: %s", tg.Panel, n, largest, tg.Expr)
			// A fallback such as "or vector(0)" would hide a query that
			// matches nothing: the query before it must return data.
			if before, ok := strings.CutSuffix(expr, " or vector(0)"); ok {
				v, _, _, err := p.API.QueryRange(f.Ctx, before, promv1.Range{Start: begin, End: end, Step: time.Second})
				require.NoError(t, err)
				if n, _ = seriesWithData(v); n == 0 {
					empty = append(empty, fmt.Sprintf("%q: %s (without its fallback)", tg.Panel, tg.Expr))
					continue
				}
			}
			if n == 0 {
				empty = append(empty, fmt.Sprintf("%q: %s", tg.Panel, tg.Expr))
				continue
			}
			if _, ok := quiet[tg.Expr]; !ok && !(largest > 0) {
				zero = append(zero, fmt.Sprintf("%q: %s", tg.Panel, tg.Expr))
			}
		}
		assert.Empty(t, empty, "panels without data")
		assert.Empty(t, zero, "panels that never showed what happened")

		// What each summary shows now, once per namespace whatever the
		// number of replicas: Grafana's stat shows the last value.
		now := func(panel string, ns string) model.Vector {
			t.Helper()
			for _, tg := range targets {
				if tg.Panel != panel {
					continue
				}
				vars := map[string]string{"namespace": ns, "__interval": "1s", "__rate_interval": "4s"}
				expr, err := grafanaExpr(tg.Expr, vars)
				require.NoError(t, err)
				vec, err := p.Query(f.Ctx, expr)
				require.NoError(t, err, expr)
				return vec
			}
			t.Fatalf("no panel %q", panel)
			return nil
		}
		single := func(panel string) float64 {
			t.Helper()
			vec := now(panel, ".*")
			require.Len(t, vec, 1, panel)
			return float64(vec[0].Value)
		}
		assert.Equal(t, 1.0, single("Paused canaries"))
		assert.Equal(t, 1.0, single("Migrating now"), "the stuck namespace")
		assert.Equal(t, 1.0, single("Blocked by invalid input"))
		assert.InDelta(t, 1.0, single("Rollbacks (24h)"), 0.1, "one rollback, extrapolated to the window's edge")
		assert.Equal(t, 1.0, single("Leader"))

		phases := map[string]string{}
		for _, s := range now("Phase of each namespace", ".*") {
			phases[string(s.Metric["namespace"])] += string(s.Metric["phase"])
		}
		raw, err := p.Query(f.Ctx, `meshwave_namespace_phase == 1`)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{done: "Completed", bad: "RolledBack", paused: "Paused", stuck: "Migrating", blocked: "Blocked", later: "Pending"}, phases,
			"every replica's phases: %v", raw)
		open := map[string]float64{}
		for _, s := range now("Maintenance windows", ".*") {
			open[string(s.Metric["namespace"])] = float64(s.Value)
		}
		assert.Equal(t, map[string]float64{done: 1, bad: 1, paused: 1, stuck: 1, blocked: 1, later: 0}, open,
			"closed only for the namespace whose window opens hours later; open without windows")
		// The phase panel, for the paused namespace alone, shows Paused.
		vec := now("Phase of each namespace", paused)
		require.Len(t, vec, 1)
		assert.Equal(t, model.LabelValue("Paused"), vec[0].Metric["phase"])
		assert.Equal(t, 1.0, float64(vec[0].Value))

		table := now("Paused namespaces", ".*")
		require.Len(t, table, 1, "one row per paused namespace")
		assert.Equal(t, model.LabelValue(paused), table[0].Metric["namespace"])
		assert.Greater(t, float64(table[0].Value), 0.0, "seconds paused")

		table = now("Waiting for a maintenance window", ".*")
		require.Len(t, table, 1, "one row per namespace waiting for its window")
		assert.Equal(t, model.LabelValue(later), table[0].Metric["namespace"])
		assert.InDelta(t, float64(opens.Truncate(time.Minute).UnixMilli()), float64(table[0].Value), 60_000, "when it opens, in milliseconds for Grafana")

		want := map[string]float64{}
		for _, ns := range []string{done, bad, paused, stuck, blocked, later} {
			c := status(f, ns).Counts
			for state, v := range map[string]int{"pending": c.Pending, "moving": c.Moving, "moved": c.Moved, "failed": c.Failed, "skipped": c.Skipped, "rolled_back": c.RolledBack} {
				want[state] += float64(v)
			}
		}
		got := map[string]float64{}
		for _, s := range now("Workloads by state", ".*") {
			got[string(s.Metric["state"])] = float64(s.Value)
		}
		assert.Equal(t, want, got, "workloads by state, counted once")
	})

	t.Run("the alerts fire for what the agent did", func(t *testing.T) {
		want := []string{
			"MeshwaveCanaryPaused{namespace=" + paused + "}",
			"MeshwaveNamespaceBlocked{namespace=" + blocked + "}",
			"MeshwaveRollback{namespace=" + bad + ",scope=wave}",
			"MeshwaveWaveStuck{namespace=" + stuck + "}",
		}
		f.EventuallyWithin("the alerts to fire", 2*time.Minute, func() (bool, string) {
			got := firingAlerts(t, p)
			return strings.Join(got, " ") == strings.Join(want, " "), strings.Join(got, " ")
		})
	})

	t.Run("no replica leading fires MeshwaveNotLeading", func(t *testing.T) {
		// Someone else takes the lease: the leader steps down and exits,
		// the kubelet starts it again, and neither replica can lead.
		vec, err := p.Query(f.Ctx, `meshwave_leader{job="meshwave"} == 1`)
		require.NoError(t, err)
		require.Len(t, vec, 1, "one replica leads")
		var leader *agentProcess
		for _, r := range replicas {
			if string(vec[0].Metric["instance"]) == r.addr {
				leader = r
			}
		}
		require.NotNil(t, leader, "the leader is one of the replicas: %v", vec[0].Metric)
		leases := f.Client.CoordinationV1().Leases("istio-system")
		lease, err := leases.Get(f.Ctx, "meshwave", metav1.GetOptions{})
		require.NoError(t, err)
		lease.Spec.HolderIdentity = ptrTo("maintenance")
		lease.Spec.LeaseDurationSeconds = ptrTo[int32](3600)
		lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = leases.Update(f.Ctx, lease, metav1.UpdateOptions{})
		require.NoError(t, err)
		leader.waitExit(30 * time.Second)
		leader.start()
		require.NoError(t, p.WaitForQuery(f.Ctx, `sum(meshwave_leader) == 0 and count(up{job="meshwave"} == 1) == 2`, 1, time.Minute))
		f.EventuallyWithin("MeshwaveNotLeading to fire", time.Minute, func() (bool, string) {
			got := firingAlerts(t, p)
			for _, a := range got {
				if a == "MeshwaveNotLeading{}" {
					return true, ""
				}
			}
			return false, strings.Join(got, " ")
		})
	})

	t.Run("no agent scraped fires MeshwaveAgentDown", func(t *testing.T) {
		for _, r := range replicas {
			r.stop()
		}
		f.EventuallyWithin("MeshwaveAgentDown to fire", time.Minute, func() (bool, string) {
			got := firingAlerts(t, p)
			for _, a := range got {
				if a == "MeshwaveAgentDown{}" {
					return true, ""
				}
			}
			return false, strings.Join(got, " ")
		})
	})
}
