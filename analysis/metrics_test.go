package analysis

import (
	"context"
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// judge runs one check over vec for a wave of the named workloads.
func judge(t *testing.T, c Check, vec model.Vector, names ...string) canary.Verdict {
	t.Helper()
	g, err := NewMetricGate(c, &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	var ms []canary.WaveWorkload
	for _, n := range names {
		ms = append(ms, member(n, pod(n+"-1", "1-26")))
	}
	return g.Judge(wave(ms...), vec)
}

func perPod(workload, pod, kind string, v float64) *model.Sample {
	s := series(workload, kind, v)
	s.Metric["pod"] = model.LabelValue(pod)
	return s
}

func TestSeveralSeriesOfOneWorkloadAreJudgedByTheWorst(t *testing.T) {
	errorRate := ErrorRateCheck(0.05, 1.0, 50)
	tests := []struct {
		name   string
		vec    model.Vector
		result canary.Result
		reason string
		value  float64
	}{
		{"one pod at 90% 5xx fails the workload, listed last", model.Vector{
			perPod("cart", "cart-1", "value", 0), perPod("cart", "cart-2", "value", 0.9), series("cart", "requests", 600)},
			canary.ResultFail, "cart: 90.00% > threshold 5.00% (worst of 2 series)", 0.9},
		{"one pod at 90% 5xx fails the workload, listed first", model.Vector{
			perPod("cart", "cart-2", "value", 0.9), perPod("cart", "cart-1", "value", 0), series("cart", "requests", 600)},
			canary.ResultFail, "cart: 90.00% > threshold 5.00% (worst of 2 series)", 0.9},
		{"a failing series outweighs a NaN one", model.Vector{
			perPod("cart", "cart-1", "value", math.NaN()), perPod("cart", "cart-2", "value", 0.9), series("cart", "requests", 600)},
			canary.ResultFail, "cart: 90.00% > threshold 5.00% (worst of 2 series)", 0.9},
		{"a NaN series beside a healthy one is inconclusive, never a pass", model.Vector{
			perPod("cart", "cart-1", "value", 0.01), perPod("cart", "cart-2", "value", math.NaN()), series("cart", "requests", 600)},
			canary.ResultInconclusive, "cart: the value is NaN (worst of 2 series)", 0},
		{"the request counts of one workload are added up", model.Vector{
			series("cart", "value", 0.01), perPod("cart", "cart-1", "requests", 30), perPod("cart", "cart-2", "requests", 30)},
			canary.ResultPass, "cart: 1.00% <= threshold 5.00%", 0.01},
		{"a request count that is not a number makes the sum inconclusive", model.Vector{
			series("cart", "value", 0.01), perPod("cart", "cart-1", "requests", 600), perPod("cart", "cart-2", "requests", math.NaN())},
			canary.ResultInconclusive, "cart: no request count", 0.01},
		{"the worst value is held against the worst baseline, in either order", model.Vector{
			perPod("cart", "cart-1", "baseline", 0.03), perPod("cart", "cart-2", "baseline", 0.01),
			perPod("cart", "cart-3", "value", 0.04), perPod("cart", "cart-4", "value", 0.02), series("cart", "requests", 600)},
			canary.ResultPass, "cart: 4.00% <= threshold 5.00%, baseline 3.00% (worst of 2 series)", 0.04},
		{"the worst baseline is the highest, in the other order too", model.Vector{
			perPod("cart", "cart-2", "baseline", 0.01), perPod("cart", "cart-1", "baseline", 0.03),
			perPod("cart", "cart-4", "value", 0.02), perPod("cart", "cart-3", "value", 0.04), series("cart", "requests", 600)},
			canary.ResultPass, "cart: 4.00% <= threshold 5.00%, baseline 3.00% (worst of 2 series)", 0.04},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := judge(t, errorRate, tt.vec, "cart")
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			require.Len(t, v.Measurements, 1)
			assert.Equal(t, tt.value, v.Measurements[0].Value)
			assert.Equal(t, tt.result, v.Measurements[0].Result)
		})
	}
}

func TestAnInfiniteP99Fails(t *testing.T) {
	v := judge(t, LatencyP99Check(1000, 0.5, 50), model.Vector{
		series("cart", "value", math.Inf(1)), series("cart", "baseline", 40), series("cart", "requests", 600)}, "cart")
	assert.Equal(t, canary.ResultFail, v.Result)
	assert.Equal(t, "cart: +Inf > threshold 1000ms", v.Reason)
	require.Len(t, v.Failed, 1)
	assert.Equal(t, "latency-p99 +Inf > threshold 1000ms", v.Failed[0].Reason)
	require.Len(t, v.Measurements, 1)
	assert.Equal(t, math.MaxFloat64, v.Measurements[0].Value, "JSON has no +Inf: the largest number stands for it")
	_, err := json.Marshal(v)
	assert.NoError(t, err, "the verdict goes into the status")
}

func TestANegativeInfinityIsInconclusive(t *testing.T) {
	v := judge(t, LatencyP99Check(1000, 0.5, 50), model.Vector{series("cart", "value", math.Inf(-1)), series("cart", "requests", 600)}, "cart")
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.Equal(t, "cart: the value is -Inf", v.Reason)
}

// warningProm answers with a vector and warnings, as Thanos or Cortex do
// when a store did not answer.
type warningProm struct {
	vec      model.Vector
	warnings promv1.Warnings
}

func (w warningProm) Query(context.Context, string, time.Time, ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	return w.vec, w.warnings, nil, nil
}

func TestAPartialAnswerIsInconclusiveNeverAPass(t *testing.T) {
	healthy := model.Vector{series("cart", "value", 0), series("cart", "requests", 600)}
	failing := model.Vector{series("cart", "value", 0.9), series("cart", "requests", 600)}
	for name, vec := range map[string]model.Vector{"healthy": healthy, "failing": failing} {
		t.Run(name, func(t *testing.T) {
			prom := warningProm{vec: vec, warnings: promv1.Warnings{"partial response: store eu-1 unavailable", "no response from store eu-2"}}
			g, err := NewMetricGate(ErrorRateCheck(0.05, 1.0, 50), prom, time.Minute, 30*time.Second, time.Minute, 0)
			require.NoError(t, err)
			w := wave(member("cart", pod("cart-1", "1-26")))
			w.Analysis.ReadyAt = &t0
			v := g.Evaluate(context.Background(), w, t0.Add(2*time.Minute))
			assert.Equal(t, canary.ResultInconclusive, v.Result)
			assert.Equal(t, "Prometheus's answer may be incomplete: partial response: store eu-1 unavailable; no response from store eu-2", v.Reason)
			assert.Empty(t, v.Failed)
			assert.True(t, v.Checked)
		})
	}
}

// TestWorkloadNamesAreQuotedForPromQL reads the names regex back the way
// PromQL reads a double-quoted string (Go's escapes) and checks that it
// matches exactly the wave's workloads: a dotted name such as api.v1 needs
// its regex escape escaped again.
func TestWorkloadNamesAreQuotedForPromQL(t *testing.T) {
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1, 50), &fakeProm{}, time.Minute, time.Second, time.Minute, 0)
	require.NoError(t, err)
	q, err := g.Query(wave(member("api.v1", pod("a", "1-26")), member("web", pod("w", "1-26"))), t0.Add(2*time.Minute))
	require.NoError(t, err)
	m := regexp.MustCompile(`destination_workload=~("(?:[^"\\]|\\.)*")`).FindStringSubmatch(q)
	require.NotNil(t, m, q)
	assert.Equal(t, `"api\\.v1|web"`, m[1])
	unquoted, err := strconv.Unquote(m[1])
	require.NoError(t, err, "a valid PromQL string")
	re := regexp.MustCompile("^(?:" + unquoted + ")$")
	assert.True(t, re.MatchString("api.v1"))
	assert.True(t, re.MatchString("web"))
	assert.False(t, re.MatchString("apixv1"), "the dot is literal")
}

func TestAMetricGateRefusesWhatWouldMeasureTheWrongThing(t *testing.T) {
	mine := func(query string) Check {
		return Check{Name: "mine", Query: query, Requests: `sum by (app) (increase(x[{{.Window}}]))`, GroupBy: "app", Threshold: 1}
	}
	nan := ErrorRateCheck(math.NaN(), 1, 50)
	tests := []struct {
		name                 string
		check                Check
		bake, window, period time.Duration
		err                  string
	}{
		{"a window longer than the bake time reaches back to the old revision's traffic", ErrorRateCheck(0.05, 1, 50), 5 * time.Second, 10 * time.Second, time.Second,
			"check error-rate: a window of 10s is longer than the bake time of 5s: the first rates would reach back before the wave was up and mix in the old revision's traffic"},
		{"a window under a second", ErrorRateCheck(0.05, 1, 50), time.Second, 500 * time.Millisecond, time.Second,
			"check error-rate: a window of 500ms is shorter than 1s"},
		{"a window PromQL cannot write", ErrorRateCheck(0.05, 1, 50), 2 * time.Second, 1500*time.Millisecond + 500*time.Microsecond, time.Second,
			"check error-rate: a window of 1.5005s is not a whole number of milliseconds, as PromQL writes durations"},
		{"a template naming a field that does not exist", mine(`sum by (app) (rate(x{ns="{{.Nmespace}}"}[{{.Window}}]))`), time.Minute, time.Minute, time.Second,
			"check mine: query: {{.Nmespace}} is not one of the fields {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}, {{.Cluster}}"},
		{"a tolerance without a baseline", Check{Name: "mine", Query: `sum by (app) (rate(x[{{ .Window }}]))`, Requests: `x`, GroupBy: "app", Threshold: 1, Tolerance: 0.5}, time.Minute, time.Minute, time.Second,
			"check mine: a tolerance needs a baseline, so the query must place {{.Offset}} after its range selectors"},
		{"a threshold that is not a number", nan, time.Minute, time.Minute, time.Second,
			"check error-rate: threshold NaN, tolerance 1, minRequests 50 must be finite numbers of zero or more"},
		{"no label to name the workload", Check{Name: "mine", Query: `x`, Requests: `x`}, time.Minute, time.Minute, time.Second,
			"check mine: groupBy must name the label that names the workload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewMetricGate(tt.check, &fakeProm{}, tt.bake, tt.period, tt.window, 0)
			require.Error(t, err)
			assert.Equal(t, tt.err, err.Error())
		})
	}
	_, err := NewMetricGate(Check{Name: "mine", Query: `sum by (app) (rate(x[{{ .Window }}]{{ .Offset }}))`, Requests: `x`, GroupBy: "app", Threshold: 1, Tolerance: 0.5},
		&fakeProm{}, time.Minute, time.Second, time.Minute, 0)
	assert.NoError(t, err, "{{ .Offset }} with spaces is a baseline too")
}

func TestATemplateHoldsOnlyFieldSubstitutions(t *testing.T) {
	tests := []struct{ name, text, err string }{
		{"a loop, which would run at every check", `x{{range 1000000000}}y{{end}}`,
			"{{range 1000000000}}y{{end}} is not a substitution of a field: a PromQL template holds only {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}, {{.Cluster}}"},
		{"a function, which could build a query of any size", `{{printf "%0999999999d" 1}}`,
			`{{printf "%0999999999d" 1}} is not a substitution of a field: a PromQL template holds only {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}, {{.Cluster}}`},
		{"a pipeline", `{{.Namespace | printf "%s"}}`,
			`{{.Namespace | printf "%s"}} is not a substitution of a field: a PromQL template holds only {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}, {{.Cluster}}`},
		{"a sub-template, which could call itself", `{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`, "a PromQL template may not define templates"},
		{"a field that does not exist", `x{ns="{{.Nmespace}}"}`, "{{.Nmespace}} is not one of the fields {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}, {{.Cluster}}"},
		{"nothing", " \n", "the template is empty"},
		{"a syntax error", `{{.Namespace`, `template: q:1: unclosed action`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseQueryTemplate("q", tt.text)
			require.Error(t, err)
			assert.Equal(t, tt.err, err.Error())
		})
	}
	tmpl, offset, err := ParseQueryTemplate("q", `sum by ({{.GroupBy}}) (rate(x{ns="{{.Namespace}}",w=~"{{.Workloads}}"}[{{.Window}}]{{ .Offset }}))`)
	require.NoError(t, err)
	assert.True(t, offset)
	out, err := render(tmpl, sampleParams)
	require.NoError(t, err)
	assert.Equal(t, `sum by (app) (rate(x{ns="shop",w=~"api\\.v1"}[1m]))`, out)
}

// nilProm answers with no value and no error.
type nilProm struct{}

func (nilProm) Query(context.Context, string, time.Time, ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	return nil, nil, nil, nil
}

func TestAnAnswerWithoutAValueIsInconclusive(t *testing.T) {
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1.0, 50), nilProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	w := wave(member("cart", pod("cart-1", "1-26")))
	w.Analysis.ReadyAt = &t0
	v := g.Evaluate(context.Background(), w, t0.Add(2*time.Minute))
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.Equal(t, "the query returned nothing, not a vector", v.Reason)
}

func TestAStatefulSetIsQueriedAndJudgedByItsObjectName(t *testing.T) {
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1, 50), &fakeProm{}, time.Minute, time.Second, time.Minute, 0)
	require.NoError(t, err)
	db := member("StatefulSet/db", pod("db-0", "1-26"))
	db.Kind = canary.KindStatefulSet
	q, err := g.Query(wave(db, member("web", pod("w", "1-26"))), t0.Add(2*time.Minute))
	require.NoError(t, err)
	m := regexp.MustCompile(`destination_workload=~("(?:[^"\\]|\\.)*")`).FindStringSubmatch(q)
	require.NotNil(t, m, q)
	assert.Equal(t, `"db|web"`, m[1], "Istio labels a StatefulSet's series with its name")

	v := g.Judge(wave(db), model.Vector{series("db", "value", 0.5), series("db", "requests", 600)})
	assert.Equal(t, canary.ResultFail, v.Result)
	assert.Equal(t, "StatefulSet/db: 50.00% > threshold 5.00%", v.Reason)
	require.Len(t, v.Failed, 1)
	assert.Equal(t, "StatefulSet/db", v.Failed[0].Name)
}
