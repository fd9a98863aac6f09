package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
// against the history before its restart, looked at after every step.
// Each run
// replays every look from Prometheus, the history's and the wave's, so
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
}

// NewSequentialGate validates the settings.
func NewSequentialGate(m SequentialMeasure, t sequential.ErrorTest, q RangeQuerier, step, history, maxDuration, timeout time.Duration) (*SequentialGate, error) {
	var errs []error
	if err := t.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case step < time.Second || step%time.Second != 0:
		errs = append(errs, fmt.Errorf("a step of %s is not a whole number of seconds of at least 1s", step))
	case history < step:
		errs = append(errs, fmt.Errorf("a history of %s is shorter than a step of %s: there would be no look before the restart", history, step))
	case maxDuration < step:
		errs = append(errs, fmt.Errorf("a maximum duration of %s is shorter than a step of %s: there would be no look", maxDuration, step))
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

// Evaluate implements Gate.
func (g *SequentialGate) Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	if v, wait := notDue(wave, g.Name(), g.Step, now); wait {
		v.Analysis = true
		return v
	}
	v := g.run(ctx, wave, now)
	v.Analysis, v.Checked = true, true
	if v.RetryAfter == 0 {
		v.RetryAfter = g.Step
	}
	return v
}

// Query is the one range query a run sends: per workload and per pod,
// the counters of the measure. Per pod, so that a pod that goes away and
// one that starts do not read as a counter reset of their workload.
func (g *SequentialGate) Query(wave canary.WaveUnderTest) string {
	names := slices.Clone(wave.Unmoved)
	for _, m := range wave.Workloads {
		names = append(names, m.ObjectName())
	}
	for i, n := range names {
		names[i] = regexp.QuoteMeta(n)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	selector := fmt.Sprintf(`reporter="destination",destination_workload_namespace="%s",destination_workload=~"%s"`,
		promqlString(wave.Namespace), promqlString(strings.Join(names, "|")))
	return g.Measure.query(selector, "destination_workload, pod, instance")
}

// looksWindow is where a run reads: the steps from History before the
// restart to MaxDuration after the wave was up, or now.
func (g *SequentialGate) window(wave canary.WaveUnderTest, now time.Time) (restart, ready time.Time, r promv1.Range, ok bool) {
	restart = restartOf(wave)
	if wave.Analysis.ReadyAt == nil || restart.IsZero() {
		return restart, ready, r, false
	}
	ready = *wave.Analysis.ReadyAt
	end := now
	if last := ready.Add(g.MaxDuration); end.After(last) {
		end = last
	}
	start := restart.Add(-g.History).Truncate(g.Step)
	return restart, ready, promv1.Range{Start: start, End: end, Step: g.Step}, true
}

func (g *SequentialGate) run(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	restart, ready, r, ok := g.window(wave, now)
	if !ok {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "the wave has no restart or no time it was up to measure from"}
	}
	q := g.Query(wave)
	if g.QueryTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.QueryTimeout)
		defer cancel()
	}
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/meshwave/meshwave/analysis").
		Start(ctx, "promql "+g.Name(), trace.WithAttributes(attribute.String("db.query.text", q), attribute.String("meshwave.check", g.Name())))
	val, warnings, _, err := g.Prometheus.QueryRange(ctx, q, r)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	switch {
	case err != nil:
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "Prometheus did not answer: " + clip(err.Error())}
	case len(warnings) > 0:
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "Prometheus's answer may be incomplete: " + clipWarnings(warnings)}
	}
	m, ok := val.(model.Matrix)
	if !ok {
		kind := "nothing"
		if val != nil {
			kind = "a " + val.Type().String()
		}
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: fmt.Sprintf("the query returned %s, not a matrix", kind)}
	}
	return g.Judge(wave, m, restart, ready, r, now)
}

// seriesKey names one counter of the matrix.
type seriesKey struct {
	workload, pod, instance, kind string
}

// increases cuts each counter of the matrix into what it counted in each
// look: look k (1 ≤ k < steps) is the time from step k-1 to step k. A
// counter that went down was reset, and counted its new value. A
// counter's first sample counts nothing: whether it began then (a new
// pod) or long before (Prometheus's data starting mid-range, a scrape
// that failed for a while) cannot be told, and counting its whole value
// in one look would invent a burst. A new pod's first scrape of requests
// is lost to both arms. Samples off the steps are ignored.
func increases(m model.Matrix, start time.Time, step time.Duration, steps int) map[seriesKey][]float64 {
	out := map[seriesKey][]float64{}
	for _, s := range m {
		if s == nil {
			continue
		}
		kind := string(s.Metric[seriesLabel])
		if le, ok := s.Metric["le"]; ok {
			kind = string(le)
		}
		key := seriesKey{string(s.Metric["destination_workload"]), string(s.Metric["pod"]), string(s.Metric["instance"]), kind}
		inc := out[key]
		if inc == nil {
			inc = make([]float64, steps)
			out[key] = inc
		}
		last, seen := 0.0, false
		for _, p := range s.Values {
			d := p.Timestamp.Time().Sub(start)
			if d < 0 || d%step != 0 {
				continue
			}
			k := int(d / step)
			v := float64(p.Value)
			if k >= steps || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				continue
			}
			switch {
			case seen && v >= last:
				inc[k] += v - last
			case seen:
				inc[k] += v
			}
			last, seen = v, true
		}
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
	treatment           sequential.Counts // since the wave was up, to the decision
	controlAfter        sequential.Counts
	before, others      sequential.Counts // before the restart
	err                 error
}

// Judge replays the looks of the matrix, a range query over r, for each
// of the wave's workloads, and gives the wave's verdict: a fail when any
// workload failed, a final pass when every one passed, Inconclusive once
// MaxDuration is over with neither, and Pending before.
func (g *SequentialGate) Judge(wave canary.WaveUnderTest, m model.Matrix, restart, ready time.Time, r promv1.Range, now time.Time) canary.Verdict {
	steps := int(r.End.Sub(r.Start)/r.Step) + 1
	inc := increases(m, r.Start, r.Step, steps)
	history := make([]bool, steps)
	for k := 1; k < steps; k++ {
		history[k] = !r.Start.Add(time.Duration(k) * r.Step).After(restart)
	}
	cut, noun, err := g.Measure.cut(inc, history, steps)
	if err != nil {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: err.Error()}
	}
	others := map[string]bool{}
	for _, n := range wave.Unmoved {
		others[n] = true
	}
	control := cut(others)
	test := g.Test.Split(len(wave.Workloads))
	var results []workloadEvidence
	for _, w := range wave.Workloads {
		treatment := cut(map[string]bool{w.ObjectName(): true})
		ev := g.replay(test, w.Name, treatment, control, r, restart, ready)
		ev.noun = noun
		results = append(results, ev)
	}
	return g.verdict(wave, results, test, ready, now)
}

// replay runs one workload's test over the looks: those that ended by the
// restart are its history, those that began once the wave was up its
// looks; the ones between (the rollout) count for neither.
func (g *SequentialGate) replay(test sequential.ErrorTest, name string, treatment, control []sequential.Counts, r promv1.Range, restart, ready time.Time) workloadEvidence {
	out := workloadEvidence{name: name}
	var history []sequential.Look
	for k := 1; k < len(treatment); k++ {
		if end := r.Start.Add(time.Duration(k) * r.Step); !end.After(restart) {
			history = append(history, sequential.Look{Treatment: treatment[k], Control: control[k]})
			out.before = out.before.Add(treatment[k])
			out.others = out.others.Add(control[k])
		}
	}
	e, err := test.StartAgainstHistory(history)
	if err != nil {
		out.err = err
		return out
	}
	out.control = e.Control()
	for k := 1; k < len(treatment); k++ {
		if begin := r.Start.Add(time.Duration(k-1) * r.Step); begin.Before(ready) {
			continue
		}
		if err := e.Observe(sequential.Look{Treatment: treatment[k], Control: control[k]}); err != nil {
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
			Evidence: ptr(finiteExp(w.evidence)), EvidenceBound: ptr(finiteExp(w.bound)), Control: w.control.String()}
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
// since the wave was up, the control's, and the evidence against its bound:
// of health for a pass, of harm otherwise.
func describe(w workloadEvidence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", w.noun, counts(w.treatment))
	switch w.control {
	case sequential.Others:
		fmt.Fprintf(&b, " against the control's %s, %s and %s before the restart", counts(w.controlAfter), counts(w.before), counts(w.others))
	case sequential.Past:
		fmt.Fprintf(&b, " against %s before the restart", counts(w.before))
	default:
		fmt.Fprintf(&b, " against the control's %s", counts(w.controlAfter))
	}
	fmt.Fprintf(&b, "; control: %s; ", w.control)
	if w.decision == sequential.Pass {
		fmt.Fprintf(&b, "evidence of health %.3g of %.3g", finiteExp(w.health), finiteExp(w.healthBound))
	} else {
		fmt.Fprintf(&b, "evidence %.3g of %.3g", finiteExp(w.evidence), finiteExp(w.bound))
	}
	return b.String()
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
