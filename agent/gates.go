package agent

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/analysis/sequential"
	"github.com/meshwave/meshwave/canary"
)

// Gates configures the checks after each wave. The rollout and injection
// gates always run; the xDS sync gate runs unless disabled; the metric
// checks run when a Prometheus URL is set.
type Gates struct {
	Sync    SyncGate    `json:"sync"`
	Metrics MetricGates `json:"metrics"`
}

// SyncGate configures the xDS sync gate.
type SyncGate struct {
	Enabled bool `json:"enabled"`
	// Mode is "grpc" (istio.io/debug/syncz over xDS) or "http" (GET
	// /debug/syncz on the monitoring port).
	Mode string `json:"mode"`
	// Port is istiod's port: 15012 for gRPC over TLS, 15010 plaintext,
	// 15014 for HTTP.
	Port int `json:"port"`
	// Plaintext dials gRPC without TLS (port 15010).
	Plaintext bool `json:"plaintext"`
	// SendTokenInCleartext sends the istio-ca token over plaintext (mode
	// http, or grpc with plaintext); off, it is sent only over TLS.
	SendTokenInCleartext bool `json:"sendTokenInCleartext"`
	// TokenFile is a projected service-account token with audience
	// istio-ca.
	TokenFile string `json:"tokenFile"`
	// CAFile verifies istiod's certificate; empty skips that, as istioctl
	// does.
	CAFile string `json:"caFile"`
	// Timeout is how long the wave's proxies have to get SYNCED.
	Timeout Duration `json:"timeout"`
	// Interval is the time between two rounds of questions.
	Interval Duration `json:"interval"`
	// RequestTimeout bounds one question to one istiod, and one read of a
	// ztunnel's config dump.
	RequestTimeout Duration `json:"requestTimeout"`
	// ZtunnelConfigDump reads, for a wave into ambient mode, each SYNCED
	// ztunnel's /config_dump through the apiserver's port-forward: every
	// new pod of its node must be held there as HBONE. It needs
	// pods/portforward in the root namespace; off, syncz alone decides.
	ZtunnelConfigDump bool `json:"ztunnelConfigDump"`
}

// MetricGates configures the PromQL checks.
type MetricGates struct {
	Prometheus Prometheus `json:"prometheus"`
	// BakeTime is how long after the wave is up the checks start.
	BakeTime Duration `json:"bakeTime"`
	// Interval is the time between two runs of the checks.
	Interval Duration `json:"interval"`
	// Window is the range of the rates.
	Window Duration `json:"window"`
	// RequiredPasses is how many runs in a row must pass.
	RequiredPasses int `json:"requiredPasses"`
	// QueryTimeout bounds one query.
	QueryTimeout Duration `json:"queryTimeout"`
	// The built-in checks over Istio's request metrics.
	ErrorRate         ModeCheck    `json:"errorRate"`
	LatencyP99        ModeCheck    `json:"latencyP99"`
	OutboundErrorRate BuiltinCheck `json:"outboundErrorRate"`
	// Checks are the user's own.
	Checks []CustomCheck `json:"checks"`
}

// Prometheus says where and how to query.
type Prometheus struct {
	URL string `json:"url"`
	// HTTP is Prometheus's own client configuration: TLS, bearer token,
	// basic auth, proxy.
	HTTP promconfig.HTTPClientConfig `json:"http"`
	// ClusterLabel, for a Prometheus that holds the series of several
	// clusters (one for the fleet, or one that federates each cluster's,
	// the usual Thanos or federation set-up), is the label that tells
	// them apart, usually the external label cluster. Every check then
	// keeps to the series whose ClusterLabel is Cluster: this cluster's
	// workloads, whichever cluster called them.
	ClusterLabel string `json:"clusterLabel"`
	// Cluster is this cluster's value of ClusterLabel; default
	// fleet.cluster.
	Cluster string `json:"cluster"`
}

// querier is the client of the Prometheus: deps's when set (tests), else
// one built from the configuration.
func (p Prometheus) querier(deps GateDeps) (analysis.Querier, error) {
	if deps.Prometheus != nil {
		return deps.Prometheus, nil
	}
	client, err := promconfig.NewClientFromConfig(p.HTTP, "meshwave")
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	api, err := promapi.NewClient(promapi.Config{Address: p.URL, Client: client})
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	return promv1.NewAPI(api), nil
}

// clusterMatcher is the matcher every query carries (analysis.QueryParams.Cluster).
func (p Prometheus) clusterMatcher() string {
	return analysis.ClusterMatcher(p.ClusterLabel, p.Cluster)
}

// BuiltinCheck tunes a built-in check.
type BuiltinCheck struct {
	Enabled     bool    `json:"enabled"`
	Threshold   float64 `json:"threshold"`
	Tolerance   float64 `json:"tolerance"`
	MinRequests float64 `json:"minRequests"`
}

// ModeCheck tunes a built-in check that has two modes: a threshold check,
// or with Mode "sequential" the anytime-valid test of Sequential, which
// leaves the threshold, tolerance and minimum aside. The error check's
// sequential test counts 5xx answers; the latency check's, the answers
// slower than the p99's bucket before the restart.
type ModeCheck struct {
	BuiltinCheck
	// Mode is "threshold" (the default) or "sequential".
	Mode       string          `json:"mode"`
	Sequential SequentialCheck `json:"sequential"`
}

// SequentialCheck tunes the sequential error check (analysis
// SequentialGate, package analysis/sequential).
type SequentialCheck struct {
	// Alpha is the chance, at most, that a healthy wave is failed (or a
	// failing one passed), however often it is looked at; the wave's
	// workloads share it.
	Alpha float64 `json:"alpha"`
	// Tolerance: a workload is healthy while its error ratio is at most
	// (1 + Tolerance) times its control's...
	Tolerance float64 `json:"tolerance"`
	// ...or at most Floor.
	Floor float64 `json:"floor"`
	// Step is the time between two looks: Prometheus's scrape interval.
	Step Duration `json:"step"`
	// History is how long before the restart the control is read from.
	History Duration `json:"history"`
	// MaxDuration is how long the looks go on after the wave is up;
	// without a verdict by then the check is inconclusive.
	MaxDuration Duration `json:"maxDuration"`
}

func (c SequentialCheck) test() sequential.ErrorTest {
	return sequential.ErrorTest{Alpha: c.Alpha, Tolerance: c.Tolerance, Floor: c.Floor}
}

// CustomCheck is a check the user writes: Go templates of PromQL, see
// analysis.Check.
type CustomCheck struct {
	Name        string  `json:"name"`
	Query       string  `json:"query"`
	Requests    string  `json:"requests"`
	GroupBy     string  `json:"groupBy"`
	Threshold   float64 `json:"threshold"`
	Tolerance   float64 `json:"tolerance"`
	MinRequests float64 `json:"minRequests"`
	Unit        string  `json:"unit"`
}

// defaultSequential are the settings of a sequential check, the study's
// (make study, bench/results.md).
var defaultSequential = SequentialCheck{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005, Step: Duration(15 * time.Second),
	History: Duration(10 * time.Minute), MaxDuration: Duration(15 * time.Minute)}

func defaultGates() Gates {
	def := canary.DefaultConfig()
	return Gates{
		Sync: SyncGate{
			Enabled: true, Mode: "grpc", Port: 15012,
			TokenFile: "/var/run/secrets/tokens/istio-token",
			Timeout:   Duration(2 * time.Minute), Interval: Duration(5 * time.Second), RequestTimeout: Duration(5 * time.Second),
			ZtunnelConfigDump: true,
		},
		Metrics: MetricGates{
			Prometheus:        Prometheus{HTTP: promconfig.DefaultHTTPClientConfig},
			BakeTime:          Duration(time.Minute),
			Interval:          Duration(def.AnalysisInterval),
			Window:            Duration(time.Minute),
			RequiredPasses:    def.RequiredPasses,
			QueryTimeout:      Duration(10 * time.Second),
			ErrorRate:         ModeCheck{BuiltinCheck: BuiltinCheck{Enabled: true, Threshold: 0.05, Tolerance: 1.0, MinRequests: 50}, Mode: "threshold", Sequential: defaultSequential},
			LatencyP99:        ModeCheck{BuiltinCheck: BuiltinCheck{Enabled: true, Threshold: 1000, Tolerance: 0.5, MinRequests: 50}, Mode: "threshold", Sequential: defaultSequential},
			OutboundErrorRate: BuiltinCheck{Enabled: false, Threshold: 0.05, Tolerance: 1.0, MinRequests: 20},
		},
	}
}

// builtinNames are the names of the built-in checks, which user checks may
// not take.
var builtinNames = map[string]bool{"error-rate": true, "latency-p99": true, "outbound-error-rate": true,
	analysis.GateRollout: true, analysis.GateInjection: true, analysis.GateSync: true}

func (g Gates) validate() []error {
	var errs []error
	bad := func(key string, value any, expected string) {
		errs = append(errs, fmt.Errorf("config key %s: %v is not %s", key, value, expected))
	}
	s := g.Sync
	if s.Enabled {
		if s.Mode != "grpc" && s.Mode != "http" {
			bad("gates.sync.mode", strconv.Quote(s.Mode), `"grpc" or "http"`)
		}
		if s.Port < 1 || s.Port > 65535 {
			bad("gates.sync.port", s.Port, "a port from 1 to 65535")
		}
		if s.TokenFile == "" {
			bad("gates.sync.tokenFile", `""`, "a path to a token with audience istio-ca")
		}
		for key, d := range map[string]Duration{"gates.sync.timeout": s.Timeout, "gates.sync.interval": s.Interval, "gates.sync.requestTimeout": s.RequestTimeout} {
			if d <= 0 {
				bad(key, d.D(), "a positive duration")
			}
		}
	}
	return append(errs, g.Metrics.validate()...)
}

// validate checks the metric section whether or not a Prometheus URL
// turns it on, so that a configuration does not turn out wrong the day
// the URL is set.
func (m MetricGates) validate() []error {
	var errs []error
	bad := func(key string, value any, expected string) {
		errs = append(errs, fmt.Errorf("config key %s: %v is not %s", key, value, expected))
	}
	if m.Prometheus.URL != "" {
		if u, err := url.Parse(m.Prometheus.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("gates.metrics.prometheus.url", strconv.Quote(m.Prometheus.URL), "an http or https URL")
		}
	} else if len(m.Checks) > 0 {
		errs = append(errs, fmt.Errorf("config key gates.metrics.checks: %d checks are set but gates.metrics.prometheus.url is empty: set it, or remove the checks, which would never run", len(m.Checks)))
	}
	if err := m.Prometheus.HTTP.Validate(); err != nil {
		bad("gates.metrics.prometheus.http", "the client configuration", "valid: "+err.Error())
	}
	if l := m.Prometheus.ClusterLabel; l != "" {
		if !model.LegacyValidation.IsValidLabelName(l) {
			bad("gates.metrics.prometheus.clusterLabel", strconv.Quote(l), "a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
		}
		if m.Prometheus.Cluster == "" {
			errs = append(errs, fmt.Errorf("config key gates.metrics.prometheus.cluster: empty, with gates.metrics.prometheus.clusterLabel %q set: name this cluster's value of the label, or set fleet.cluster", l))
		}
		for i, c := range m.Checks {
			for field, text := range map[string]string{"query": c.Query, "requests": c.Requests} {
				if unscoped, err := analysis.UnscopedSelectors(text); err == nil && len(unscoped) > 0 {
					errs = append(errs, fmt.Errorf("config key gates.metrics.checks[%d].%s: %q has selectors without {{.Cluster}} (%s), but gates.metrics.prometheus.clusterLabel is set: they would count every cluster's series; put {{.Cluster}} inside each selector's braces", i, field, text, strings.Join(unscoped, ", ")))
				}
			}
		}
	} else if m.Prometheus.Cluster != "" {
		errs = append(errs, fmt.Errorf("config key gates.metrics.prometheus.cluster: %q is set, but gates.metrics.prometheus.clusterLabel is empty: set the label it is a value of", m.Prometheus.Cluster))
	}
	if m.Interval.D() < time.Second {
		bad("gates.metrics.interval", m.Interval.D(), "a duration of at least 1s")
	}
	if m.QueryTimeout <= 0 {
		bad("gates.metrics.queryTimeout", m.QueryTimeout.D(), "a positive duration")
	}
	window := m.Window.D()
	if window < time.Second || window%time.Millisecond != 0 {
		bad("gates.metrics.window", window, "a duration of at least 1s in whole milliseconds")
	}
	// The first run comes bakeTime after the wave was ready: a longer
	// window would measure the old revision's pods too (see
	// analysis.NewMetricGate).
	switch {
	case m.BakeTime < 0:
		bad("gates.metrics.bakeTime", m.BakeTime.D(), "a duration of zero or more")
	case m.BakeTime < m.Window:
		bad("gates.metrics.bakeTime", m.BakeTime.D(), fmt.Sprintf("at least gates.metrics.window (%s): the first rates would reach back before the wave was up and mix in the old revision's traffic", window))
	}
	if m.RequiredPasses < 1 {
		bad("gates.metrics.requiredPasses", m.RequiredPasses, "a positive integer")
	}
	numbers := func(key string, threshold, tolerance, minRequests float64) bool {
		if nonNegative(threshold) && nonNegative(tolerance) && nonNegative(minRequests) {
			return true
		}
		bad(key, fmt.Sprintf("threshold %g, tolerance %g, minRequests %g", threshold, tolerance, minRequests), "made of finite numbers of zero or more")
		return false
	}
	for _, b := range []struct {
		key string
		c   BuiltinCheck
	}{{"errorRate", m.ErrorRate.BuiltinCheck}, {"latencyP99", m.LatencyP99.BuiltinCheck}, {"outboundErrorRate", m.OutboundErrorRate}} {
		numbers("gates.metrics."+b.key, b.c.Threshold, b.c.Tolerance, b.c.MinRequests)
	}
	errs = append(errs, m.ErrorRate.validate("gates.metrics.errorRate")...)
	errs = append(errs, m.LatencyP99.validate("gates.metrics.latencyP99")...)
	seen := map[string]bool{}
	for i, c := range m.Checks {
		key := fmt.Sprintf("gates.metrics.checks[%d]", i)
		before := len(errs)
		if len(validation.IsDNS1123Label(c.Name)) > 0 {
			bad(key+".name", strconv.Quote(c.Name), "a lowercase name of letters, digits and dashes")
		} else if builtinNames[c.Name] || seen[c.Name] {
			bad(key+".name", strconv.Quote(c.Name), "a name no other check uses")
		}
		seen[c.Name] = true
		var usesOffset bool
		for _, f := range []struct{ field, text string }{{"query", c.Query}, {"requests", c.Requests}} {
			_, offset, err := analysis.ParseQueryTemplate(f.field, f.text)
			if err != nil {
				bad(key+"."+f.field, strconv.Quote(f.text), "a PromQL template of the fields {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}: "+err.Error())
			} else if f.field == "query" {
				usesOffset = offset
			}
		}
		if c.GroupBy == "" {
			bad(key+".groupBy", `""`, "the label that names the workload")
		}
		if numbers(key, c.Threshold, c.Tolerance, c.MinRequests) && c.Tolerance > 0 && !usesOffset && len(errs) == before {
			bad(key+".query", strconv.Quote(c.Query), "usable with a tolerance: it must place {{.Offset}} after its range selectors for the baseline")
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// Whatever is accepted builds: the gates' own rules, checked the way
	// BuildGates will apply them.
	for _, c := range m.checks() {
		if c.sequential != nil {
			continue // validate checked its settings by key
		}
		if _, err := analysis.NewMetricGate(c.check, nil, m.BakeTime.D(), m.Interval.D(), m.Window.D(), m.QueryTimeout.D()); err != nil {
			errs = append(errs, fmt.Errorf("config key %s: %w", c.key, err))
		}
	}
	return errs
}

func nonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// minAlpha is the smallest alpha a sequential check takes: shared among
// the most workloads a wave lists (canary.MaxWaveSize), each share stays
// above sequential.MinAlpha.
const minAlpha = 1e-6

// validate checks the mode, and the sequential settings when they apply.
func (c ModeCheck) validate(key string) []error {
	var errs []error
	bad := func(key string, value any, expected string) {
		errs = append(errs, fmt.Errorf("config key %s: %v is not %s", key, value, expected))
	}
	switch c.Mode {
	case "threshold":
	case "sequential":
		q, key := c.Sequential, key+".sequential."
		if !(q.Alpha >= minAlpha && q.Alpha < 1) {
			bad(key+"alpha", q.Alpha, fmt.Sprintf("a number from %g up to 1, 1 not included", minAlpha))
		}
		if !(q.Tolerance >= 0 && q.Tolerance <= sequential.MaxTolerance) {
			bad(key+"tolerance", q.Tolerance, fmt.Sprintf("a number from 0 to %d", sequential.MaxTolerance))
		}
		if !(q.Floor >= 0 && q.Floor < 1) {
			bad(key+"floor", q.Floor, "a share of requests from 0 up to 1, 1 not included")
		}
		step := q.Step.D()
		if step < time.Second || step%time.Second != 0 {
			bad(key+"step", step, "a whole number of seconds, at least 1s")
			break
		}
		for _, d := range []struct {
			key string
			d   time.Duration
		}{{"history", q.History.D()}, {"maxDuration", q.MaxDuration.D()}} {
			lead := time.Duration(analysis.LeadInSteps(step))
			if n := d.d / step; n < 2 || n+lead >= analysis.MaxRangePoints {
				bad(key+d.key, d.d, fmt.Sprintf("from two steps (%s) to %d of them: a look is a whole step on the epoch's grid, and each run reads it with one range query of at most %d points, five minutes of lead-in included", step, analysis.MaxRangePoints-1-int(lead), analysis.MaxRangePoints))
			}
		}
	default:
		bad(key+".mode", strconv.Quote(c.Mode), `"threshold" or "sequential"`)
	}
	return errs
}

// keyedCheck is a check with the config key it comes from.
type keyedCheck struct {
	key   string
	check analysis.Check
	// sequential, when set, replaces check: the check's mode is
	// sequential and it counts what measure says.
	sequential *SequentialCheck
	measure    analysis.SequentialMeasure
}

// checks are the metric checks the configuration turns on.
func (m MetricGates) checks() []keyedCheck {
	var out []keyedCheck
	if e := m.ErrorRate; e.Enabled && e.Mode == "sequential" {
		out = append(out, keyedCheck{key: "gates.metrics.errorRate", sequential: &e.Sequential, measure: analysis.SequentialErrors{}})
	} else if e.Enabled {
		out = append(out, keyedCheck{key: "gates.metrics.errorRate", check: analysis.ErrorRateCheck(e.Threshold, e.Tolerance, e.MinRequests)})
	}
	if l := m.LatencyP99; l.Enabled && l.Mode == "sequential" {
		out = append(out, keyedCheck{key: "gates.metrics.latencyP99", sequential: &l.Sequential, measure: analysis.SequentialLatency{Quantile: 0.99}})
	} else if l.Enabled {
		out = append(out, keyedCheck{key: "gates.metrics.latencyP99", check: analysis.LatencyP99Check(l.Threshold, l.Tolerance, l.MinRequests)})
	}
	if m.OutboundErrorRate.Enabled {
		out = append(out, keyedCheck{key: "gates.metrics.outboundErrorRate", check: analysis.OutboundErrorRateCheck(m.OutboundErrorRate.Threshold, m.OutboundErrorRate.Tolerance, m.OutboundErrorRate.MinRequests)})
	}
	for i, c := range m.Checks {
		out = append(out, keyedCheck{key: fmt.Sprintf("gates.metrics.checks[%d]", i), check: analysis.Check{Name: c.Name, Query: c.Query, Requests: c.Requests, GroupBy: c.GroupBy,
			Threshold: c.Threshold, Tolerance: c.Tolerance, MinRequests: c.MinRequests, Unit: c.Unit}})
	}
	return out
}

// GateDeps are the outside systems the gates talk to. Nil fields are built
// from the configuration.
type GateDeps struct {
	// Istiods lists a revision's Ready istiod pods.
	Istiods func(revision string) []analysis.Istiod
	// Ztunnels lists the ztunnel pods of a node, for waves into ambient.
	Ztunnels func(node string) []analysis.ZtunnelPod
	// Sync answers syncz; default from Gates.Sync.
	Sync analysis.SyncSource
	// Prometheus answers PromQL; default from Gates.Metrics.Prometheus.
	Prometheus analysis.Querier
	// ZtunnelDumps reads ztunnels' config dumps, when
	// Gates.Sync.ZtunnelConfigDump is on; nil reads none.
	ZtunnelDumps analysis.ZtunnelDumps
	// PodName and PodIP are the agent's own pod, which the gRPC sync
	// client names in its node ID; the chart sets them from the downward
	// API as POD_NAME and POD_IP.
	PodName, PodIP string
}

// BuildGates returns the chain builder for a wave: rollout, injection,
// xDS sync, then each metric check. A rollback is checked by the rollout
// and injection gates only: the pods must be back on the source.
func (g Gates) BuildGates(rootNamespace string, deps GateDeps) (func(canary.WaveUnderTest) analysis.Chain, error) {
	forward := analysis.Chain{analysis.RolloutGate{}, analysis.InjectionGate{}}
	if g.Sync.Enabled {
		src := deps.Sync
		if src == nil {
			if g.Sync.Mode == "http" {
				src = analysis.HTTPSyncz{Port: g.Sync.Port, TokenFile: g.Sync.TokenFile, SendTokenInCleartext: g.Sync.SendTokenInCleartext}
			} else {
				src = analysis.GRPCSyncz{Port: g.Sync.Port, Plaintext: g.Sync.Plaintext, SendTokenInCleartext: g.Sync.SendTokenInCleartext, TokenFile: g.Sync.TokenFile, CAFile: g.Sync.CAFile,
					RootNamespace: rootNamespace, PodName: deps.PodName, PodIP: deps.PodIP, Timeout: g.Sync.RequestTimeout.D()}
			}
		}
		if deps.Istiods == nil {
			return nil, errors.New("the sync gate needs a source of istiod pods")
		}
		var dumps analysis.ZtunnelDumps
		if g.Sync.ZtunnelConfigDump {
			dumps = deps.ZtunnelDumps
		}
		forward = append(forward, analysis.SyncGate{Source: src, Istiods: deps.Istiods, Ztunnels: deps.Ztunnels, Dumps: dumps, RootNamespace: rootNamespace,
			Timeout: g.Sync.Timeout.D(), Interval: g.Sync.Interval.D()})
	}
	if m := g.Metrics; m.Prometheus.URL != "" || deps.Prometheus != nil {
		q, err := m.Prometheus.querier(deps)
		if err != nil {
			return nil, err
		}
		for _, c := range m.checks() {
			if s := c.sequential; s != nil {
				rq, ok := q.(analysis.RangeQuerier)
				if !ok {
					return nil, fmt.Errorf("config key %s.mode: the sequential check needs a Prometheus client that runs range queries", c.key)
				}
				gate, err := analysis.NewSequentialGate(c.measure, s.test(), rq, s.Step.D(), s.History.D(), s.MaxDuration.D(), m.QueryTimeout.D())
				if err != nil {
					return nil, fmt.Errorf("config key %s.sequential: %w", c.key, err)
				}
				gate.Cluster = m.Prometheus.clusterMatcher()
				forward = append(forward, gate)
				continue
			}
			gate, err := analysis.NewMetricGate(c.check, q, m.BakeTime.D(), m.Interval.D(), m.Window.D(), m.QueryTimeout.D())
			if err != nil {
				return nil, fmt.Errorf("config key %s: %w", c.key, err)
			}
			gate.Cluster = m.Prometheus.clusterMatcher()
			forward = append(forward, gate)
		}
	}
	rollback := analysis.Chain{analysis.RolloutGate{}, analysis.InjectionGate{}}
	return func(w canary.WaveUnderTest) analysis.Chain {
		if w.Rollback {
			return rollback
		}
		return analysis.Applicable(forward, w)
	}, nil
}
