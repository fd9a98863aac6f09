package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshwave/meshwave/canary"
)

var scrapeTime = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// namespaceWith is a namespace with the given annotations; a status given
// as a struct is written as JSON.
func namespaceWith(t *testing.T, name string, target string, status any) *corev1.Namespace {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if target != "" {
		ns.Annotations[canary.AnnotationTargetRevision] = target
	}
	switch s := status.(type) {
	case nil:
	case string:
		ns.Annotations[canary.AnnotationStatus] = s
	default:
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		ns.Annotations[canary.AnnotationStatus] = string(raw)
	}
	return ns
}

// stateRegistry registers a state collector over the namespaces, as
// NewMetrics does.
func stateRegistry(t *testing.T, nss ...*corev1.Namespace) *prometheus.Registry {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range nss {
		require.NoError(t, idx.Add(ns))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&stateCollector{caches: &Caches{Namespaces: corelisters.NewNamespaceLister(idx)}, clock: clocktesting.NewFakePassiveClock(scrapeTime)})
	return reg
}

func analysisVerdict(gate string, result canary.Result, value float64) canary.Verdict {
	threshold := 0.05
	return canary.Verdict{Gate: gate, Result: result, Analysis: true,
		Measurements: []canary.Measurement{{Check: gate, Workload: "cart", Value: value, Threshold: &threshold, Result: result}}}
}

func TestOneBadStatusNeverFailsTheScrape(t *testing.T) {
	started := scrapeTime.Add(-time.Minute)
	healthy := canary.Status{Phase: canary.PhaseAnalyzing, Target: "1-26", TargetRevision: "1-26", SourceRevision: "1-25", Wave: 1, TotalWaves: 2,
		WaveState: canary.WaveVerifying, StartedAt: &started, GatesSince: &started,
		Verdicts: []canary.Verdict{analysisVerdict("error-rate", canary.ResultPass, 0.01)}}
	failing := healthy
	failing.TotalWaves = 1
	failing.Verdicts = []canary.Verdict{analysisVerdict("error-rate", canary.ResultFail, 0.3)}
	// meshwave never writes one gate twice: such a status is unreadable,
	// and not reported, as any other.
	twice := healthy
	twice.Verdicts = []canary.Verdict{analysisVerdict("error-rate", canary.ResultPass, 0.01), analysisVerdict("error-rate", canary.ResultFail, 0.3)}
	reg := stateRegistry(t,
		namespaceWith(t, "shop", "1-26", healthy),
		namespaceWith(t, "edited", "1-26", failing),
		namespaceWith(t, "twice", "1-26", twice),
		namespaceWith(t, "garbage", "1-26", "{not json"),
		namespaceWith(t, "left", "", healthy),
	)

	want := `
# HELP meshwave_analysis_result The check's last result: one series per result, 1 for the current one.
# TYPE meshwave_analysis_result gauge
meshwave_analysis_result{check="error-rate",namespace="edited",result="Fail"} 1
meshwave_analysis_result{check="error-rate",namespace="edited",result="Inconclusive"} 0
meshwave_analysis_result{check="error-rate",namespace="edited",result="Pass"} 0
meshwave_analysis_result{check="error-rate",namespace="edited",result="Pending"} 0
meshwave_analysis_result{check="error-rate",namespace="shop",result="Fail"} 0
meshwave_analysis_result{check="error-rate",namespace="shop",result="Inconclusive"} 0
meshwave_analysis_result{check="error-rate",namespace="shop",result="Pass"} 1
meshwave_analysis_result{check="error-rate",namespace="shop",result="Pending"} 0
# HELP meshwave_analysis_value The last measured value of a check, for the wave's worst workload.
# TYPE meshwave_analysis_value gauge
meshwave_analysis_value{check="error-rate",namespace="edited"} 0.3
meshwave_analysis_value{check="error-rate",namespace="shop"} 0.01
# HELP meshwave_namespace_waves The total number of waves of the migration.
# TYPE meshwave_namespace_waves gauge
meshwave_namespace_waves{namespace="edited"} 1
meshwave_namespace_waves{namespace="shop"} 2
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "meshwave_analysis_result", "meshwave_analysis_value", "meshwave_namespace_waves"),
		"unreadable statuses (a gate named twice, not JSON) and a namespace that left are not reported")

	rec := httptest.NewRecorder()
	(&Controller{}).Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `meshwave_namespace_phase{namespace="shop",phase="Analyzing"} 1`)
	assert.NotContains(t, rec.Body.String(), `namespace="left"`, "a namespace without meshwave.io/target-revision is not migrating")
	assert.NotContains(t, rec.Body.String(), `namespace="garbage"`)
}

// A namespace's counters are at zero from its first reconcile, so that the
// first rollback is an increase Prometheus sees: a series that first
// appears at 1 has not increased for increase() and the MeshwaveRollback
// alert.
func TestANamespacesCountersStartAtZero(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, &Caches{Namespaces: corelisters.NewNamespaceLister(idx)}, clocktesting.NewFakePassiveClock(scrapeTime))
	migrating := &canary.Status{Phase: canary.PhaseMigrating, Wave: 1, TotalWaves: 2}
	m.observe("shop", nil, canary.Decision{Status: migrating}, []canary.Verdict{{Gate: "rollout", Result: canary.ResultPending, Checked: true}}, scrapeTime)

	assert.Equal(t, 0.0, testutil.ToFloat64(m.rollbacks.WithLabelValues("shop", "wave")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.rollbacks.WithLabelValues("shop", "all")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.restarts.WithLabelValues("shop", "rollback")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.verdicts.WithLabelValues("shop", "rollout", "Fail")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.verdicts.WithLabelValues("shop", "rollout", "Pending")))
	want := `
# HELP meshwave_wave_duration_seconds Time from a wave's start to its outcome, by namespace and outcome.
# TYPE meshwave_wave_duration_seconds histogram
`
	for _, outcome := range []string{"failed", "passed"} {
		for _, le := range []string{"5", "15", "30", "60", "120", "300", "600", "1200", "1800", "3600", "+Inf"} {
			want += `meshwave_wave_duration_seconds_bucket{namespace="shop",outcome="` + outcome + `",le="` + le + `"} 0` + "\n"
		}
		want += `meshwave_wave_duration_seconds_sum{namespace="shop",outcome="` + outcome + `"} 0` + "\n"
		want += `meshwave_wave_duration_seconds_count{namespace="shop",outcome="` + outcome + `"} 0` + "\n"
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "meshwave_wave_duration_seconds"))

	rollingBack := &canary.Status{Phase: canary.PhaseRollingBack, Rollback: canary.RollbackWave, Wave: 1, TotalWaves: 2}
	m.observe("shop", migrating, canary.Decision{Status: rollingBack}, nil, scrapeTime)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.rollbacks.WithLabelValues("shop", "wave")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.rollbacks.WithLabelValues("shop", "all")))
}

func TestRevertsAreCountedByKindAndOwner(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, &Caches{Namespaces: corelisters.NewNamespaceLister(idx)}, clocktesting.NewFakePassiveClock(scrapeTime))
	m.observe("shop", nil, canary.Decision{Reverts: []canary.RevertSeen{
		{Kind: canary.RevertLabel, Owner: "argocd/platform"}, {Kind: canary.RevertTemplate, Owner: "argocd/shop"}, {Kind: canary.RevertLabel},
	}}, nil, scrapeTime)
	m.observe("shop", nil, canary.Decision{Reverts: []canary.RevertSeen{{Kind: canary.RevertLabel, Owner: "argocd/platform"}}}, nil, scrapeTime)
	want := `
# HELP meshwave_gitops_reverts_total meshwave's changes found undone, by namespace, kind (label or template) and owner (the GitOps owner marked on the object, or none).
# TYPE meshwave_gitops_reverts_total counter
meshwave_gitops_reverts_total{kind="label",namespace="shop",owner="argocd/platform"} 2
meshwave_gitops_reverts_total{kind="label",namespace="shop",owner="none"} 1
meshwave_gitops_reverts_total{kind="template",namespace="shop",owner="argocd/shop"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "meshwave_gitops_reverts_total"))
}

func TestTheReplicaSetCacheKeepsOnlyTheTemplatesRestartStamp(t *testing.T) {
	rs := &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cart"}, Annotations: map[string]string{
			canary.AnnotationRestartedAt: "2026-11-29T12:00:00Z", "sidecar.istio.io/proxyCPU": "100m"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cart", Image: "cart:1"}}},
	}}}
	out, err := transform(nil)(rs)
	require.NoError(t, err)
	assert.Equal(t, &CachedReplicaSet{RestartedAt: "2026-11-29T12:00:00Z"}, out)
}

func TestTheMaintenanceWindowMetricsSayWhetherItIsOpenAndWhenTheNextOpens(t *testing.T) {
	// The configured window is open 11:00-13:00Z; the scrape is at 12:00Z.
	configured, err := canary.NewWindow("0 11 * * *", 2*time.Hour, "UTC")
	require.NoError(t, err)
	next := scrapeTime.Add(23 * time.Hour)
	started := scrapeTime.Add(-time.Hour)
	waiting := namespaceWith(t, "waiting", "1-26", canary.Status{Phase: canary.PhaseMigrating, Target: "1-26", TargetRevision: "1-26", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 2, WaveState: canary.WavePassed, StartedAt: &started, WaveStartedAt: &started, NextWindow: &next})
	// This one narrows it to 11:00-12:00Z (noon in Berlin): closed at 12:00Z.
	waiting.Annotations[canary.AnnotationMaintenanceWindow] = `{"schedule":"0 12 * * *","duration":"1h","timeZone":"Europe/Berlin"}`
	open := namespaceWith(t, "open", "1-26", canary.Status{Phase: canary.PhasePending, Target: "1-26"})

	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, idx.Add(waiting))
	require.NoError(t, idx.Add(open))
	reg := prometheus.NewRegistry()
	reg.MustRegister(&stateCollector{caches: &Caches{Namespaces: corelisters.NewNamespaceLister(idx)}, clock: clocktesting.NewFakePassiveClock(scrapeTime),
		windows: canary.Windows{configured}})
	want := `
# HELP meshwave_namespace_next_window_timestamp_seconds When the maintenance window the namespace's next wave waits for opens, in Unix seconds; only while one waits.
# TYPE meshwave_namespace_next_window_timestamp_seconds gauge
meshwave_namespace_next_window_timestamp_seconds{namespace="waiting"} 1.7960364e+09
# HELP meshwave_namespace_window_open 1 while the namespace's maintenance windows (the configured ones, narrowed by meshwave.io/maintenance-window) are open; always 1 without windows.
# TYPE meshwave_namespace_window_open gauge
meshwave_namespace_window_open{namespace="open"} 1
meshwave_namespace_window_open{namespace="waiting"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "meshwave_namespace_window_open", "meshwave_namespace_next_window_timestamp_seconds"))
}

func TestASequentialChecksEvidenceAndItsBoundAreExported(t *testing.T) {
	started := scrapeTime.Add(-time.Minute)
	evidence, bound := 212.0, 40.0
	v := analysisVerdict("error-rate", canary.ResultFail, 0.3)
	v.Measurements[0].Threshold, v.Measurements[0].Evidence, v.Measurements[0].EvidenceBound = nil, &evidence, &bound
	st := canary.Status{Phase: canary.PhaseAnalyzing, Target: "1-26", TargetRevision: "1-26", SourceRevision: "1-25", Wave: 1, TotalWaves: 2,
		WaveState: canary.WaveVerifying, StartedAt: &started, GatesSince: &started, Verdicts: []canary.Verdict{v, analysisVerdict("latency-p99", canary.ResultPass, 40)}}
	reg := stateRegistry(t, namespaceWith(t, "reviews", "1-26", st))
	want := `
# HELP meshwave_analysis_evidence A sequential check's evidence against a healthy wave, for the wave's worst workload: the wave fails when it reaches meshwave_analysis_evidence_bound.
# TYPE meshwave_analysis_evidence gauge
meshwave_analysis_evidence{check="error-rate",namespace="reviews"} 212
# HELP meshwave_analysis_evidence_bound The evidence at which a sequential check fails the wave: 1/α, or 2/α against a history, for α as the wave's workloads share it.
# TYPE meshwave_analysis_evidence_bound gauge
meshwave_analysis_evidence_bound{check="error-rate",namespace="reviews"} 40
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "meshwave_analysis_evidence", "meshwave_analysis_evidence_bound"),
		"a threshold check has no evidence series")
}
