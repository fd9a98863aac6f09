package analysis

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/analysis/sequential"
	"github.com/meshwave/meshwave/canary"
)

// rangeProm answers every range query with the same matrix or error, and
// keeps what it was asked.
type rangeProm struct {
	matrix   model.Matrix
	warnings promv1.Warnings
	err      error
	queries  []string
	ranges   []promv1.Range
}

func (f *rangeProm) QueryRange(_ context.Context, q string, r promv1.Range, _ ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	f.queries, f.ranges = append(f.queries, q), append(f.ranges, r)
	if f.err != nil {
		return nil, nil, nil, f.err
	}
	return f.matrix, f.warnings, nil, nil
}

var defaultSequential = sequential.ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}

func newSequentialGate(t *testing.T, q RangeQuerier) *SequentialGate {
	t.Helper()
	g, err := NewSequentialGate(SequentialErrors{}, defaultSequential, q, 15*time.Second, 10*time.Minute, 15*time.Minute, 10*time.Second)
	require.NoError(t, err)
	return g
}

// counter is one pod's counter of one kind, sampled at every step from
// start: values[k] at start + k·step; NaN leaves a step out.
func counter(workload, pod, kind string, start time.Time, values ...float64) *model.SampleStream {
	s := &model.SampleStream{Metric: model.Metric{"destination_workload": model.LabelValue(workload), "pod": model.LabelValue(pod), seriesLabel: model.LabelValue(kind)}}
	for k, v := range values {
		if math.IsNaN(v) {
			continue
		}
		s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(start.Add(time.Duration(k) * 15 * time.Second).UnixNano()), Value: model.SampleValue(v)})
	}
	return s
}

func TestTheSequentialQueryCountsEachPodsRequestsAndErrorsOfTheWaveAndItsControl(t *testing.T) {
	w := wave(member("reviews.v1", pod("reviews-1", "1-26")))
	w.Unmoved = []string{"ratings", "details"}
	g := newSequentialGate(t, nil)
	sel := `reporter="destination",destination_workload_namespace="shop",destination_workload=~"details|ratings|reviews\\.v1"`
	assert.Equal(t,
		`label_replace(sum by (destination_workload, pod, instance) (istio_requests_total{`+sel+`}), "meshwave_series", "requests", "", "")`+
			` or label_replace(sum by (destination_workload, pod, instance) (istio_requests_total{`+sel+`,response_code=~"5.."}), "meshwave_series", "errors", "", "")`,
		g.Query(w))
}

func TestCountersAreCutIntoLooksAcrossResetsAndNewPods(t *testing.T) {
	start := t0
	nan := math.NaN()
	m := model.Matrix{
		// 10 then 5 a look; a reset at step 3 counts its new value.
		counter("a", "a-1", seriesRequests, start, 100, 110, 115, 4, 9),
		// A counter's first sample is its baseline, wherever it comes.
		counter("a", "a-2", seriesRequests, start, nan, nan, 7, 17, 27),
		// A missed scrape: the next sample counts the whole increase.
		counter("a", "a-3", seriesRequests, start, 0, 1, nan, 5, 6),
	}
	inc := increases(m, start, 15*time.Second, 5)
	assert.Equal(t, []float64{0, 10, 5, 4, 5}, inc[seriesKey{"a", "a-1", "", seriesRequests}])
	assert.Equal(t, []float64{0, 0, 0, 10, 10}, inc[seriesKey{"a", "a-2", "", seriesRequests}])
	assert.Equal(t, []float64{0, 1, 0, 4, 1}, inc[seriesKey{"a", "a-3", "", seriesRequests}])
	looks := lookCounts(inc, map[string]bool{"a": true}, 5, seriesRequests, func(kind string) bool { return kind == seriesErrors })
	assert.Equal(t, []sequential.Counts{{}, {Requests: 11}, {Requests: 5}, {Requests: 18}, {Requests: 16}}, looks)
}

// world builds a matrix from History before the restart to steps after
// it: the moved workload and the control serve req requests a look each,
// the control never failing, the moved one failing errBefore of them
// before the restart and errAfter after.
func world(restart time.Time, after int, req, errBefore, errAfter float64) (model.Matrix, promv1.Range) {
	start := restart.Add(-10 * time.Minute)
	steps := 40 + after + 1
	var treq, terr, creq, cerr []float64
	tr, te := 0.0, 0.0
	for k := range steps {
		treq, creq, cerr = append(treq, tr), append(creq, float64(k)*req), append(cerr, 0)
		terr = append(terr, te)
		tr += req
		if k < 40 {
			te += errBefore * req
		} else {
			te += errAfter * req
		}
	}
	m := model.Matrix{
		counter("reviews", "reviews-1", seriesRequests, start, treq...),
		counter("reviews", "reviews-1", seriesErrors, start, terr...),
		counter("ratings", "ratings-1", seriesRequests, start, creq...),
		counter("ratings", "ratings-1", seriesErrors, start, cerr...),
	}
	return m, promv1.Range{Start: start, End: start.Add(time.Duration(steps-1) * 15 * time.Second), Step: 15 * time.Second}
}

func movedWave(ready time.Time) canary.WaveUnderTest {
	w := wave(member("reviews", pod("reviews-1", "1-26")))
	w.Unmoved = []string{"ratings"}
	w.Analysis.ReadyAt = &ready
	return w
}

// The demo's broken revision: 30% of 5xx where the namespace had none. No
// error before the restart bounds the split, so the workload is held to
// its own past, and fails on the second look (the first bets nothing).
func TestAWorkloadServingThirtyPercentErrorsFailsWithTheEvidenceInItsReason(t *testing.T) {
	m, r := world(t0, 4, 30, 0, 0.3)
	prom := &rangeProm{matrix: m}
	g := newSequentialGate(t, prom)
	now := r.End
	v := g.Evaluate(context.Background(), movedWave(t0), now)
	assert.Equal(t, canary.ResultFail, v.Result)
	assert.True(t, v.Final)
	assert.True(t, v.Analysis)
	assert.Equal(t, "reviews: error ratio 30.00% (18/60) against 0.00% (0/1200) before the restart; control: its own error ratio before the restart; evidence 1.04e+08 of 40: fail", v.Reason)
	require.Len(t, v.Failed, 1)
	assert.Equal(t, "reviews", v.Failed[0].Name)
	require.Len(t, v.Measurements, 1)
	assert.Equal(t, canary.Measurement{Check: "error-rate", Workload: "reviews", Value: 0.3, Baseline: ptr(0.0), Evidence: v.Measurements[0].Evidence,
		EvidenceBound: ptr(40.0), Control: "its own error ratio before the restart", Result: canary.ResultFail}, v.Measurements[0])
	assert.Equal(t, []promv1.Range{{Start: t0.Add(-10 * time.Minute), End: now, Step: 15 * time.Second}}, prom.ranges)
}

func TestAHealthyWorkloadPassesOnItsFloorAsSoonAsItsRequestsShowIt(t *testing.T) {
	m, r := world(t0, 20, 300, 0, 0)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), movedWave(t0), r.End)
	assert.Equal(t, canary.ResultPass, v.Result)
	assert.True(t, v.Final, "a pass on evidence needs no other pass")
	assert.Equal(t, "reviews: error ratio 0.00% (0/1500) against 0.00% (0/12000) before the restart; control: its own error ratio before the restart; evidence of health 94.8 of 40: pass", v.Reason)
}

func TestAQuietWorkloadGathersEvidenceThenIsInconclusiveAtTheMaximumDuration(t *testing.T) {
	m, _ := world(t0, 60, 1, 0, 0)
	prom := &rangeProm{matrix: m}
	g := newSequentialGate(t, prom)
	v := g.Evaluate(context.Background(), movedWave(t0), t0.Add(5*time.Minute))
	assert.Equal(t, canary.ResultPending, v.Result)
	assert.True(t, v.Checked)
	assert.Equal(t, 15*time.Second, v.RetryAfter)
	assert.Equal(t, "gathering evidence, 10m0s left: reviews: error ratio 0.00% (0/20) against 0.00% (0/40) before the restart; control: its own error ratio before the restart; evidence 1 of 40", v.Reason)

	v = g.Evaluate(context.Background(), movedWave(t0), t0.Add(16*time.Minute))
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.False(t, v.Final)
	assert.Equal(t, "no verdict 15m0s after the wave was up: reviews: error ratio 0.00% (0/60) against 0.00% (0/40) before the restart; control: its own error ratio before the restart; evidence 1 of 40", v.Reason)
	assert.Equal(t, t0.Add(15*time.Minute), prom.ranges[1].End, "no look past the maximum duration")
}

func TestPrometheusTroubleIsInconclusive(t *testing.T) {
	for _, c := range []struct {
		prom *rangeProm
		want string
	}{
		{&rangeProm{err: errors.New("connection refused")}, "Prometheus did not answer: connection refused"},
		{&rangeProm{warnings: promv1.Warnings{"store eu-1 did not answer"}}, "Prometheus's answer may be incomplete: store eu-1 did not answer"},
	} {
		v := newSequentialGate(t, c.prom).Evaluate(context.Background(), movedWave(t0), t0.Add(2*time.Minute))
		assert.Equal(t, canary.ResultInconclusive, v.Result)
		assert.Equal(t, c.want, v.Reason)
	}
	v := newSequentialGate(t, &rangeProm{}).Evaluate(context.Background(), wave(member("reviews")), t0.Add(2*time.Minute))
	assert.Equal(t, "the wave has no restart or no time it was up to measure from", v.Reason)
}

func TestSequentialSettingsThatCannotWorkAreRefused(t *testing.T) {
	_, err := NewSequentialGate(SequentialErrors{}, sequential.ErrorTest{Alpha: 2}, nil, 1500*time.Millisecond, time.Second, time.Second, -time.Second)
	assert.EqualError(t, err, "check error-rate: alpha 2 is not between 0 and 1\n"+
		"a step of 1.5s is not a whole number of seconds of at least 1s\n"+
		"a query timeout of -1s is negative")
	_, err = NewSequentialGate(SequentialErrors{}, defaultSequential, nil, 15*time.Second, 10*time.Second, time.Hour, 0)
	assert.EqualError(t, err, "check error-rate: a history of 10s is shorter than a step of 15s: there would be no look before the restart")
}
