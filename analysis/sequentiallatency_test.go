package analysis

import (
	"context"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// latencyWorld is 40 looks before the restart and after more after it, at
// 200 requests a look on each workload. Per look, the buckets 25, 50, 100
// and 250 ms hold 180, 197, 199 and 200 of them (cumulative), so the p99
// falls in the 100 ms bucket; after the restart, reviews' 100 ms bucket
// holds fastAfter.
func latencyWorld(restart time.Time, after int, fastAfter float64) (model.Matrix, promv1.Range) {
	start := restart.Add(-10 * time.Minute)
	steps := 40 + after + 1
	les := []string{"25", "50", "100", "250", "+Inf"}
	perLook := map[string]float64{"25": 180, "50": 197, "100": 199, "250": 200, "+Inf": 200}
	var m model.Matrix
	for _, w := range []string{"reviews", "ratings"} {
		for _, le := range les {
			var vs []float64
			v := 0.0
			for k := range steps {
				vs = append(vs, v)
				add := perLook[le]
				if w == "reviews" && k >= 40 {
					switch le {
					case "25", "50":
						add = fastAfter * perLook[le] / 199
					case "100":
						add = fastAfter
					}
				}
				v += add
			}
			s := sampled(w, w+"-1", "200", start, vs...)
			s.Metric["__name__"] = "istio_request_duration_milliseconds_bucket"
			s.Metric["le"] = model.LabelValue(le)
			m = append(m, s)
		}
	}
	return m, promv1.Range{Start: start, End: start.Add(time.Duration(steps-1) * 15 * time.Second), Step: 15 * time.Second}
}

func newLatencyGate(t *testing.T, q RangeQuerier) *SequentialGate {
	t.Helper()
	g, err := NewSequentialGate(SequentialLatency{Quantile: 0.99}, defaultSequential, q, 15*time.Second, 10*time.Minute, 15*time.Minute, 10*time.Second)
	require.NoError(t, err)
	return g
}

func TestTheSequentialLatencyQueryCountsEachPodsHistogramBuckets(t *testing.T) {
	w := movedWave(t0)
	assert.Equal(t, `istio_request_duration_milliseconds_bucket{reporter="destination",destination_workload_namespace="shop"}`,
		newLatencyGate(t, nil).Query(w))
}

// Before the restart, 0.5% of answers were slower than 100 ms and 1.5%
// slower than 50 ms: the p99 fell in the 100 ms bucket. Reviews on the new
// revision answers a quarter of its requests slower than that.
func TestAWorkloadThatGotSlowerFailsOnTheShareSlowerThanTheHistorysP99(t *testing.T) {
	m, r := latencyWorld(t0, 4, 150)
	v := newLatencyGate(t, &rangeProm{matrix: m}).Evaluate(context.Background(), movedWave(t0), r.End)
	assert.Equal(t, canary.ResultFail, v.Result)
	assert.True(t, v.Final)
	assert.Equal(t, "reviews: share slower than 100ms 25.00% (100/400) against the control's 0.50% (2/400), 0.50% (40/8000) and 0.50% (40/8000) before the restart; "+
		"control: the namespace's workloads not yet moved, against their split before the restart; evidence 6.39e+04 of 40: fail", v.Reason)
}

func TestAWorkloadAsFastAsBeforeIsNotFailedOnLatency(t *testing.T) {
	m, r := latencyWorld(t0, 20, 199)
	v := newLatencyGate(t, &rangeProm{matrix: m}).Evaluate(context.Background(), movedWave(t0), r.End)
	assert.NotEqual(t, canary.ResultFail, v.Result, v.Reason)
}

func TestWithoutRequestsBeforeTheRestartTheLatencyCheckIsInconclusive(t *testing.T) {
	m, r := latencyWorld(t0, 4, 150)
	// Every series begins after the restart.
	for _, s := range m {
		s.Values = s.Values[41:]
	}
	v := newLatencyGate(t, &rangeProm{matrix: m}).Evaluate(context.Background(), movedWave(t0), r.End)
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.Equal(t, "no request before the restart to place the p99 on", v.Reason)
}

// Prometheus writes a bucket's bound "100" or "100.0" depending on its
// version and the scrape's format; one that wrote "100" over the history
// and "100.0" over the looks changes nothing.
func TestALatencyBoundIsReadByItsValueNotItsSpelling(t *testing.T) {
	m, r := latencyWorld(t0, 4, 199)
	var respelled model.Matrix
	for _, s := range m {
		c := *s
		c.Metric = s.Metric.Clone()
		if le := string(c.Metric["le"]); le != "+Inf" {
			c.Metric["le"] = model.LabelValue(le + ".0")
		}
		respelled = append(respelled, &c)
	}
	prom := &rangeProm{forRange: func(r promv1.Range) model.Matrix {
		if r.End.After(t0) {
			return respelled
		}
		return m
	}}
	v := newLatencyGate(t, prom).Evaluate(context.Background(), movedWave(t0), r.End)
	assert.NotEqual(t, canary.ResultFail, v.Result, v.Reason)
	assert.Contains(t, v.Reason, "share slower than 100ms 0.50% (3/600)", "three looks: the fourth is a step from now")
}

// Proxies given buckets of their own (sidecar.istio.io/statsHistogramBuckets)
// may lack the bound the others' p99 falls at: the bound is chosen among
// those every histogram has, and with none in common the check says so
// rather than reading every answer as slower.
func TestTheLatencyBoundIsOneEveryHistogramHas(t *testing.T) {
	m, r := latencyWorld(t0, 4, 199)
	var without100 model.Matrix
	for _, s := range m {
		if s.Metric["destination_workload"] == "reviews" && s.Metric["le"] == "100" {
			continue // reviews has no 100 ms bucket
		}
		without100 = append(without100, s)
	}
	v := newLatencyGate(t, &rangeProm{matrix: without100}).Evaluate(context.Background(), movedWave(t0), r.End)
	assert.NotEqual(t, canary.ResultFail, v.Result, v.Reason)
	assert.Contains(t, v.Reason, "share slower than 250ms 0.00% (", "100 ms is not a bound of every histogram: 250 ms is the first that is")

	for _, s := range m {
		if s.Metric["destination_workload"] == "reviews" && s.Metric["le"] == "250" {
			s.Metric["le"] = "300"
		}
	}
	var none model.Matrix
	for _, s := range m {
		if s.Metric["destination_workload"] != "reviews" || s.Metric["le"] == "300" || s.Metric["le"] == "+Inf" {
			none = append(none, s)
		}
	}
	v = newLatencyGate(t, &rangeProm{matrix: none}).Evaluate(context.Background(), movedWave(t0), r.End)
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.Equal(t, "the request-duration histograms of the workloads share no finite bucket bound", v.Reason)
}
