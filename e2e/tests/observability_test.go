package tests

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestTracesAndMetricsOfAMigration runs a two-wave migration with the
// metric checks and checks the span tree an in-memory exporter received,
// and the agent's metrics as the world's Prometheus scraped them.
func TestTracesAndMetricsOfAMigration(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "traced"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "front").Deployment(ns, "back").
		RolledOut(ns)
	waitForTraffic(t, f, ns, 2)
	cfg, q := withMetrics(t, f, testConfig(f))
	cfg.Gates.Metrics.LatencyP99.Enabled = false

	spans := tracetest.NewInMemoryExporter()
	tp := agent.NewSDKTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	a := startAgentWithOptions(t, f, cfg, newAPICounter(), "agent-1", func(o *agent.Options) {
		o.GateDeps = agent.GateDeps{Prometheus: q}
		o.Registerer = reg
		o.TracerProvider = tp
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: a.Controller.Handler(reg), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	require.NoError(t, f.World.Prometheus.AddTarget(f.Ctx, prom.Target{Job: "meshwave", Addr: l.Addr().String()}))

	optIn(f, ns, "1-26", 10)
	waitForPhase(f, ns, canary.PhaseCompleted, 3*time.Minute)
	// The agent ends the migration's span once its last write returned,
	// which may be after the Completed status is seen here.
	f.Eventually("the migration's span to end", func() (bool, string) {
		var names []string
		for _, s := range spans.GetSpans() {
			if s.Name == "migration "+ns {
				return true, ""
			}
			names = append(names, s.Name)
		}
		return false, strings.Join(names, ", ")
	})

	// The span tree: one trace, the migration at its root, a span per wave,
	// and under each wave its patches, its gates and its queries.
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var traceIDs []string
	for _, s := range spans.GetSpans() {
		byID[s.SpanContext.SpanID()] = s
		traceIDs = append(traceIDs, s.SpanContext.TraceID().String())
	}
	sort.Strings(traceIDs)
	assert.Equal(t, traceIDs[0], traceIDs[len(traceIDs)-1], "every span is in one trace")
	parent := func(s tracetest.SpanStub) string {
		if p, ok := byID[s.Parent.SpanID()]; ok {
			return p.Name
		}
		return ""
	}
	tree := map[string][]string{}
	for _, s := range spans.GetSpans() {
		tree[parent(s)] = append(tree[parent(s)], s.Name)
	}
	for k := range tree {
		sort.Strings(tree[k])
	}
	assert.Equal(t, []string{"migration " + ns}, tree[""], "the migration is the only root")
	assert.Equal(t, []string{"wave 1", "wave 2"}, tree["migration "+ns])
	for _, w := range []string{"wave 1", "wave 2"} {
		children := map[string]bool{}
		for _, c := range tree[w] {
			children[c] = true
		}
		for _, want := range []string{"gate rollout", "gate injection", "gate xds-sync", "gate error-rate"} {
			assert.True(t, children[want], "%s has a %q span: %v", w, want, tree[w])
		}
	}
	assert.Contains(t, tree["wave 1"], "restart back", "the canary's patch is under wave 1")
	assert.Contains(t, tree["wave 1"], "switch istio.io/rev")
	assert.Contains(t, tree["wave 2"], "restart front")
	assert.Contains(t, tree["gate error-rate"], "promql error-rate", "each query is a child of its gate")
	for _, s := range spans.GetSpans() {
		if s.Name == "wave 1" {
			attrs := map[string]string{}
			for _, kv := range s.Attributes {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			assert.Equal(t, map[string]string{"meshwave.namespace": ns, "meshwave.wave": "1", "meshwave.revision.target": "1-26",
				"meshwave.revision.source": "1-25", "meshwave.verdict": "passed"}, attrs)
		}
	}

	// The metrics, as Prometheus scraped them.
	p := f.World.Prometheus
	require.NoError(t, p.WaitForQuery(f.Ctx, `meshwave_namespace_phase{namespace="traced",phase="Completed"} == 1`, 1, time.Minute))
	for query, want := range map[string]float64{
		`meshwave_namespace_phase{namespace="traced",phase="Paused"}`:                               0,
		`meshwave_namespace_wave{namespace="traced"}`:                                               2,
		`meshwave_namespace_waves{namespace="traced"}`:                                              2,
		`meshwave_namespace_workloads{namespace="traced",state="moved"}`:                            2,
		`meshwave_namespace_info{namespace="traced",source_revision="1-25",target_revision="1-26"}`: 1,
		`sum(meshwave_restarts_total{namespace="traced",kind="move"})`:                              2,
		`meshwave_analysis_threshold{namespace="traced",check="error-rate"}`:                        0.05,
		`meshwave_analysis_value{namespace="traced",check="error-rate"}`:                            0,
		`meshwave_analysis_result{namespace="traced",check="error-rate",result="Pass"}`:             1,
		`meshwave_leader`: 1,
		`sum(meshwave_wave_duration_seconds_count{namespace="traced",outcome="passed"})`: 2,
	} {
		vec, err := p.Query(f.Ctx, query)
		require.NoError(t, err)
		require.Len(t, vec, 1, query)
		assert.Equal(t, want, float64(vec[0].Value), query)
	}
	vec, err := p.Query(f.Ctx, `sum(meshwave_analysis_verdicts_total{namespace="traced",check="error-rate",result="Pass"})`)
	require.NoError(t, err)
	require.Len(t, vec, 1)
	assert.GreaterOrEqual(t, float64(vec[0].Value), 4.0, "two passes in a row for each of two waves")
}
