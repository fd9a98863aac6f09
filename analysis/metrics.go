package analysis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

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
	// Query is a template of a PromQL expression giving one series per
	// workload, labelled with GroupBy: PromQL text with substitutions of
	// the fields of QueryParams ({{.Namespace}}, {{.Workloads}},
	// {{.Window}}, {{.Offset}}, {{.GroupBy}}) and nothing else. {{.Offset}}
	// must follow every range selector so the baseline can be evaluated at
	// the restart.
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
	// Waypoint and Ztunnel are the check's forms for a wave into ambient
	// mode, whose pods run no sidecar: behind a waypoint, which reports
	// the L7 series with reporter="waypoint"; and without one, where only
	// ztunnel's L4 series exist. With a form, the wave's value and request
	// count come from it; a waypoint form's baseline is still Query's,
	// offset back to the restart, when the pods ran their sidecars. A
	// check without the form for a wave's mode is inconclusive on it.
	Waypoint, Ztunnel *CheckForm
	// L7 marks a check that only L7 telemetry can measure (a latency):
	// it does not run on a wave into ambient without a waypoint, where
	// no proxy sees a request.
	L7 bool
}

// CheckForm is a check's query and request count for one data-plane
// mode, as templates with Check.Query's fields.
type CheckForm struct {
	Query, Requests string
}

// QueryParams are the fields a check's templates may use.
type QueryParams struct {
	// Namespace is the wave's namespace.
	Namespace string
	// Workloads is a regex matching exactly the wave's workloads, escaped
	// to sit between the double quotes of a PromQL string:
	// destination_workload=~"{{.Workloads}}". PromQL reads Go's escapes
	// there, so the regex of api.v1, api\.v1, is written api\\.v1.
	Workloads string
	// Window is the range of the rates in PromQL's notation, e.g. 1m.
	Window string
	// Offset is empty for the value and " offset <time since the restart>"
	// for the baseline.
	Offset string
	// GroupBy is the check's GroupBy label.
	GroupBy string
	// Cluster is the matcher that keeps a fleet Prometheus's series to
	// this cluster's, with its leading comma (`,cluster="prod-eu"`), to
	// sit inside a selector's braces: destination_workload=~"{{.Workloads}}"{{.Cluster}}.
	// Empty with a Prometheus of one cluster.
	Cluster string
}

// ClusterMatcher is QueryParams.Cluster for a fleet Prometheus whose
// series carry label (an external label of each cluster's Prometheus, or
// one that federation or Thanos adds) with value for this cluster; "" when
// label is empty.
func ClusterMatcher(label, value string) string {
	if label == "" {
		return ""
	}
	return "," + label + `="` + promqlString(value) + `"`
}

// templateFields are QueryParams' fields, the only substitutions a
// template may hold.
var templateFields = []string{"Namespace", "Workloads", "Window", "Offset", "GroupBy", "Cluster"}

// sampleParams render each template once when its gate is built.
var sampleParams = QueryParams{Namespace: "shop", Workloads: promqlString(regexp.QuoteMeta("api.v1")), Window: "1m", GroupBy: "app", Cluster: ClusterMatcher("cluster", "prod-eu")}

// ParseQueryTemplate parses one of a check's templates and renders it once
// with sample values, so that a template that cannot render fails when the
// configuration loads rather than at the first wave. A template holds
// PromQL text and {{.Field}} substitutions of QueryParams' fields, nothing
// else: no pipelines, functions, loops or sub-templates, which could make
// every run of the check slow or its query unbounded. usesOffset reports
// whether it places {{.Offset}}, which a baseline needs.
func ParseQueryTemplate(name, text string) (t *template.Template, usesOffset bool, err error) {
	if strings.TrimSpace(text) == "" {
		return nil, false, errors.New("the template is empty")
	}
	t, err = template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, false, err
	}
	if len(t.Templates()) != 1 || t.Tree == nil {
		return nil, false, errors.New("a PromQL template may not define templates")
	}
	for _, n := range t.Tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
		case *parse.ActionNode:
			field := fieldOf(n)
			if field == "" {
				return nil, false, fmt.Errorf("%s is not a substitution of a field: a PromQL template holds only %s", n, fieldList())
			}
			if !slices.Contains(templateFields, field) {
				return nil, false, fmt.Errorf("%s is not one of the fields %s", n, fieldList())
			}
		default:
			return nil, false, fmt.Errorf("%s is not a substitution of a field: a PromQL template holds only %s", n, fieldList())
		}
	}
	plain, err := render(t, sampleParams)
	if err != nil {
		return nil, false, err
	}
	with := sampleParams
	with.Offset = " offset 5m"
	offset, err := render(t, with)
	if err != nil {
		return nil, false, err
	}
	return t, plain != offset, nil
}

// fieldOf returns the field an action such as {{.Namespace}} substitutes,
// or "" if it does anything else.
func fieldOf(n *parse.ActionNode) string {
	if n.Pipe == nil || len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
		return ""
	}
	f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
	if !ok || len(f.Ident) != 1 {
		return ""
	}
	return f.Ident[0]
}

func fieldList() string {
	out := make([]string, len(templateFields))
	for i, f := range templateFields {
		out[i] = "{{." + f + "}}"
	}
	return strings.Join(out, ", ")
}

func render(t *template.Template, p QueryParams) (string, error) {
	var b bytes.Buffer
	err := t.Execute(&b, p)
	return b.String(), err
}

// promqlString escapes s to sit between the double quotes of a PromQL
// string, which reads Go's escapes: a regex's \. is written \\.
func promqlString(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// Built-in checks over Istio's standard metrics, as the proxies on the
// destination side report them.
const (
	requestsByDestination = `sum by (destination_workload) (increase(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}}))`
	// With no 5xx answer at all there is no 5xx series, and a plain ratio
	// would be an empty vector; "or ... * 0" makes it a zero instead.
	errorRateQuery     = `(sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"{{.Cluster}},response_code=~"5.."}[{{.Window}}]{{.Offset}})) or sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}})) * 0) / sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}}))`
	latencyP99Query    = `histogram_quantile(0.99, sum by (destination_workload, le) (rate(istio_request_duration_milliseconds_bucket{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}})))`
	requestsBySource   = `sum by (source_workload) (increase(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}}))`
	outboundErrorQuery = `(sum by (source_workload) (rate(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"{{.Cluster}},response_code=~"5.."}[{{.Window}}]{{.Offset}})) or sum by (source_workload) (rate(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}})) * 0) / sum by (source_workload) (rate(istio_requests_total{reporter="source",source_workload_namespace="{{.Namespace}}",source_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}}))`
)

// The same over ztunnel's L4 series, for a wave into ambient without a
// waypoint: the share of inbound connections ztunnel failed, and the
// connections as the count. ztunnel counts every inbound connection as opened when it builds its
// result, and one that fails as failed too: the failed are a part of the
// opened (ztunnel's src/proxy/metrics.rs).
var (
	connectionsByDestination = ztunnelSeries("increase", "opened")
	connectionFailureQuery   = orZero(ztunnelSeries("rate", "failed"), ztunnelSeries("rate", "opened")) + " / " + ztunnelSeries("rate", "opened")
)

// ztunnelSeries is fn over ztunnel's inbound connections counter of kind
// (opened or failed), per workload.
func ztunnelSeries(fn, kind string) string {
	return `sum by (destination_workload) (` + fn + `(istio_tcp_connections_` + kind + `_total{reporter="destination",destination_workload_namespace="{{.Namespace}}",destination_workload=~"{{.Workloads}}"{{.Cluster}}}[{{.Window}}]{{.Offset}}))`
}

// orZero is a, or zero where only b has a series: a counter that never
// moved has none.
func orZero(a, b string) string { return "(" + a + " or " + b + " * 0)" }

// throughWaypoint is a destination-side query as the waypoint reports it:
// the same series, with reporter="waypoint".
func throughWaypoint(q string) string {
	return strings.ReplaceAll(q, `reporter="destination"`, `reporter="waypoint"`)
}

// ErrorRateCheck is the share of 5xx answers per workload: through its
// waypoint for a wave into ambient behind one, and the share of failed
// connections ztunnel reports without one.
func ErrorRateCheck(threshold, tolerance, minRequests float64) Check {
	return Check{Name: "error-rate", Query: errorRateQuery, Requests: requestsByDestination, GroupBy: "destination_workload",
		Threshold: threshold, Tolerance: tolerance, MinRequests: minRequests, Unit: "ratio",
		Waypoint: &CheckForm{Query: throughWaypoint(errorRateQuery), Requests: throughWaypoint(requestsByDestination)},
		Ztunnel:  &CheckForm{Query: connectionFailureQuery, Requests: connectionsByDestination}}
}

// LatencyP99Check is the p99 request latency per workload, in ms: through
// its waypoint for a wave into ambient behind one; not measured without.
func LatencyP99Check(thresholdMs, tolerance, minRequests float64) Check {
	return Check{Name: "latency-p99", Query: latencyP99Query, Requests: requestsByDestination, GroupBy: "destination_workload",
		Threshold: thresholdMs, Tolerance: tolerance, MinRequests: minRequests, Unit: "ms", L7: true,
		Waypoint: &CheckForm{Query: throughWaypoint(latencyP99Query), Requests: throughWaypoint(requestsByDestination)}}
}

// OutboundErrorRateCheck is the share of 5xx answers to the calls the
// wave's workloads make, as their own proxies report them: the runbook's
// "verify traffic in both directions" between the two control planes.
func OutboundErrorRateCheck(threshold, tolerance, minRequests float64) Check {
	return Check{Name: "outbound-error-rate", Query: outboundErrorQuery, Requests: requestsBySource, GroupBy: "source_workload",
		Threshold: threshold, Tolerance: tolerance, MinRequests: minRequests, Unit: "ratio", L7: true}
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
	// BakeTime is how long after the wave is up the checks start. It is at
	// least Window, so that no rate reaches back before the wave was up.
	BakeTime time.Duration
	// Interval is the time between two runs.
	Interval time.Duration
	// Window is the range of the rates.
	Window time.Duration
	// QueryTimeout bounds one query.
	QueryTimeout time.Duration
	// Cluster keeps a fleet Prometheus's series to this cluster's
	// (QueryParams.Cluster); "" with a Prometheus of one cluster.
	Cluster string

	query, requests *template.Template
	// waypoint and ztunnel are the parsed forms, nil without.
	waypoint, ztunnel *parsedForm
}

type parsedForm struct {
	query, requests *template.Template
}

// NewMetricGate validates a check and parses its templates. It refuses
// what would measure the wrong thing:
//
//   - A window longer than the bake time. The first run comes BakeTime
//     after the wave was ready (every new pod up, injected and in sync,
//     no old pod left); a longer window reaches back to when the old
//     revision's pods still served, and dilutes the new revision's
//     numbers. Measured: a canary answering 30% 5xx read 16-17% with a 10s
//     window after a 5s bake. The window is not shortened behind the
//     user's back either: it was chosen against the scrape interval, and a
//     shorter one may hold too few samples. Counting only the new pods by
//     a pod label would depend on how Prometheus relabels its targets;
//     after the bake time there is no old pod left to count.
//   - A window under a second, or one PromQL cannot write (sub-millisecond
//     parts are dropped: 500µs would read [0s]).
//   - A threshold, tolerance or minimum that is not a finite number of
//     zero or more: NaN compares false with everything and would pass any
//     value.
//   - A template that does not render (see ParseQueryTemplate), and a
//     tolerance whose query has no {{.Offset}} for the baseline.
func NewMetricGate(c Check, q Querier, bake, interval, window, timeout time.Duration) (*MetricGate, error) {
	fail := func(format string, a ...any) (*MetricGate, error) {
		return nil, fmt.Errorf("check %s: %s", c.Name, fmt.Sprintf(format, a...))
	}
	if c.GroupBy == "" {
		return fail("groupBy must name the label that names the workload")
	}
	if !nonNegative(c.Threshold) || !nonNegative(c.Tolerance) || !nonNegative(c.MinRequests) {
		return fail("threshold %g, tolerance %g, minRequests %g must be finite numbers of zero or more", c.Threshold, c.Tolerance, c.MinRequests)
	}
	switch {
	case window < time.Second:
		return fail("a window of %s is shorter than 1s", window)
	case window%time.Millisecond != 0:
		return fail("a window of %s is not a whole number of milliseconds, as PromQL writes durations", window)
	case bake < window:
		return fail("a window of %s is longer than the bake time of %s: the first rates would reach back before the wave was up and mix in the old revision's traffic", window, bake)
	case interval < time.Second:
		return fail("an interval of %s is shorter than 1s", interval)
	case timeout < 0:
		return fail("a query timeout of %s is negative", timeout)
	}
	g := &MetricGate{Check: c, Prometheus: q, BakeTime: bake, Interval: interval, Window: window, QueryTimeout: timeout}
	var offset bool
	var err error
	if g.query, offset, err = ParseQueryTemplate(c.Name, c.Query); err != nil {
		return fail("query: %v", err)
	}
	if g.requests, _, err = ParseQueryTemplate(c.Name+"-requests", c.Requests); err != nil {
		return fail("requests: %v", err)
	}
	if c.Tolerance > 0 && !offset {
		return fail("a tolerance needs a baseline, so the query must place {{.Offset}} after its range selectors")
	}
	for _, f := range []struct {
		name string
		form *CheckForm
		into **parsedForm
	}{{"waypoint", c.Waypoint, &g.waypoint}, {"ztunnel", c.Ztunnel, &g.ztunnel}} {
		if f.form == nil {
			continue
		}
		var pf parsedForm
		if pf.query, _, err = ParseQueryTemplate(c.Name+"-"+f.name, f.form.Query); err != nil {
			return fail("%s query: %v", f.name, err)
		}
		if pf.requests, _, err = ParseQueryTemplate(c.Name+"-"+f.name+"-requests", f.form.Requests); err != nil {
			return fail("%s requests: %v", f.name, err)
		}
		*f.into = &pf
	}
	return g, nil
}

func nonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// Name implements Gate.
func (g *MetricGate) Name() string { return g.Check.Name }

// Query renders the one query a run sends: the value now, the baseline and
// the request count.
func (g *MetricGate) Query(wave canary.WaveUnderTest, now time.Time) (string, error) {
	names := make([]string, 0, len(wave.Workloads))
	for _, m := range wave.Workloads {
		// Istio labels a workload's series with its object's name, whatever
		// its kind.
		names = append(names, regexp.QuoteMeta(m.ObjectName()))
	}
	sort.Strings(names)
	names = slices.Compact(names)
	p := QueryParams{Namespace: wave.Namespace, Workloads: promqlString(strings.Join(names, "|")), Window: model.Duration(g.Window).String(), GroupBy: g.Check.GroupBy, Cluster: g.Cluster}
	query, reqs, baseline := g.query, g.requests, true
	if wave.Ambient {
		form := g.formOf(wave)
		if form == nil {
			return "", fmt.Errorf("check %s has no form for a wave into ambient %s", g.Check.Name, modeOf(wave))
		}
		// ztunnel's L4 series have no counterpart the sidecars reported
		// before the restart: no baseline.
		query, reqs, baseline = form.query, form.requests, form == g.waypoint
	}
	value, err := render(query, p)
	if err != nil {
		return "", err
	}
	requests, err := render(reqs, p)
	if err != nil {
		return "", err
	}
	parts := []string{tag(value, "value"), tag(requests, "requests")}
	// The baseline is the same expression over the window that ended when
	// the wave's workloads were restarted.
	if restart := restartOf(wave); baseline && !restart.IsZero() && now.After(restart) {
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
	if wave.Ambient && g.formOf(wave) == nil {
		return ambientTelemetry(g.Interval, modeOf(wave))
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
	vec, v := ask[model.Vector](ctx, g.Check.Name, q, func(ctx context.Context) (model.Value, promv1.Warnings, error) {
		val, warnings, _, err := g.Prometheus.Query(ctx, q, now)
		return val, warnings, err
	})
	if v != nil {
		return *v
	}
	return g.Judge(wave, vec)
}

// clip bounds text from Prometheus that goes into the status.
func clip(s string) string {
	const most = 300
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + "..."
}

func clipWarnings(ws promv1.Warnings) string {
	const most = 3
	out := make([]string, 0, most+1)
	for i, w := range ws {
		if i == most {
			out = append(out, fmt.Sprintf("and %d more", len(ws)-most))
			break
		}
		out = append(out, clip(w))
	}
	return strings.Join(out, "; ")
}

// sample is what a run learnt about one workload. A check may return
// several series of a kind for one workload: per pod or per version when
// its query keeps those labels, or one per replica from a Prometheus pair
// behind Thanos without deduplication. None of them is dropped: Judge
// holds the worst value against the worst baseline and adds up the
// request counts.
type sample struct {
	values, baselines, requests []float64
}

// Judge turns the query's vector into a verdict. Per workload: fewer
// requests than the minimum, no value, or a value that is NaN, -Inf or
// negative is inconclusive; a value over the threshold (+Inf included: a
// p99 beyond the histogram's largest bucket), or over the baseline by more
// than the tolerance, fails. With several value series, the worst decides
// (a fail before an inconclusive before a pass; the highest value among
// equals), held against the highest baseline; several request counts are
// added up. The check fails if any workload fails, is inconclusive if any
// is, and passes only when all pass.
func (g *MetricGate) Judge(wave canary.WaveUnderTest, vec model.Vector) canary.Verdict {
	c := g.Check
	by := map[string]*sample{}
	for _, s := range vec {
		if s == nil {
			continue
		}
		w := string(s.Metric[model.LabelName(c.GroupBy)])
		if by[w] == nil {
			by[w] = &sample{}
		}
		v := float64(s.Value)
		switch string(s.Metric[seriesLabel]) {
		case "value":
			by[w].values = append(by[w].values, v)
		case "baseline":
			by[w].baselines = append(by[w].baselines, v)
		case "requests":
			by[w].requests = append(by[w].requests, v)
		}
	}
	var failed []canary.WorkloadState
	var fails, unsure, oks []string
	var measures []canary.Measurement
	for _, m := range wave.Workloads {
		s := by[m.ObjectName()]
		if s == nil {
			s = &sample{}
		}
		meas := canary.Measurement{Check: c.Name, Workload: m.Name, Threshold: ptr(c.Threshold)}
		result, why, value, baseline := g.judgeOne(s)
		meas.Result, meas.Value, meas.Baseline = result, value, baseline
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

// rank orders results from the worst.
var rank = map[canary.Result]int{canary.ResultFail: 0, canary.ResultInconclusive: 1, canary.ResultPending: 1, canary.ResultPass: 2}

// judgeOne judges one workload. value is the worst value as the status
// can hold it (JSON has no NaN or infinities: +Inf is the largest float,
// the others 0), baseline the one it was held against.
func (g *MetricGate) judgeOne(s *sample) (result canary.Result, why string, value float64, baseline *float64) {
	c := g.Check
	for _, b := range s.baselines {
		if finite(b) && (baseline == nil || b > *baseline) {
			baseline = ptr(b)
		}
	}
	worst, worstWhy, worstResult := math.NaN(), "", canary.Result("")
	for _, v := range s.values {
		r, w := g.judgeValue(v, baseline)
		if worstResult == "" || rank[r] < rank[worstResult] || (r == worstResult && above(v, worst)) {
			worst, worstWhy, worstResult = v, w, r
		}
	}
	switch {
	case math.IsInf(worst, 1):
		value = math.MaxFloat64
	case finite(worst):
		value = worst
	}
	if len(s.values) > 1 {
		worstWhy += fmt.Sprintf(" (worst of %d series)", len(s.values))
	}
	// Sorted, so that the sum does not depend on the order Prometheus
	// answered in.
	counts := slices.Sorted(slices.Values(s.requests))
	requests := 0.0
	for _, n := range counts {
		requests += n
	}
	switch {
	case len(counts) == 0 || !finite(requests):
		return canary.ResultInconclusive, "no request count", value, baseline
	case requests < c.MinRequests:
		return canary.ResultInconclusive, fmt.Sprintf("%.0f requests < minimum %.0f", requests, c.MinRequests), value, baseline
	case len(s.values) == 0:
		return canary.ResultInconclusive, "no data", value, baseline
	}
	return worstResult, worstWhy, value, baseline
}

// above orders values for picking the worst among equal results: NaN
// lowest, then by value.
func above(v, than float64) bool {
	if math.IsNaN(v) {
		return false
	}
	return math.IsNaN(than) || v > than
}

// judgeValue judges one value series against the threshold and the
// baseline.
func (g *MetricGate) judgeValue(v float64, baseline *float64) (canary.Result, string) {
	c := g.Check
	switch {
	case math.IsNaN(v) || math.IsInf(v, -1):
		return canary.ResultInconclusive, fmt.Sprintf("the value is %v", v)
	case math.IsInf(v, 1):
		return canary.ResultFail, "+Inf > threshold " + g.format(c.Threshold)
	case v < 0:
		// A rate is never negative; a query over raw counters can be after a
		// reset.
		return canary.ResultInconclusive, fmt.Sprintf("negative value %s (a counter reset in the window?)", g.format(v))
	case v > c.Threshold:
		return canary.ResultFail, fmt.Sprintf("%s > threshold %s", g.format(v), g.format(c.Threshold))
	}
	if c.Tolerance > 0 && baseline != nil && *baseline > 0 {
		if limit := *baseline * (1 + c.Tolerance); v > limit {
			return canary.ResultFail, fmt.Sprintf("%s > baseline %s +%.0f%%", g.format(v), g.format(*baseline), c.Tolerance*100)
		}
		return canary.ResultPass, fmt.Sprintf("%s <= threshold %s, baseline %s", g.format(v), g.format(c.Threshold), g.format(*baseline))
	}
	return canary.ResultPass, fmt.Sprintf("%s <= threshold %s", g.format(v), g.format(c.Threshold))
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
