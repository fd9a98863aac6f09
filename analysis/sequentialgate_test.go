package analysis

import (
	"context"
	"errors"
	"math"
	"strings"
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
	matrix model.Matrix
	// forRange, when set, answers instead of matrix.
	forRange func(promv1.Range) model.Matrix
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
	if f.forRange != nil {
		return f.forRange(r), f.warnings, nil, nil
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

// sampled is one pod's counter of one response code, sampled at every
// step from start: values[k] at start + k·step; NaN leaves a step out.
func sampled(workload, pod, code string, start time.Time, values ...float64) *model.SampleStream {
	s := &model.SampleStream{Metric: model.Metric{"__name__": "istio_requests_total", "destination_workload": model.LabelValue(workload), "pod": model.LabelValue(pod),
		"response_code": model.LabelValue(code), "source_workload": "loadgenerator"}}
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
	assert.Equal(t, `istio_requests_total{reporter="destination",destination_workload_namespace="shop"}`, g.Query(w),
		"every workload of the namespace: the calls between them are seen through those already moved")
}

func TestCountersAreCutIntoLooksAcrossResetsAndNewPods(t *testing.T) {
	start := t0
	nan := math.NaN()
	m := model.Matrix{
		// 10 then 5 a look; a reset at step 3 counts its new value.
		sampled("a", "a-1", "200", start, 100, 110, 115, 4, 9),
		// A series first seen after the first step began then: Istio
		// creates it at its first request of those labels.
		sampled("a", "a-2", "503", start, nan, nan, 7, 17, 27),
		// A missed scrape: the next sample counts the whole increase.
		sampled("a", "a-3", "200", start, 0, 1, nan, 5, 6),
	}
	// A sample a second off the grid (a query frontend's own alignment)
	// is put at the nearest step.
	m[2].Values[3].Timestamp = m[2].Values[3].Timestamp.Add(time.Second)
	cs := increases(m, promv1.Range{Start: start, End: start.Add(4 * 15 * time.Second), Step: 15 * time.Second}, 0)
	require.Len(t, cs, 3)
	assert.Equal(t, []float64{0, 10, 5, 4, 5}, cs[0].looks)
	assert.Equal(t, []float64{0, 0, 7, 10, 10}, cs[1].looks)
	assert.Equal(t, []float64{0, 1, 0, 4, 1}, cs[2].looks)
	looks, _, err := SequentialErrors{}.prepare(nil)
	require.NoError(t, err)
	assert.Equal(t, []sequential.Counts{{}, {Requests: 11}, {Requests: 12, Errors: 7}, {Requests: 18, Errors: 10}, {Requests: 16, Errors: 10}},
		looks(cs, map[string]bool{"a": true}))
}

// world builds a matrix from History before the restart to steps after
// it: the moved workload and the control serve req requests a look each,
// the control never failing, the moved one failing errBefore of them
// before the restart and errAfter after.
func world(restart time.Time, after int, req, errBefore, errAfter float64) (model.Matrix, promv1.Range) {
	start := restart.Add(-10 * time.Minute)
	steps := 40 + after + 1
	var tok, terr, cok []float64
	ok, bad := 0.0, 0.0
	for k := range steps {
		tok, terr, cok = append(tok, ok), append(terr, bad), append(cok, float64(k)*req)
		e := errBefore
		if k >= 40 {
			e = errAfter
		}
		ok += req * (1 - e)
		bad += req * e
	}
	m := model.Matrix{
		sampled("reviews", "reviews-1", "200", start, tok...),
		sampled("reviews", "reviews-1", "503", start, terr...),
		sampled("ratings", "ratings-1", "200", start, cok...),
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
	assert.Equal(t, []promv1.Range{{Start: t0.Add(-15 * time.Minute), End: t0, Step: 15 * time.Second}, {Start: t0.Add(-5 * time.Minute), End: now.Add(-15 * time.Second), Step: 15 * time.Second}}, prom.ranges,
		"the history, then the looks, each with five minutes of lead-in, the looks to a step before now")
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
	assert.Equal(t, "gathering evidence, 10m0s left: reviews: error ratio 0.00% (0/19) against 0.00% (0/40) before the restart; control: its own error ratio before the restart; evidence 1 of 40", v.Reason)

	v = g.Evaluate(context.Background(), movedWave(t0), t0.Add(16*time.Minute))
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.False(t, v.Final)
	assert.Equal(t, "no verdict 15m0s after the wave was up: reviews: error ratio 0.00% (0/60) against 0.00% (0/40) before the restart; control: its own error ratio before the restart; evidence 1 of 40", v.Reason)
	assert.Equal(t, t0.Add(15*time.Minute), prom.ranges[3].End, "no look past the maximum duration")
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
	assert.Equal(t, canary.Verdict{Result: canary.ResultPending, Analysis: true, Deferred: true, RetryAfter: 15 * time.Second, Reason: "waiting for the wave to be up"}, v,
		"before the wave is up the check waits, as a bake time does: it is not an inconclusive run")
}

func TestSequentialSettingsThatCannotWorkAreRefused(t *testing.T) {
	_, err := NewSequentialGate(SequentialErrors{}, sequential.ErrorTest{Alpha: 2}, nil, 1500*time.Millisecond, time.Second, time.Second, -time.Second)
	assert.EqualError(t, err, "check error-rate: alpha 2 is not from 1e-12 up to 1, 1 not included\n"+
		"a step of 1.5s is not a whole number of seconds of at least 1s\n"+
		"a query timeout of -1s is negative")
	_, err = NewSequentialGate(SequentialErrors{}, defaultSequential, nil, 15*time.Second, 10*time.Second, 50*time.Hour, 0)
	assert.EqualError(t, err, "check error-rate: a history of 10s is not from two steps of 15s to 10979 of them (a look is a whole step on the epoch's grid; Prometheus answers a range query, five minutes of lead-in included, of at most 11000 points)\n"+
		"a maximum duration of 50h0m0s is not from two steps of 15s to 10979 of them (a look is a whole step on the epoch's grid; Prometheus answers a range query, five minutes of lead-in included, of at most 11000 points)")
}

// cumulative is a counter that adds before a look up to look 40 (the
// restart, 10 minutes after start) and after a look from then on.
func cumulative(steps int, before, after float64) []float64 {
	out := make([]float64, steps)
	for k := 1; k < steps; k++ {
		add := after
		if k <= 40 {
			add = before
		}
		out[k] = out[k-1] + add
	}
	return out
}

// productpage calls reviews once a request; both served 1% errors before
// the restart. Reviews' new revision fails 30% of its requests, and
// productpage answers those with 5xx in turn. A caller inherits what it
// calls: it is not reviews' control, and reviews, held to its own past,
// fails rather than passing on a split that did not move.
func TestACallerOfTheMovedWorkloadIsNotItsControl(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 40+4+1
	caller := func(s *model.SampleStream) *model.SampleStream { s.Metric["source_workload"] = "productpage"; return s }
	m := model.Matrix{
		caller(sampled("reviews", "reviews-1", "200", start, cumulative(steps, 2970, 2100)...)),
		caller(sampled("reviews", "reviews-1", "503", start, cumulative(steps, 30, 900)...)),
		sampled("productpage", "productpage-1", "200", start, cumulative(steps, 2970, 2080)...),
		sampled("productpage", "productpage-1", "503", start, cumulative(steps, 30, 920)...),
	}
	w := movedWave(t0)
	w.Unmoved = []string{"productpage"}
	v := newSequentialGate(t, &rangeProm{matrix: m}).Evaluate(context.Background(), w, start.Add(time.Duration(steps-1)*15*time.Second))
	assert.Equal(t, canary.ResultFail, v.Result, v.Reason)
	assert.Contains(t, v.Reason, "control: its own error ratio before the restart")
}

// One of ratings' series leaves Prometheus mid-history (a stat evicted,
// one of two scrape jobs failing). Taken series by series, nothing reads
// as a counter reset, and reviews, unchanged like every workload, is not
// failed.
func TestASeriesThatLeavesDoesNotReadAsAResetOfItsWorkload(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 40+8+1
	gone := sampled("ratings", "ratings-1", "500", start, cumulative(steps, 30, 30)...)
	gone.Values = gone.Values[:20]
	m := model.Matrix{
		sampled("reviews", "reviews-1", "200", start, cumulative(steps, 2970, 2970)...),
		sampled("reviews", "reviews-1", "503", start, cumulative(steps, 30, 30)...),
		sampled("ratings", "ratings-1", "200", start, cumulative(steps, 2970, 2970)...),
		sampled("ratings", "ratings-1", "503", start, cumulative(steps, 30, 30)...),
		gone,
	}
	v := newSequentialGate(t, &rangeProm{matrix: m}).Evaluate(context.Background(), movedWave(t0), start.Add(time.Duration(steps-1)*15*time.Second))
	assert.NotEqual(t, canary.ResultFail, v.Result, v.Reason)
}

// The ranges are on a grid of the step from the Unix epoch, as a query
// frontend aligns them, whatever the step; the looks begin at the
// restart, so that the rollout's are counted, never before it, and end
// MaxDuration after the wave is up.
func TestTheRangesAreOnTheEpochsGridAndTheLooksBeginAtTheRestart(t *testing.T) {
	g, err := NewSequentialGate(SequentialErrors{}, defaultSequential, nil, 7*time.Second, 10*time.Minute, 15*time.Minute, 0)
	require.NoError(t, err)
	restart := time.Unix(1_800_000_003, 0).UTC()
	h, l, ok := g.ranges(restart, restart.Add(20*time.Second), restart.Add(time.Minute))
	require.True(t, ok)
	for _, at := range []time.Time{h.Start, h.End, l.Start, l.End} {
		assert.Zero(t, at.Unix()%7, "%s is on the grid", at)
	}
	assert.Equal(t, time.Unix(1_800_000_003-600+1, 0).UTC(), h.Start, "the first step in the history")
	assert.Equal(t, time.Unix(1_799_999_999, 0).UTC(), h.End, "the last step at or before the restart")
	assert.Equal(t, time.Unix(1_800_000_006, 0).UTC(), l.Start, "the first step at or after the restart")
	assert.Equal(t, time.Unix(1_800_000_055, 0).UTC(), l.End, "a step before now")

	_, l, _ = g.ranges(restart, restart.Add(-time.Hour), restart.Add(time.Minute))
	assert.Equal(t, time.Unix(1_800_000_006, 0).UTC(), l.Start, "a wave up before its restart is read from its restart")

	ready := restart.Add(time.Hour)
	_, l, _ = g.ranges(restart, ready, ready.Add(time.Hour))
	assert.Equal(t, time.Unix(1_800_004_500, 0).UTC(), l.End, "the last step at or before MaxDuration after the wave was up")
}

// A rollout longer than a range query can hold (11,000 steps, the lead-in
// included) loses its first looks, never its last, and the same ones at
// every run: each run replays one e-process from the same first look.
func TestALongRolloutsLooksFitOneRangeQuery(t *testing.T) {
	g, err := NewSequentialGate(SequentialErrors{}, defaultSequential, nil, time.Second, 10*time.Minute, 15*time.Minute, 0)
	require.NoError(t, err)
	restart := time.Unix(1_800_000_000, 0).UTC()
	ready := restart.Add(5 * time.Hour)
	_, l, ok := g.ranges(restart, ready, ready.Add(time.Hour))
	require.True(t, ok)
	assert.Equal(t, ready.Add(15*time.Minute), l.End, "the last look MaxDuration after the wave was up")
	assert.Equal(t, MaxRangePoints-LeadInSteps(time.Second), int(l.End.Sub(l.Start)/l.Step)+1, "steps in the looks' range")
	_, early, ok := g.ranges(restart, ready, ready.Add(time.Minute))
	require.True(t, ok)
	assert.Equal(t, l.Start, early.Start, "a run a minute after the wave was up reads from the same first look")
	assert.Equal(t, ready.Add(time.Minute-time.Second), early.End)
}

// Five members gathering evidence are listed before the one that failed:
// the failure's measurement comes first, and so survives the status's
// trimming.
func TestAFailedWorkloadsMeasurementComesFirst(t *testing.T) {
	pending := workloadEvidence{name: "a", noun: "error ratio", decision: sequential.Continue}
	failed := workloadEvidence{name: "f", noun: "error ratio", decision: sequential.Fail}
	g := newSequentialGate(t, nil)
	v := g.verdict(wave(), []workloadEvidence{pending, pending, pending, pending, pending, failed}, defaultSequential, t0, t0.Add(time.Minute))
	require.Equal(t, canary.ResultFail, v.Result)
	assert.Equal(t, "f", v.Measurements[0].Workload)
}

// reviews' new revision sends bad requests that make ratings, which it
// calls, fail as often as reviews does: a callee is not reviews' control
// either. A workload that calls reviews only after the restart was chosen
// before: the history alone chooses the control, and a later caller never
// changes a decided verdict.
func TestACalleeIsNotTheControlAndALaterCallerChangesNothing(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 40+6+1
	from := func(s *model.SampleStream, caller string) *model.SampleStream {
		s.Metric["source_workload"] = model.LabelValue(caller)
		return s
	}
	m := model.Matrix{
		sampled("reviews", "reviews-1", "200", start, cumulative(steps, 2970, 2400)...),
		sampled("reviews", "reviews-1", "503", start, cumulative(steps, 30, 600)...),
		from(sampled("ratings", "ratings-1", "200", start, cumulative(steps, 2970, 2400)...), "reviews"),
		from(sampled("ratings", "ratings-1", "503", start, cumulative(steps, 30, 600)...), "reviews"),
		sampled("details", "details-1", "200", start, cumulative(steps, 2970, 2970)...),
		sampled("details", "details-1", "503", start, cumulative(steps, 30, 30)...),
	}
	w := movedWave(t0)
	w.Unmoved = []string{"details", "ratings"}
	end := start.Add(time.Duration(steps-1) * 15 * time.Second)
	v := newSequentialGate(t, &rangeProm{matrix: m}).Evaluate(context.Background(), w, end)
	assert.Equal(t, canary.ResultFail, v.Result, v.Reason)
	assert.Contains(t, v.Reason, "against the control's 1.00% (", "details alone is the control")

	// details starts calling reviews at the fourth look after the restart.
	late := sampled("reviews", "reviews-1", "200", start, cumulative(steps, 0, 10)...)
	late.Metric["source_workload"] = "details"
	late.Values = late.Values[44:]
	again := newSequentialGate(t, &rangeProm{matrix: append(m, late)}).Evaluate(context.Background(), w, end)
	assert.Equal(t, v.Result, again.Result)
	assert.Contains(t, again.Reason, "against the control's 1.00% (")
}

// Istio creates a pod's series of a response code at its first request of
// it: a new pod's 503 series begins with its first errors, and they count.
func TestTheFirstErrorsOfANewPodsSeriesCount(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 40+3+1
	errs := sampled("reviews", "reviews-2", "503", start, cumulative(steps, 0, 6)...)
	errs.Values = errs.Values[41:] // created at its first 503, after the restart
	m := model.Matrix{
		sampled("reviews", "reviews-1", "200", start, cumulative(steps, 1000, 994)...),
		errs,
	}
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: start.Add(time.Duration(steps-1) * 15 * time.Second), Step: 15 * time.Second}
	looks := increases(m, lr, 20)
	count, _, err := SequentialErrors{}.prepare(increases(m, hr, 20))
	require.NoError(t, err)
	assert.Equal(t, []sequential.Counts{{Requests: 1000}, {Requests: 1000, Errors: 6}, {Requests: 1000, Errors: 6}, {Requests: 1000, Errors: 6}}, count(looks, map[string]bool{"reviews": true}),
		"the first look has the 503 series' first value (step 0, from the lead-in, is the baseline the replay skips)")
}

// A wave up before its restart is looked at from the restart, its maximum
// duration too; a maximum duration over with no look is Inconclusive,
// never a wait without end.
func TestTheMaximumDurationCountsFromTheFirstPossibleLook(t *testing.T) {
	m, _ := world(t0, 8, 30, 0, 0)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	w := movedWave(t0.Add(-time.Hour))
	v := g.Evaluate(context.Background(), w, t0.Add(time.Minute))
	assert.Equal(t, canary.ResultPending, v.Result, v.Reason)
	assert.True(t, strings.HasPrefix(v.Reason, "gathering evidence, 14m0s left: "), v.Reason)

	short, err := NewSequentialGate(SequentialErrors{}, defaultSequential, &rangeProm{matrix: m}, 15*time.Second, 10*time.Minute, 30*time.Second, 0)
	require.NoError(t, err)
	off := t0.Add(7 * time.Second)
	v = short.Evaluate(context.Background(), movedWave(off), off.Add(time.Hour))
	assert.NotEqual(t, canary.ResultPending, v.Result, "%s: %s", v.Result, v.Reason)
}

// An old pod whose scrape failed at the history's first step keeps its
// baseline from the lead-in: its lifetime is not one look.
func TestASeriesMissingOnlyAtARangesFirstStepKeepsItsBaselineFromTheLeadIn(t *testing.T) {
	start := t0.Add(-15 * time.Minute) // the history's lead-in
	steps := 20 + 40 + 1
	life := func(before float64) []float64 {
		out := cumulative(steps, before, before)
		for i := range out {
			out[i] += 1e7 // counted before the lead-in
		}
		return out
	}
	s := sampled("reviews", "reviews-1", "200", start, life(3000)...)
	s.Values = append(s.Values[:20:20], s.Values[21:]...) // the history's first step is missing
	hr := promv1.Range{Start: t0.Add(-10 * time.Minute), End: t0, Step: 15 * time.Second}
	cs := increases(model.Matrix{s}, hr, 20)
	total := 0.0
	for _, v := range cs[0].looks {
		total += v
	}
	assert.Equal(t, 41*3000.0, total, "forty looks of 3000, the missed step's own in the next, not ten million in one")
}

// reviews' new revision breaks ratings, which details calls too: details'
// errors rise with ratings', so a caller of a callee is no control either.
// productpage calls ratings through reviews' earlier-moved sibling v1:
// the calls are read over the whole namespace, moved workloads included.
func TestCallersOfACalleeAndCallsThroughMovedWorkloadsLeaveTheControl(t *testing.T) {
	edge := func(dest, caller string) counter {
		return counter{workload: dest, caller: caller, sampled: true}
	}
	got := related([]counter{
		edge("ratings", "reviews-v2"), edge("ratings", "details"),
		edge("reviews-v1", "productpage"), edge("ratings", "reviews-v1"),
		edge("reviews-v2", "loadgenerator"), edge("cart", "loadgenerator"),
	}, map[string]bool{"reviews-v2": true})
	assert.Equal(t, map[string]bool{"ratings": true, "details": true, "reviews-v1": true, "productpage": true, "loadgenerator": true}, got,
		"cart shares only a caller with reviews-v2, and stays a control")
}

// An edited status that puts the time the wave was up ahead of now does
// not make the check wait without end: the looks start at the restart.
func TestATimeTheWaveWasUpAheadOfNowIsReadFromTheRestart(t *testing.T) {
	m, _ := world(t0, 80, 30, 0, 0)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), movedWave(t0.Add(time.Hour)), t0.Add(16*time.Minute))
	assert.Equal(t, canary.ResultPass, v.Result, v.Reason)
	assert.Equal(t, "reviews: error ratio 0.00% (0/1140) against 0.00% (0/1200) before the restart; control: its own error ratio before the restart; evidence of health 42.3 of 40: pass", v.Reason,
		"the looks from the restart were read")
}
