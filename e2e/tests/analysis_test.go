package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// countingQuerier counts the PromQL queries the agent sends, grouped by the
// evaluation time of the run that sent them.
type countingQuerier struct {
	next promv1.API
	mu   sync.Mutex
	runs map[time.Time][]string
}

func (c *countingQuerier) Query(ctx context.Context, q string, ts time.Time, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	c.mu.Lock()
	c.runs[ts] = append(c.runs[ts], q)
	c.mu.Unlock()
	return c.next.Query(ctx, q, ts, opts...)
}

// QueryRange passes a range query on, counted under the end of its range.
func (c *countingQuerier) QueryRange(ctx context.Context, q string, r promv1.Range, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	c.mu.Lock()
	c.runs[r.End] = append(c.runs[r.End], q)
	c.mu.Unlock()
	return c.next.QueryRange(ctx, q, r, opts...)
}

// all returns every query sent.
func (c *countingQuerier) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, qs := range c.runs {
		out = append(out, qs...)
	}
	return out
}

// runCount is the number of analysis runs so far.
func (c *countingQuerier) runCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs)
}

// perRun returns how many queries each run sent, in time order.
func (c *countingQuerier) perRun() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ts []time.Time
	for t := range c.runs {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	out := make([]int, 0, len(ts))
	for _, t := range ts {
		out = append(out, len(c.runs[t]))
	}
	return out
}

// withMetrics turns on the metric checks against the world's Prometheus,
// with windows short enough for a test: 10s rates after a 10s bake (a
// window longer than the bake time would reach back to the old revision's
// traffic), a run every 2s, two passes in a row. Prometheus scrapes every
// second. 10s of 20 requests a second is 200 requests: the simulator
// exports whole bucket counts and its p99 sits on a bucket boundary, so
// with 100 (a 5s window) one request more or less in a bucket moved the
// p99 from 25ms to 40ms and failed a healthy canary's latency tolerance.
func withMetrics(t *testing.T, f *fixture.Fixture, cfg agent.Config) (agent.Config, *countingQuerier) {
	t.Helper()
	m := &cfg.Gates.Metrics
	m.Prometheus.URL = f.World.Prometheus.URL
	m.Window = agent.Duration(10 * time.Second)
	m.BakeTime = agent.Duration(10 * time.Second)
	m.Interval = agent.Duration(2 * time.Second)
	m.RequiredPasses = 2
	m.QueryTimeout = agent.Duration(3 * time.Second)
	api, err := promapi.NewClient(promapi.Config{Address: f.World.Prometheus.URL})
	require.NoError(t, err)
	return cfg, &countingQuerier{next: promv1.NewAPI(api), runs: map[time.Time][]string{}}
}

// startAnalyzedAgent runs an agent whose PromQL goes through q.
func startAnalyzedAgent(t *testing.T, f *fixture.Fixture, cfg agent.Config, q *countingQuerier, counter *apiCounter) *runningAgent {
	t.Helper()
	return startAgentWith(t, f, cfg, counter, "agent-1", agent.GateDeps{Prometheus: q})
}

// waitForTraffic waits until Prometheus has one rate window of requests
// for the namespace's workloads, so that baselines exist.
func waitForTraffic(t *testing.T, f *fixture.Fixture, ns string, workloads int) {
	t.Helper()
	p := f.World.Prometheus
	require.NoError(t, p.WaitForScrape(f.Ctx, world.MeshJob, time.Minute))
	q := fmt.Sprintf(`sum by (destination_workload) (increase(istio_requests_total{reporter="destination",destination_workload_namespace=%q}[10s])) > 50`, ns)
	require.NoError(t, p.WaitForQuery(f.Ctx, q, workloads, time.Minute))
}

func verdictOf(st *canary.Status, gate string) (canary.Verdict, bool) {
	for _, v := range st.Verdicts {
		if v.Gate == gate {
			return v, true
		}
	}
	return canary.Verdict{}, false
}

// TestAHealthyMigrationPassesEveryGate moves a namespace whose workloads
// behave on 1-26: rollout, injection, xDS sync and the three metric checks
// pass, and the status shows the measured numbers. Each run of the checks
// sends one query per check, whatever the size of the wave.
func TestAHealthyMigrationPassesEveryGate(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "bookinfo"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "productpage", waveAnnotation("0")).
		Deployment(ns, "reviews", waveAnnotation("1")).
		Deployment(ns, "ratings", waveAnnotation("1")).
		RolledOut(ns)
	tr := f.World.Mesh.Traffic()
	ref := func(n string) mesh.WorkloadRef { return mesh.WorkloadRef{Namespace: ns, Name: n} }
	tr.Route(ref("productpage"), ref("reviews"))
	tr.Route(ref("reviews"), ref("ratings"))
	tr.Route(ref("ratings"), ref("productpage"))
	waitForTraffic(t, f, ns, 3)

	cfg, q := withMetrics(t, f, testConfig(f))
	cfg.Gates.Metrics.OutboundErrorRate.Enabled = true
	cfg.CanarySize, cfg.BatchSize = 1, 2
	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	startAnalyzedAgent(t, f, cfg, q, counter)
	st := waitForPhase(f, ns, canary.PhaseCompleted, 3*time.Minute)

	assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", st.Reason)
	var gates []string
	for _, v := range st.Verdicts {
		gates = append(gates, v.Gate+"="+string(v.Result))
	}
	assert.Equal(t, []string{"rollout=Pass", "injection=Pass", "xds-sync=Pass", "error-rate=Pass", "latency-p99=Pass", "outbound-error-rate=Pass"}, gates)
	sync, _ := verdictOf(st, "xds-sync")
	assert.Equal(t, "4 of 4 proxies SYNCED with istiod 1-26", sync.Reason)
	er, _ := verdictOf(st, "error-rate")
	require.Len(t, er.Measurements, 2, "one measurement per workload of the last wave")
	for _, m := range er.Measurements {
		assert.Contains(t, []string{"reviews", "ratings"}, m.Workload)
		assert.Equal(t, 0.0, m.Value)
		assert.Equal(t, 0.05, *m.Threshold)
		require.NotNil(t, m.Baseline, "the baseline from before the restart is known")
		assert.Equal(t, 0.0, *m.Baseline)
	}
	lat, _ := verdictOf(st, "latency-p99")
	require.Len(t, lat.Measurements, 2, "one measurement per workload of the last wave")
	for _, m := range lat.Measurements {
		assert.Contains(t, []string{"reviews", "ratings"}, m.Workload)
		assert.Greater(t, m.Value, 0.0)
		assert.LessOrEqual(t, m.Value, 50.0, "the simulated p99 is 40ms")
		assert.Equal(t, 1000.0, *m.Threshold)
	}
	runs := q.perRun()
	t.Logf("PromQL queries per analysis run: %v", runs)
	require.GreaterOrEqual(t, len(runs), 4, "two passes in a row for each of two waves")
	for _, n := range runs {
		assert.Equal(t, 3, n, "one query per check per run, for waves of one and two workloads")
	}
	for _, n := range []string{"productpage", "reviews", "ratings"} {
		f.Then().PodsOnRevision(ns, n, "1-26")
	}
}

// TestABadRevisionIsCaughtAndRolledBack stages "reviews on 1-26 returns 30%
// 5xx". The canary fails the error-rate check, the wave rolls back: the
// label returns to 1-25, the pods are injected by 1-25 and connected to its
// istiod, and the namespace is RolledBack with the numbers in the reason.
func TestABadRevisionIsCaughtAndRolledBack(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "shop"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "reviews", waveAnnotation("0")).
		Deployment(ns, "details", waveAnnotation("1")).
		RolledOut(ns)
	f.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "reviews"}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
	waitForTraffic(t, f, ns, 2)
	cfg, q := withMetrics(t, f, testConfig(f))
	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	startAnalyzedAgent(t, f, cfg, q, counter)

	st := waitForPhase(f, ns, canary.PhaseRolledBack, 3*time.Minute)
	assert.Regexp(t, `^rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: reviews: \d+\.\d\d% > threshold 5\.00%$`, st.Reason)
	er, ok := verdictOf(st, "error-rate")
	require.True(t, ok)
	require.Len(t, er.Measurements, 1)
	t.Logf("reviews on 1-26, staged at 30%% 5xx, measured %.2f%%", er.Measurements[0].Value*100)
	assert.InDelta(t, 0.3, er.Measurements[0].Value, 0.02, "the window holds only the new revision's traffic, staged at 30%% 5xx")
	assert.Equal(t, canary.ResultFail, er.Measurements[0].Result)
	assert.Equal(t, 1, st.Counts.RolledBack)

	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1-25", n.Labels[mesh.LabelRev], "the label is back on the source")
	f.WaitForRolledOut(ns, "reviews")
	token := f.IstioCAToken("syncz-reader")
	f.Then().PodsOnRevision(ns, "reviews", "1-25").
		PodsOnRevision(ns, "details", "1-25").
		SynczLists("1-25", token, f.ProxyIDs(ns, "details", "reviews")).
		SynczLists("1-26", token, nil)
	rec, _ := moveRecord(f, ns, "reviews")
	assert.True(t, rec.Rollback)
	assert.Equal(t, 2, counter.get("PATCH deployments shop/reviews"), "moved once, rolled back once")
	assert.Zero(t, counter.get("PATCH deployments shop/details"), "the next wave never started")
	waitForEvent(f, "Namespace", "", ns, "RollingBack: rolling back wave 1 to 1-25: wave 1 failed: error-rate fail: reviews:")
	waitForEvent(f, "Namespace", "", ns, "RolledBack: rolled back 1 workloads to 1-25")

	// The CLI shows the same, as a table and as JSON.
	table := runCLI(t, f, "status")
	lines := strings.Split(table, "\n")
	assert.Equal(t, "NAMESPACE  TARGET  PHASE       WAVE  MOVED  FAILED  TOTAL  PAUSED  LAST VERDICTS", strings.TrimRight(lines[0], " "))
	assert.Regexp(t, `^shop       1-26    RolledBack  1/1   0      0       2      -       rollout pass, injection pass, xds-sync pass, error-rate fail 0\.\d+/0\.05$`, strings.TrimRight(lines[1], " "))
	assert.Contains(t, table, "shop: rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: reviews:")
	var rows []agent.NamespaceStatus
	require.NoError(t, json.Unmarshal([]byte(runCLI(t, f, "status", "-o", "json")), &rows))
	require.Len(t, rows, 1)
	assert.Equal(t, canary.PhaseRolledBack, rows[0].Status.Phase)
}

// TestADottedDeploymentNameIsMeasured moves a Deployment named api.v1,
// staged to answer 30% 5xx on 1-26. Its name is a regex escape inside a
// PromQL string (api\\.v1); written as api\.v1, Prometheus refused the
// query and the check could only ever be inconclusive. Here the real
// Prometheus measures it and the canary is rolled back for its numbers.
func TestADottedDeploymentNameIsMeasured(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "dotted"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "api.v1", waveAnnotation("0")).
		Deployment(ns, "web", waveAnnotation("1")).
		RolledOut(ns)
	f.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "api.v1"}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
	waitForTraffic(t, f, ns, 2)
	cfg, q := withMetrics(t, f, testConfig(f))
	optIn(f, ns, "1-26", 10)
	startAnalyzedAgent(t, f, cfg, q, newAPICounter())

	st := waitForPhase(f, ns, canary.PhaseRolledBack, 3*time.Minute)
	assert.Regexp(t, `^rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: api\.v1: \d+\.\d\d% > threshold 5\.00%$`, st.Reason)
	er, ok := verdictOf(st, "error-rate")
	require.True(t, ok)
	require.Len(t, er.Measurements, 1)
	assert.Equal(t, "api.v1", er.Measurements[0].Workload)
	t.Logf("api.v1 on 1-26, staged at 30%% 5xx, measured %.2f%%", er.Measurements[0].Value*100)
	assert.InDelta(t, 0.3, er.Measurements[0].Value, 0.02)
	for _, run := range q.runs {
		for _, query := range run {
			assert.Contains(t, query, `_workload=~"api\\.v1"`)
		}
	}
}

// TestProxiesOutOfSyncFailTheSyncGate makes the new proxies of five
// namespaces misbehave at the xDS protocol level, each its own way, and lets
// Istio's istiod report it: one stops ACKing RDS (STALE), one NACKs it
// (ERROR, never SYNCED), one never subscribes to LDS (istiod leaves the
// type out), one drops its stream, and one, injected by 1-26, is pointed at
// 1-25's istiod by its proxy.istio.io/config. The xDS gate fails each after
// its timeout with istiod's word for it, the pod and the replica; each
// namespace's own failure policy applies: Pause, or for the NACK the
// default RollbackWave, which returns the pods to 1-25 where their
// proxies are in sync.
func TestProxiesOutOfSyncFailTheSyncGate(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	istiod := f.World.Mesh.Istiod("1-26")
	app := fixture.PodSelector(map[string]string{"app": "reviews"})
	pause := map[string]string{canary.AnnotationFailurePolicy: "Pause"}
	cases := []struct {
		ns          string
		annotations map[string]string
		stage       func(ns string)
		problem     string
		opts        []fixture.DeploymentOption
	}{
		{"stale", pause, func(ns string) { istiod.SetProxyStatus(ns, app, mesh.TypeRDS, statusv3.ConfigStatus_STALE) }, "STALE on RDS", nil},
		{"nolds", pause, func(ns string) { istiod.SetProxyStatus(ns, app, mesh.TypeLDS, statusv3.ConfigStatus_NOT_SENT) }, "not subscribed to LDS", nil},
		{"gone", pause, func(ns string) { istiod.Disconnect(ns, app) }, "is not connected to istiod 1-26", nil},
		{"astray", pause, func(string) {}, "is connected to istiod 1-25, not 1-26",
			[]fixture.DeploymentOption{fixture.TemplateAnnotations(map[string]string{"proxy.istio.io/config": "discoveryAddress: istiod-1-25.istio-system.svc:15012"})}},
		{"nack", nil, func(ns string) { istiod.SetProxyStatus(ns, app, mesh.TypeRDS, statusv3.ConfigStatus_ERROR) },
			`ERROR (NACK) on RDS ("simulated NACK: the proxy rejected this configuration")`, nil},
	}
	for _, c := range cases {
		f.Given().Namespace(c.ns, map[string]string{mesh.LabelRev: "1-25"}, c.annotations).Deployment(c.ns, "reviews", append(c.opts, fixture.Replicas(1))...)
		c.stage(c.ns)
	}
	for _, c := range cases {
		f.WaitForNamespaceRolledOut(c.ns)
	}
	cfg := testConfig(f)
	cfg.Gates.Sync.Timeout = agent.Duration(4 * time.Second)
	cfg.Concurrency = len(cases)
	for _, c := range cases {
		optIn(f, c.ns, "1-26", 10)
	}
	startAgent(t, f, cfg, newAPICounter(), "agent-1")
	replicas := f.IstiodPods("1-26")
	require.Len(t, replicas, 1)

	for _, c := range cases {
		t.Run(c.ns, func(t *testing.T) {
			if c.ns == "nack" {
				st := waitForPhase(f, c.ns, canary.PhaseRolledBack, time.Minute)
				assert.Regexp(t, "^"+regexp.QuoteMeta("rolled back 1 workloads to 1-25: wave 1 failed: xds-sync fail: 0 of 1 proxies SYNCED with istiod 1-26; ")+
					`reviews-[a-z0-9]+-[a-z0-9]+\.nack `+regexp.QuoteMeta(c.problem+" with "+replicas[0]+" after 4s")+"$", st.Reason)
				f.WaitForRolledOut(c.ns, "reviews")
				// istiod 1-25 holds this namespace's proxy again, and the
				// astray one; the others are paused on 1-26.
				want := append(f.ProxyIDs(c.ns, "reviews"), f.ProxyIDs("astray", "reviews")...)
				sort.Strings(want)
				f.Then().PodsOnRevision(c.ns, "reviews", "1-25").SynczLists("1-25", f.IstioCAToken("syncz-reader"), want)
				return
			}
			st := waitForPhase(f, c.ns, canary.PhasePaused, time.Minute)
			pods, _, err := f.DeploymentPods(c.ns, "reviews")
			require.NoError(t, err)
			require.Len(t, pods, 1)
			id := pods[0].Name + "." + c.ns
			line := id + " " + c.problem + " with " + replicas[0]
			if strings.HasPrefix(c.problem, "is ") {
				line = id + " " + c.problem // a proxy that is not on 1-26 has no replica there
			}
			assert.Equal(t, "wave 1 failed: xds-sync fail: 0 of 1 proxies SYNCED with istiod 1-26; "+line+" after 4s; paused by failure policy Pause", st.Reason)
			require.Len(t, st.Workloads, 1)
			assert.Equal(t, canary.StateFailed, st.Workloads[0].State)
			waitForEvent(f, "Deployment", c.ns, "reviews", "WorkloadFailed: wave 1, xds-sync: "+line)
		})
	}
}

// TestPrometheusStoppedMidAnalysisPausesThenResumes stops Prometheus while
// the canary is being analysed: the checks turn inconclusive, the
// namespace pauses without advancing, and once Prometheus is back and the
// pause is lifted by hand, the migration completes.
func TestPrometheusStoppedMidAnalysisPausesThenResumes(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "promdown"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "a").Deployment(ns, "b").
		RolledOut(ns)
	waitForTraffic(t, f, ns, 2)
	cfg, q := withMetrics(t, f, testConfig(f))
	cfg.Gates.Metrics.RequiredPasses = 4
	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	startAnalyzedAgent(t, f, cfg, q, counter)

	// The checks' progress is not written to the namespace: the queries
	// say when the analysis is under way.
	f.EventuallyWithin("the canary's checks to run once", 2*time.Minute, func() (bool, string) {
		runs := q.runCount()
		return runs >= 1, fmt.Sprintf("%d analysis runs", runs)
	})
	f.World.Prometheus.Stop()

	st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	assert.Regexp(t, `^wave 1 paused: error-rate inconclusive 3 times: Prometheus did not answer: .*connection refused$`, st.Reason)
	assert.Equal(t, 1, st.Wave)
	assert.Zero(t, counter.get("PATCH deployments "+ns+"/b"), "an inconclusive wave never advances")
	er, _ := verdictOf(st, "error-rate")
	assert.Equal(t, canary.ResultInconclusive, er.Result)

	require.NoError(t, f.World.Prometheus.Restart(f.Ctx))
	waitForTraffic(t, f, ns, 2)
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
	st = waitForPhase(f, ns, canary.PhaseCompleted, 3*time.Minute)
	assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", st.Reason)
	assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/a"), "resuming does not restart the canary again")
}

// TestLowTrafficIsInconclusiveNeverPass gives the canary too few requests to
// judge: its checks stay inconclusive and the namespace pauses, with the
// count and the minimum in the reason.
func TestLowTrafficIsInconclusiveNeverPass(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "quiet"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "idle", waveAnnotation("0")).Deployment(ns, "busy", waveAnnotation("1")).
		RolledOut(ns)
	waitForTraffic(t, f, ns, 2)
	f.World.Mesh.Traffic().SetRate(mesh.WorkloadRef{Namespace: ns, Name: "idle"}, 0.5)
	cfg, q := withMetrics(t, f, testConfig(f))
	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	startAnalyzedAgent(t, f, cfg, q, counter)

	st := waitForPhase(f, ns, canary.PhasePaused, 2*time.Minute)
	assert.Regexp(t, `^wave 1 paused: error-rate inconclusive 3 times: idle: \d+ requests < minimum 50$`, st.Reason)
	assert.NotContains(t, strings.Join(eventsFor(f, "Namespace", "", ns), "\n"), "WavePassed", "low traffic never passes")
	assert.Zero(t, counter.get("PATCH deployments "+ns+"/busy"))
}

// TestInjectionByTheWrongRevisionFails targets a revision tag whose
// webhooks were left calling the old revision's injector: the new pods come
// up injected by 1-25, and the injection gate fails naming each pod.
func TestInjectionByTheWrongRevisionFails(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	require.NoError(t, f.World.Mesh.MisrouteTag(f.Ctx, "stable", "1-26", "1-25"))
	const ns = "tagged"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, map[string]string{canary.AnnotationFailurePolicy: "Pause"}).
		Deployment(ns, "web", fixture.Replicas(1)).
		RolledOut(ns)
	optIn(f, ns, "stable", 10)
	startAgent(t, f, testConfig(f), newAPICounter(), "agent-1")

	st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	assert.Equal(t, "stable", st.Target)
	assert.Equal(t, "1-26", st.TargetRevision, "the tag resolves through istio-revision-tag-stable")
	pods, _, err := f.DeploymentPods(ns, "web")
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, fmt.Sprintf("wave 1 failed: injection fail: pod %s was injected by 1-25, not 1-26; paused by failure policy Pause", pods[0].Name), st.Reason)
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "stable", n.Labels[mesh.LabelRev], "the namespace points at the tag, not a revision")
}

// TestContinueGoesOnPastAFailureAndStopsAtTheLimit breaks two of five
// workloads on 1-26 under the Continue policy with maxFailedPercent 25: the
// first failure (20%) is tolerated and the migration goes on; the second
// (40%) stops it.
func TestContinueGoesOnPastAFailureAndStopsAtTheLimit(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "fleet"
	given := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
	for i, n := range []string{"a", "b", "c", "d", "e"} {
		given.Deployment(ns, n, waveAnnotation(fmt.Sprint(i)), fixture.Replicas(1))
	}
	given.RolledOut(ns)
	for _, n := range []string{"b", "d"} {
		f.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: n}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
	}
	waitForTraffic(t, f, ns, 5)
	cfg, q := withMetrics(t, f, testConfig(f))
	cfg.FailurePolicy, cfg.MaxFailedPercent = "Continue", 25
	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	startAnalyzedAgent(t, f, cfg, q, counter)

	st := waitForPhase(f, ns, canary.PhasePaused, 4*time.Minute)
	assert.Regexp(t, `^wave 4 failed: error-rate fail: d: \d+\.\d\d% > threshold 5\.00%; 2 of 5 workloads failed \(40%\), over maxFailedPercent 25$`, st.Reason)
	waitForEvent(f, "Namespace", "", ns, "FailureTolerated: wave 2 failed: error-rate fail: b:")
	assert.Equal(t, canary.Counts{Total: 5, Pending: 1, Moved: 2, Failed: 2}, st.Counts)
	var failed []string
	for _, fl := range st.Failures {
		failed = append(failed, fl.Workload)
	}
	assert.Equal(t, []string{"b", "d"}, failed)
	assert.Zero(t, counter.get("PATCH deployments "+ns+"/e"), "nothing moves past the limit")
	// A tolerated failure stays where it is: b restarted once; the second
	// patch only wrote on its record that it failed wave 2.
	assert.Equal(t, 2, counter.get("PATCH deployments "+ns+"/b"))
	b, ok := moveRecord(f, ns, "b")
	require.True(t, ok)
	assert.Equal(t, canary.OutcomeFailed, b.Outcome)
	assert.Equal(t, 2, b.Wave)
	dep, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, "b", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, b.At.UTC().Truncate(time.Second).Format(time.RFC3339), dep.Spec.Template.Annotations[canary.AnnotationRestartedAt], "the template was restarted once, by the move")
	f.Then().PodsOnRevision(ns, "c", "1-26").PodsOnRevision(ns, "e", "1-25")
}
