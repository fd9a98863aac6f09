package analysis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/meshwave/meshwave/analysis/sequential"
	"github.com/meshwave/meshwave/canary"
)

// RangeQuerier runs a PromQL range query. promv1.API satisfies it.
type RangeQuerier interface {
	QueryRange(ctx context.Context, query string, r promv1.Range, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error)
}

var _ RangeQuerier = promv1.API(nil)

// SequentialGate judges each of the wave's workloads by the anytime-valid
// test of package sequential: the share of its requests that went wrong
// (a 5xx answer, or for latency an answer slower than the history's p99)
// against its pods not yet replaced while they serve beside the moved
// ones, else against the history before its restart, looked at after
// every step from the restart on. Each run replays every look from
// Prometheus, the history's and the wave's, so
// the verdict depends on nothing the agent kept: another replica, or the
// same one after a restart, reaches the same one. The first look at which
// a workload's evidence crossed a bound decides it, and later looks do
// not undo that.
type SequentialGate struct {
	// Measure says what went wrong: SequentialErrors or SequentialLatency.
	Measure SequentialMeasure
	// Test is the test each workload runs; its Alpha is the wave's, shared
	// among the workloads.
	Test       sequential.ErrorTest
	Prometheus RangeQuerier
	// Step is the time between two looks: Prometheus's scrape interval, or
	// a multiple of it. The gate runs every Step.
	Step time.Duration
	// History is how long before the restart the control is read from.
	History time.Duration
	// MaxDuration is how long after the wave is up the looks go on; with
	// no verdict by then, the check is Inconclusive.
	MaxDuration time.Duration
	// QueryTimeout bounds one query.
	QueryTimeout time.Duration
	// Cluster keeps a fleet Prometheus's series to this cluster's
	// (QueryParams.Cluster); "" with a Prometheus of one cluster.
	Cluster string
}

// NewSequentialGate validates the settings.
func NewSequentialGate(m SequentialMeasure, t sequential.ErrorTest, q RangeQuerier, step, history, maxDuration, timeout time.Duration) (*SequentialGate, error) {
	var errs []error
	if err := t.Validate(); err != nil {
		errs = append(errs, err)
	}
	if step < time.Second || step%time.Second != 0 {
		errs = append(errs, fmt.Errorf("a step of %s is not a whole number of seconds of at least 1s", step))
	} else {
		for _, d := range []struct {
			what string
			d    time.Duration
		}{{"a history", history}, {"a maximum duration", maxDuration}} {
			lead := time.Duration(LeadInSteps(step))
			if n := d.d / step; n < 2 || n+lead >= MaxRangePoints {
				errs = append(errs, fmt.Errorf("%s of %s is not from two steps of %s to %d of them (a look is a whole step on the epoch's grid; Prometheus answers a range query, five minutes of lead-in included, of at most %d points)", d.what, d.d, step, MaxRangePoints-1-int(lead), MaxRangePoints))
			}
		}
	}
	if timeout < 0 {
		errs = append(errs, fmt.Errorf("a query timeout of %s is negative", timeout))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("check %s: %w", m.Name(), errors.Join(errs...))
	}
	return &SequentialGate{Measure: m, Test: t, Prometheus: q, Step: step, History: history, MaxDuration: maxDuration, QueryTimeout: timeout}, nil
}

// Name implements Gate.
func (g *SequentialGate) Name() string { return g.Measure.Name() }

// Due reports whether Evaluate would query Prometheus now.
func (g *SequentialGate) Due(wave canary.WaveUnderTest, now time.Time) bool {
	_, wait := notDue(wave, g.Name(), g.Step, now)
	return !wait
}

// Evaluate implements Gate. Until the wave is up (every gate before the
// metric checks passed) it waits, as a bake time does.
func (g *SequentialGate) Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	if wave.Analysis.ReadyAt == nil {
		return canary.Verdict{Result: canary.ResultPending, Analysis: true, Deferred: true, RetryAfter: g.Step, Reason: "waiting for the wave to be up"}
	}
	if v, wait := notDue(wave, g.Name(), g.Step, now); wait {
		v.Analysis = true
		return v
	}
	if wave.Ambient {
		return ambientTelemetry(g.Step, modeOf(wave))
	}
	v := g.run(ctx, wave, now)
	v.Analysis, v.Checked = true, true
	if v.RetryAfter == 0 {
		v.RetryAfter = g.Step
	}
	return v
}

// Query is the query a run sends, once over the history and once over
// the wave's looks: the measure's counters of every workload of the
// namespace, every series as Prometheus holds it. Every workload, so that
// the calls between them are seen through those already moved. Nothing is
// summed before the increases are taken, so that a series that goes away
// (a pod, a stat evicted, one of two scrape jobs) never reads as a
// counter reset of a sum.
func (g *SequentialGate) Query(wave canary.WaveUnderTest) string {
	return g.Measure.query(fmt.Sprintf(`reporter="destination",destination_workload_namespace="%s"%s`, promqlString(wave.Namespace), g.Cluster))
}

// MaxRangePoints is the most steps a range query may have: Prometheus refuses
// more than 11,000.
const MaxRangePoints = 11000

// ranges are where a run reads, on a grid of Step from the Unix epoch, as
// query frontends align a range: the history, from History before the
// restart to the last step at or before it, and the looks, from the first
// step at or after the restart to a step before now, so that a scrape of
// the last step is in before it is read, and at most MaxDuration after the
// wave was up (or restarted, if later). The looks start at the restart so
// that those of the rollout, when the moved pods served beside those not
// yet replaced, are counted; a rollout longer than a range query may hold
// loses its first looks. ok is false while no look is complete.
func (g *SequentialGate) ranges(restart, ready, now time.Time) (history, looks promv1.Range, ok bool) {
	down := func(t time.Time) time.Time { return time.Unix(0, t.UnixNano()-mod(t.UnixNano(), int64(g.Step))).UTC() }
	up := func(t time.Time) time.Time {
		if d := down(t); d.Before(t) {
			return d.Add(g.Step)
		}
		return t.UTC()
	}
	history = promv1.Range{Start: up(restart.Add(-g.History)), End: down(restart), Step: g.Step}
	if ready.Before(restart) {
		ready = restart
	}
	end, last := now.Add(-g.Step), ready.Add(g.MaxDuration)
	if end.After(last) {
		end = last
	}
	looks = promv1.Range{Start: up(restart), End: down(end), Step: g.Step}
	// A rollout too long for one query loses its first looks: the same
	// ones at every run, so that every run replays one e-process, never
	// one begun afresh at a later look.
	if first := down(last).Add(-time.Duration(MaxRangePoints-1-g.leadIn()) * g.Step); looks.Start.Before(first) {
		looks.Start = first
	}
	return history, looks, looks.End.After(looks.Start)
}

func mod(a, b int64) int64 { return ((a % b) + b) % b }

// LeadInSteps is how many steps before each range a run also reads:
// Prometheus's five-minute lookback, at least one step. A series with a
// sample there takes it as its baseline, so one that only missed the
// range's first step (a failed scrape) is not taken for a new one.
func LeadInSteps(step time.Duration) int {
	return max(1, int((5*time.Minute+step-1)/step))
}

func (g *SequentialGate) leadIn() int { return LeadInSteps(g.Step) }

// withLeadIn is r begun leadIn steps earlier.
func (g *SequentialGate) withLeadIn(r promv1.Range) promv1.Range {
	r.Start = r.Start.Add(-time.Duration(g.leadIn()) * r.Step)
	return r
}

func (g *SequentialGate) run(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	restart, ready := restartOf(wave), *wave.Analysis.ReadyAt
	if restart.IsZero() {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "the wave has no restart to measure from"}
	}
	// A wave up before its restart (a member moved again) is looked at
	// from the restart: the maximum duration too.
	if ready.Before(restart) {
		ready = restart
	}
	// A time the wave was up that lies ahead (an edited status) would make
	// it wait without end: the looks start at the restart instead.
	if ready.After(now) {
		ready = restart
	}
	hr, lr, ok := g.ranges(restart, ready, now)
	switch {
	case !ok && !now.Before(ready.Add(g.MaxDuration)):
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: fmt.Sprintf("no look within %s after the wave was up", g.MaxDuration)}
	case !ok:
		return canary.Verdict{Result: canary.ResultPending, Reason: "waiting for the first look"}
	}
	q := g.Query(wave)
	if g.QueryTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.QueryTimeout)
		defer cancel()
	}
	var ms [2]model.Matrix
	for i, r := range []promv1.Range{hr, lr} {
		m, v := g.query(ctx, q, g.withLeadIn(r))
		if v != nil {
			return *v
		}
		ms[i] = m
	}
	return g.Judge(wave, ms[0], hr, ms[1], lr, ready, now)
}

// query runs one range query; a verdict when it failed.
func (g *SequentialGate) query(ctx context.Context, q string, r promv1.Range) (model.Matrix, *canary.Verdict) {
	return ask[model.Matrix](ctx, g.Name(), q, func(ctx context.Context) (model.Value, promv1.Warnings, error) {
		val, warnings, _, err := g.Prometheus.QueryRange(ctx, q, r)
		return val, warnings, err
	})
}

// counter is one series of a matrix, cut into what it counted in each
// look: look k (1 ≤ k < steps) is the time from step k-1 to step k.
type counter struct {
	workload, caller string
	// pod is the pod the series was scraped from, as Istio's pod
	// relabelling names it; "" without it. instance is the address it was
	// scraped at, "" without it: a pod recreated under the same name is
	// usually scraped at another.
	pod, instance string
	// resets are the steps of the range (0 the first) at which the
	// counter went down: its proxy started again.
	resets []int
	// first is the time of the series' first sample, the lead-in's
	// included; zero without one.
	first time.Time
	// code and le are the series' response code and histogram bound.
	code, le string
	looks    []float64
	// sampled is whether the series has a sample in the range.
	sampled bool
	// group names the series' labels but its histogram bound: a
	// histogram's buckets share it.
	group string
}

// increases cuts each series of the matrix into looks. A sample is put at
// the step nearest its time; the lead steps before the range (its lead-in)
// only set a baseline. A counter that went down was reset, and counted its
// new value. A series first seen at the range's first step counts from
// there. One first seen later, with no sample in the lead-in either, began
// then and counts its first value: Istio's proxies create a series at the
// first request with its labels, so a new pod's series, and the series of
// a response code not answered before, begin with what they counted. A
// series relabelled inside the range (a Prometheus that writes le="100.0"
// after an upgrade) looks new, and its whole count lands in one look.
func increases(m model.Matrix, r promv1.Range, lead int) []counter {
	steps := int(r.End.Sub(r.Start)/r.Step) + 1
	var out []counter
	for _, s := range m {
		if s == nil {
			continue
		}
		c := counter{workload: string(s.Metric["destination_workload"]), caller: string(s.Metric["source_workload"]),
			pod: string(s.Metric["pod"]), instance: string(s.Metric["instance"]), code: string(s.Metric["response_code"]), le: string(s.Metric["le"]), looks: make([]float64, steps)}
		if c.le != "" {
			g := s.Metric.Clone()
			delete(g, "le")
			c.group = g.String()
		}
		last, seen := 0.0, false
		for _, p := range s.Values {
			k := int(math.Round(float64(p.Timestamp.Time().Sub(r.Start)) / float64(r.Step)))
			v := float64(p.Value)
			if k < -lead || k >= steps || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				continue
			}
			switch {
			case k < 0:
			case seen && v >= last:
				c.looks[k] += v - last
			case seen:
				c.looks[k] += v
				c.resets = append(c.resets, k)
			case k > 0:
				c.looks[k] += v
			}
			if k >= 0 {
				c.sampled = true
			}
			if !seen {
				c.first = p.Timestamp.Time()
			}
			last, seen = v, true
		}
		out = append(out, c)
	}
	return out
}

// related are the workloads whose errors the named ones can move, as the
// source_workload labels of the series with samples say: those they call,
// directly or through others (a callee can fail on what a broken caller
// sends it), and every caller, direct or not, of them or of those callees
// (a caller inherits the errors of what it calls). None can be their
// control. Two workloads that share a caller are not related by it.
func related(counters []counter, of map[string]bool) map[string]bool {
	callers, callees := map[string][]string{}, map[string][]string{}
	for _, c := range counters {
		if c.sampled && c.caller != "" && c.caller != c.workload {
			callers[c.workload] = append(callers[c.workload], c.caller)
			callees[c.caller] = append(callees[c.caller], c.workload)
		}
	}
	reach := func(from map[string]bool, next map[string][]string) map[string]bool {
		seen := maps.Clone(from)
		queue := slices.Sorted(maps.Keys(from))
		for len(queue) > 0 {
			w := queue[0]
			queue = queue[1:]
			for _, n := range next[w] {
				if !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
		return seen
	}
	out := reach(reach(of, callees), callers)
	for n := range of {
		delete(out, n)
	}
	return out
}

// workloadEvidence is how one workload's test ended, or stands.
type workloadEvidence struct {
	name     string
	noun     string // what the ratio is of: "error ratio"
	decision sequential.Decision
	// evidence and bound: against a healthy workload, as natural logs;
	// health and healthBound against an unhealthy one.
	evidence, bound     float64
	health, healthBound float64
	control             sequential.Control
	treatment           sequential.Counts // from the restart to the decision
	controlAfter        sequential.Counts
	before, others      sequential.Counts // before the restart
	// The looks held to the workload's pods not yet replaced, and what
	// its moved pods and those served in them.
	oldLooks          int
	oldTreatment, old sequential.Counts
	// leftOut are the requests of the workload's pods that could not be
	// told apart, in neither arm.
	leftOut float64
	err     error
}

// Judge replays, for each of the wave's workloads, the looks of the
// history's matrix and then of the looks' matrix (range queries over hr
// and lr), and gives the wave's verdict: a fail when any workload failed,
// a final pass when every one passed, Inconclusive once MaxDuration is
// over with neither, and Pending before. A look in which a workload's
// pods not yet replaced served beside its moved ones is held to them
// (splitOld); every other look to the history's control: the workloads not
// yet moved that neither call one of the wave's nor are called by one,
// directly or not, as the history shows: the control is chosen from the
// history alone, so later looks never change it.
func (g *SequentialGate) Judge(wave canary.WaveUnderTest, hm model.Matrix, hr promv1.Range, lm model.Matrix, lr promv1.Range, ready, now time.Time) canary.Verdict {
	hist, looks := increases(hm, hr, g.leadIn()), increases(lm, lr, g.leadIn())
	count, noun, err := g.Measure.prepare(hist)
	if err != nil {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: err.Error()}
	}
	members := map[string]bool{}
	for _, w := range wave.Workloads {
		members[w.ObjectName()] = true
	}
	linked := related(hist, members)
	others := map[string]bool{}
	for _, n := range wave.Unmoved {
		if !linked[n] {
			others[n] = true
		}
	}
	histControl, lookControl := count(hist, others), count(looks, others)
	// Series without a pod label are the moved pods' once the wave was
	// up; a time it was up that lies ahead (an edited status, another
	// replica's clock) is not yet.
	up := ready
	if at := wave.Analysis.ReadyAt; at != nil && at.After(now) {
		up = now
	}
	test := g.Test.Split(len(wave.Workloads))
	var results []workloadEvidence
	for _, w := range wave.Workloads {
		me := map[string]bool{w.ObjectName(): true}
		moved, old, neither := splitOld(looks, lr, w, wave.Expect, restartOf(wave), up, hist)
		ev := g.replay(test, w.Name, count(hist, me), histControl, count(moved, me), count(old, me), count(neither, me), lookControl)
		ev.noun = noun
		results = append(results, ev)
	}
	return g.verdict(wave, results, test, ready, now)
}

// replay runs one workload's test: the history's looks, then the wave's.
// The first step of each range is its baseline and counts nothing.
func (g *SequentialGate) replay(test sequential.ErrorTest, name string, histT, histC, lookT, lookOld, lookNeither, lookC []sequential.Counts) workloadEvidence {
	out := workloadEvidence{name: name}
	var history []sequential.Look
	for k := 1; k < len(histT); k++ {
		history = append(history, sequential.Look{Treatment: histT[k], Control: histC[k]})
		out.before = out.before.Add(histT[k])
		out.others = out.others.Add(histC[k])
	}
	e, err := test.StartAgainstHistory(history)
	if err != nil {
		out.err = err
		return out
	}
	out.control = e.Control()
	for k := 1; k < len(lookT); k++ {
		l := sequential.Look{Treatment: lookT[k], Control: lookC[k]}
		if k < len(lookOld) {
			l.Own = lookOld[k]
		}
		if k < len(lookNeither) {
			out.leftOut += lookNeither[k].Requests
		}
		if err := e.Observe(l); err != nil {
			out.err = err
			return out
		}
		if out.decision = e.Decision(); out.decision != sequential.Continue {
			break
		}
	}
	out.evidence, out.bound = e.FailEvidence()
	out.health, out.healthBound = e.HealthEvidence()
	out.treatment, out.controlAfter = e.Totals()
	out.oldLooks, out.oldTreatment, out.old = e.OwnLooks()
	return out
}

func (g *SequentialGate) verdict(wave canary.WaveUnderTest, results []workloadEvidence, test sequential.ErrorTest, ready, now time.Time) canary.Verdict {
	var fails, unsure, oks []string
	var failed []canary.WorkloadState
	var measures []canary.Measurement
	over := !now.Before(ready.Add(g.MaxDuration))
	for _, w := range results {
		if w.err != nil {
			unsure = append(unsure, w.name+": "+w.err.Error())
			continue
		}
		why := describe(w)
		meas := canary.Measurement{Check: g.Name(), Workload: w.name, Value: ratio(w.treatment), Baseline: ptr(ratio(w.before)),
			Evidence: ptr(finiteExp(w.evidence)), EvidenceBound: ptr(finiteExp(w.bound)), Control: w.controlName()}
		switch w.decision {
		case sequential.Fail:
			meas.Result = canary.ResultFail
			fails = append(fails, w.name+": "+why+": fail")
			failed = append(failed, canary.WorkloadState{Name: w.name, State: canary.StateFailed, Reason: g.Name() + " " + why})
		case sequential.Pass:
			meas.Result = canary.ResultPass
			oks = append(oks, w.name+": "+why+": pass")
		default:
			meas.Result = canary.ResultPending
			if over {
				meas.Result = canary.ResultInconclusive
			}
			unsure = append(unsure, w.name+": "+why)
		}
		measures = append(measures, meas)
	}
	sort.SliceStable(measures, func(i, j int) bool { return rank[measures[i].Result] < rank[measures[j].Result] })
	share := ""
	if len(results) > 1 {
		share = fmt.Sprintf(" (α %g shared by %d workloads)", g.Test.Alpha, len(results))
	}
	switch {
	case len(fails) > 0:
		return canary.Verdict{Result: canary.ResultFail, Reason: strings.Join(fails, "; ") + share, Failed: failed, Measurements: measures, Final: true}
	case len(unsure) == 0 && len(oks) > 0:
		return canary.Verdict{Result: canary.ResultPass, Reason: strings.Join(oks, "; ") + share, Measurements: measures, Final: true}
	case len(oks) == 0 && len(unsure) == 0:
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "no workload to check", Measurements: measures}
	case over:
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: fmt.Sprintf("no verdict %s after the wave was up: %s%s", g.MaxDuration, strings.Join(unsure, "; "), share), Measurements: measures}
	}
	left := ready.Add(g.MaxDuration).Sub(now).Round(time.Second)
	return canary.Verdict{Result: canary.ResultPending, Reason: fmt.Sprintf("gathering evidence, %s left: %s%s", left, strings.Join(unsure, "; "), share), Measurements: measures}
}

// describe says what one workload's evidence stands on: its error ratio
// from the restart, the control's, and the evidence against its bound:
// of health for a pass, of harm otherwise.
func describe(w workloadEvidence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", w.noun, counts(w.treatment))
	if w.leftOut > 0 {
		fmt.Fprintf(&b, " (%.0f requests of pods not told apart left out)", w.leftOut)
	}
	if w.heldToOld() {
		fmt.Fprintf(&b, ", %s of it against its pods not yet replaced's %s in the %d looks both served,", counts(w.oldTreatment), counts(w.old), w.oldLooks)
	}
	switch w.control {
	case sequential.Others:
		fmt.Fprintf(&b, " against the control's %s, %s and %s before the restart", counts(w.controlAfter), counts(w.before), counts(w.others))
	case sequential.Past:
		fmt.Fprintf(&b, " against %s before the restart", counts(w.before))
	default:
		fmt.Fprintf(&b, " against the control's %s", counts(w.controlAfter))
	}
	fmt.Fprintf(&b, "; control: %s; ", w.controlName())
	if w.decision == sequential.Pass {
		fmt.Fprintf(&b, "evidence of health %.3g of %.3g", finiteExp(w.health), finiteExp(w.healthBound))
	} else {
		fmt.Fprintf(&b, "evidence %.3g of %.3g", finiteExp(w.evidence), finiteExp(w.bound))
	}
	return b.String()
}

// heldToOld reports whether the old pods were a control of the verdict:
// of the fail side only, so never of a pass.
func (w workloadEvidence) heldToOld() bool {
	return w.oldLooks > 0 && w.decision != sequential.Pass
}

// controlName says what the workload was held against: its pods not yet
// replaced for the looks in which they served, the history's control for
// the others.
func (w workloadEvidence) controlName() string {
	if !w.heldToOld() {
		return w.control.String()
	}
	return fmt.Sprintf("%s in %d looks, else %s", sequential.Concurrent, w.oldLooks, w.control)
}

// counts writes an arm's error ratio and what it stands on: 31.00% (93/300).
func counts(c sequential.Counts) string {
	return fmt.Sprintf("%.2f%% (%.0f/%.0f)", 100*ratio(c), c.Errors, c.Requests)
}

func ratio(c sequential.Counts) float64 {
	if c.Requests <= 0 {
		return 0
	}
	return c.Errors / c.Requests
}

// finiteExp is e^v as the status can hold it: JSON has no infinity.
func finiteExp(v float64) float64 {
	e := math.Exp(v)
	if math.IsInf(e, 1) || math.IsNaN(e) {
		return math.MaxFloat64
	}
	return e
}
