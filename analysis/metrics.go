package analysis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"text/template"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwave/meshwave/canary"
)

// Querier runs an instant PromQL query. promv1.API satisfies it.
type Querier interface {
	Query(ctx context.Context, query string, ts time.Time, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error)
}

var _ Querier = promv1.API(nil)

// Check is one metric check of a wave's workloads.
type Check struct {
	// Name names the gate, e.g. "error-rate".
	Name string
	// Query is a Go template of a PromQL expression giving one series per
	// workload, labelled with GroupBy. It may use {{.Namespace}},
	// {{.Workloads}} (a regex of the wave's workloads), {{.Window}} and
	// {{.Offset}}, which must follow every range selector so the baseline
	// can be evaluated at the restart.
	Query string
	// Requests is a template, with the same fields, of the number of
	// requests per workload over the window.
	Requests string
	// GroupBy is the label that names the workload.
	GroupBy string
	// Threshold is the largest acceptable value.
	Threshold float64
	// Tolerance, when above zero, also fails a value more than this
	// fraction above the workload's baseline (0.5 allows +50%). A baseline
	// of zero leaves only the threshold.
	Tolerance float64
	// MinRequests below which the check is inconclusive.
	MinRequests float64
	// Unit formats values in reasons: "ratio" as a percentage, else as is
	// followed by the unit ("ms").
	Unit string
}

// queryParams are the fields a check's templates may use.
type queryParams struct {
	Namespace, Workloads, Window, Offset, GroupBy string
}

// Built-in checks over Istio's standard metrics, as the proxies on the
// destination side report them.
const (
	requestsByDestination = `sum by (destination_workload) (increase(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}}))`
	// With no 5xx answer at all there is no 5xx series, and a plain ratio
	// would be an empty vector; "or ... * 0" makes it a zero instead.
	errorRateQuery     = `(sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}",response_code=~"5.."}[{{.Window}}]{{.Offset}})) or sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}})) * 0) / sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}}))`
	latencyP99Query    = `histogram_quantile(0.99, sum by (destination_workload, le) (rate(istio_request_duration_milliseconds_bucket{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}})))`
	requestsBySource   = `sum by (source_workload) (increase(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}}))`
	outboundErrorQuery = `(sum by (source_workload) (rate(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}",response_code=~"5.."}[{{.Window}}]{{.Offset}})) or sum by (source_workload) (rate(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}})) * 0) / sum by (source_workload) (rate(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"}[{{.Window}}]{{.Offset}}))`
)

// ErrorRateCheck is the share of 5xx answers per workload.
func ErrorRateCheck(threshold, tolerance, minRequests float64) Check {
	return Check{Name: "error-rate", Query: errorRateQuery, Requests: requestsByDestination, GroupBy: "destination_workload",
		Threshold: threshold, Tolerance: tolerance, MinRequests: minRequests, Unit: "ratio"}
}

// LatencyP99Check is the p99 request latency per workload, in ms.
func LatencyP99Check(thresholdMs, tolerance, minRequests float64) Check {
	return Check{Name: "latency-p99", Query: latencyP99Query, Requests: requestsByDestination, GroupBy: "destination_workload",
		Threshold: thresholdMs, Tolerance: tolerance, MinRequests: minRequests, Unit: "ms"}
}

// OutboundErrorRateCheck is the share of 5xx answers to the calls the
// wave's workloads make, as their own proxies report them: the runbook's
// "verify traffic in both directions" between the two control planes.
func OutboundErrorRateCheck(threshold, tolerance, minRequests float64) Check {
	return Check{Name: "outbound-error-rate", Query: outboundErrorQuery, Requests: requestsBySource, GroupBy: "source_workload",
		Threshold: threshold, Tolerance: tolerance, MinRequests: minRequests, Unit: "ratio"}
}

// seriesLabel tells the value, the baseline and the request count apart in
// the one vector a check's query returns.
const seriesLabel = "meshwave_series"

// MetricGate runs one check against Prometheus after the wave's bake time,
// every interval. Each run sends exactly one query, whatever the size of
// the wave: the value, the baseline (the same expression offset back to the
// workloads' restart) and the request count are joined with "or", each
// tagged by a label.
type MetricGate struct {
	Check      Check
	Prometheus Querier
	// BakeTime is how long after the wave is up the checks start.
	BakeTime time.Duration
	// Interval is the time between two runs.
	Interval time.Duration
	// Window is the range of the rates.
	Window time.Duration
	// QueryTimeout bounds one query.
	QueryTimeout time.Duration

	query, requests *template.Template
}

// NewMetricGate parses a check's templates.
func NewMetricGate(c Check, q Querier, bake, interval, window, timeout time.Duration) (*MetricGate, error) {
	g := &MetricGate{Check: c, Prometheus: q, BakeTime: bake, Interval: interval, Window: window, QueryTimeout: timeout}
	var err error
	if g.query, err = template.New(c.Name).Option("missingkey=error").Parse(c.Query); err != nil {
		return nil, fmt.Errorf("check %s: query: %w", c.Name, err)
	}
	if g.requests, err = template.New(c.Name + "-requests").Option("missingkey=error").Parse(c.Requests); err != nil {
		return nil, fmt.Errorf("check %s: requests: %w", c.Name, err)
	}
	if c.Tolerance > 0 && !strings.Contains(c.Query, "{{.Offset}}") {
		return nil, fmt.Errorf("check %s: a tolerance needs a baseline, so the query must place {{.Offset}} after its range selectors", c.Name)
	}
	return g, nil
}

// Name implements Gate.
func (g *MetricGate) Name() string { return g.Check.Name }

// Query renders the one query a run sends: the value now, the baseline and
// the request count.
func (g *MetricGate) Query(wave canary.WaveUnderTest, now time.Time) (string, error) {
	names := make([]string, 0, len(wave.Workloads))
	for _, m := range wave.Workloads {
		names = append(names, regexp.QuoteMeta(m.Name))
	}
	sort.Strings(names)
	p := queryParams{Namespace: wave.Namespace, Workloads: strings.Join(names, "|"), Window: model.Duration(g.Window).String(), GroupBy: g.Check.GroupBy}
	render := func(t *template.Template, p queryParams) (string, error) {
		var b bytes.Buffer
		err := t.Execute(&b, p)
		return b.String(), err
	}
	value, err := render(g.query, p)
	if err != nil {
		return "", err
	}
	requests, err := render(g.requests, p)
	if err != nil {
		return "", err
	}
	parts := []string{tag(value, "value"), tag(requests, "requests")}
	// The baseline is the same expression over the window that ended when
	// the wave's workloads were restarted.
	if restart := restartOf(wave); !restart.IsZero() && now.After(restart) {
		p.Offset = " offset " + model.Duration(now.Sub(restart).Truncate(time.Second)).String()
		baseline, err := render(g.query, p)
		if err != nil {
			return "", err
		}
		parts = append(parts, tag(baseline, "baseline"))
	}
	return strings.Join(parts, " or "), nil
}

func tag(expr, kind string) string {
	return fmt.Sprintf(`label_replace(%s, %q, %q, "", "")`, expr, seriesLabel, kind)
}

// restartOf is when the wave's workloads were restarted: the earliest move.
func restartOf(wave canary.WaveUnderTest) time.Time {
	var t time.Time
	for _, m := range wave.Workloads {
		if t.IsZero() || (!m.Record.At.IsZero() && m.Record.At.Before(t)) {
			t = m.Record.At
		}
	}
	return t
}

// Due reports whether Evaluate would query Prometheus now.
func (g *MetricGate) Due(wave canary.WaveUnderTest, now time.Time) bool {
	ready := now
	if wave.Analysis.ReadyAt != nil {
		ready = *wave.Analysis.ReadyAt
	}
	_, wait := notDue(wave, g.Name(), g.Interval, now)
	return !ready.Add(g.BakeTime).After(now) && !wait
}

// Evaluate implements Gate.
func (g *MetricGate) Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	ready := now
	if wave.Analysis.ReadyAt != nil {
		ready = *wave.Analysis.ReadyAt
	}
	if left := ready.Add(g.BakeTime).Sub(now); left > 0 {
		return canary.Verdict{Result: canary.ResultPending, Analysis: true, Deferred: true, RetryAfter: left,
			Reason: "baking for " + left.Round(time.Second).String()}
	}
	if v, wait := notDue(wave, g.Name(), g.Interval, now); wait {
		v.Analysis = true
		return v
	}
	v := g.run(ctx, wave, now)
	v.Analysis, v.Checked, v.RetryAfter = true, true, g.Interval
	return v
}

func (g *MetricGate) run(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	q, err := g.Query(wave, now)
	if err != nil {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "cannot render the query: " + err.Error()}
	}
	if g.QueryTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.QueryTimeout)
		defer cancel()
	}
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/meshwave/meshwave/analysis").
		Start(ctx, "promql "+g.Check.Name, trace.WithAttributes(attribute.String("db.query.text", q), attribute.String("meshwave.check", g.Check.Name)))
	val, _, _, err := g.Prometheus.Query(ctx, q, now)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "Prometheus did not answer: " + err.Error()}
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: fmt.Sprintf("the query returned a %s, not a vector", val.Type())}
	}
	return g.Judge(wave, vec)
}

// sample is what a run learnt about one workload.
type sample struct {
	value, baseline, requests       float64
	hasValue, hasBaseline, hasCount bool
}

// Judge turns the query's vector into a verdict. Per workload: fewer
// requests than the minimum, no value, or a value that is not a number is
// inconclusive; a value over the threshold, or over the baseline by more
// than the tolerance, fails. The check fails if any workload fails, is
// inconclusive if any is, and passes only when all pass.
func (g *MetricGate) Judge(wave canary.WaveUnderTest, vec model.Vector) canary.Verdict {
	c := g.Check
	by := map[string]*sample{}
	for _, s := range vec {
		w := string(s.Metric[model.LabelName(c.GroupBy)])
		if by[w] == nil {
			by[w] = &sample{}
		}
		v := float64(s.Value)
		switch string(s.Metric[seriesLabel]) {
		case "value":
			by[w].value, by[w].hasValue = v, true
		case "baseline":
			by[w].baseline, by[w].hasBaseline = v, true
		case "requests":
			by[w].requests, by[w].hasCount = v, true
		}
	}
	var failed []canary.WorkloadState
	var fails, unsure, oks []string
	var measures []canary.Measurement
	for _, m := range wave.Workloads {
		s := by[m.Name]
		if s == nil {
			s = &sample{}
		}
		meas := canary.Measurement{Check: c.Name, Workload: m.Name, Threshold: ptr(c.Threshold)}
		if s.hasBaseline && finite(s.baseline) {
			meas.Baseline = ptr(s.baseline)
		}
		if s.hasValue && finite(s.value) {
			meas.Value = s.value
		}
		result, why := g.judgeOne(s)
		meas.Result = result
		line := m.Name + ": " + why
		switch result {
		case canary.ResultFail:
			fails = append(fails, line)
			failed = append(failed, canary.WorkloadState{Name: m.Name, State: canary.StateFailed, Reason: c.Name + " " + why})
		case canary.ResultInconclusive:
			unsure = append(unsure, line)
		default:
			oks = append(oks, line)
		}
		measures = append(measures, meas)
	}
	// The worst first: a person reads the top of the list.
	rank := map[canary.Result]int{canary.ResultFail: 0, canary.ResultInconclusive: 1, canary.ResultPass: 2}
	sort.SliceStable(measures, func(i, j int) bool { return rank[measures[i].Result] < rank[measures[j].Result] })
	switch {
	case len(fails) > 0:
		return canary.Verdict{Result: canary.ResultFail, Reason: strings.Join(fails, "; "), Failed: failed, Measurements: measures}
	case len(unsure) > 0:
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: strings.Join(unsure, "; "), Measurements: measures}
	case len(oks) == 0:
		return canary.Verdict{Result: canary.ResultInconclusive, Reason: "no workload to check", Measurements: measures}
	}
	return canary.Verdict{Result: canary.ResultPass, Reason: strings.Join(oks, "; "), Measurements: measures}
}

func (g *MetricGate) judgeOne(s *sample) (canary.Result, string) {
	c := g.Check
	switch {
	case !s.hasCount || !finite(s.requests):
		return canary.ResultInconclusive, "no request count"
	case s.requests < c.MinRequests:
		return canary.ResultInconclusive, fmt.Sprintf("%.0f requests < minimum %.0f", s.requests, c.MinRequests)
	case !s.hasValue:
		return canary.ResultInconclusive, "no data"
	case math.IsNaN(s.value) || math.IsInf(s.value, 0):
		return canary.ResultInconclusive, fmt.Sprintf("the value is %v", s.value)
	case s.value < 0:
		// A rate is never negative; a query over raw counters can be after a
		// reset.
		return canary.ResultInconclusive, fmt.Sprintf("negative value %s (a counter reset in the window?)", g.format(s.value))
	case s.value > c.Threshold:
		return canary.ResultFail, fmt.Sprintf("%s > threshold %s", g.format(s.value), g.format(c.Threshold))
	}
	if c.Tolerance > 0 && s.hasBaseline && finite(s.baseline) && s.baseline > 0 {
		if limit := s.baseline * (1 + c.Tolerance); s.value > limit {
			return canary.ResultFail, fmt.Sprintf("%s > baseline %s +%.0f%%", g.format(s.value), g.format(s.baseline), c.Tolerance*100)
		}
		return canary.ResultPass, fmt.Sprintf("%s <= threshold %s, baseline %s", g.format(s.value), g.format(c.Threshold), g.format(s.baseline))
	}
	return canary.ResultPass, fmt.Sprintf("%s <= threshold %s", g.format(s.value), g.format(c.Threshold))
}

func (g *MetricGate) format(v float64) string {
	switch g.Check.Unit {
	case "ratio":
		return fmt.Sprintf("%.2f%%", v*100)
	case "":
		return fmt.Sprintf("%.4g", v)
	}
	return fmt.Sprintf("%.4g%s", v, g.Check.Unit)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// ErrNoPrometheus is returned when metric checks are configured without a
// Prometheus URL.
var ErrNoPrometheus = errors.New("metric checks need a Prometheus URL")
