package agent

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshwave/meshwave/analysis"
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
	// RequestTimeout bounds one question to one istiod.
	RequestTimeout Duration `json:"requestTimeout"`
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
	ErrorRate         BuiltinCheck `json:"errorRate"`
	LatencyP99        BuiltinCheck `json:"latencyP99"`
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
}

// BuiltinCheck tunes a built-in check.
type BuiltinCheck struct {
	Enabled     bool    `json:"enabled"`
	Threshold   float64 `json:"threshold"`
	Tolerance   float64 `json:"tolerance"`
	MinRequests float64 `json:"minRequests"`
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

func defaultGates() Gates {
	def := canary.DefaultConfig()
	return Gates{
		Sync: SyncGate{
			Enabled: true, Mode: "grpc", Port: 15012,
			TokenFile: "/var/run/secrets/tokens/istio-token",
			Timeout:   Duration(2 * time.Minute), Interval: Duration(5 * time.Second), RequestTimeout: Duration(5 * time.Second),
		},
		Metrics: MetricGates{
			Prometheus:        Prometheus{HTTP: promconfig.DefaultHTTPClientConfig},
			BakeTime:          Duration(time.Minute),
			Interval:          Duration(def.AnalysisInterval),
			Window:            Duration(time.Minute),
			RequiredPasses:    def.RequiredPasses,
			QueryTimeout:      Duration(10 * time.Second),
			ErrorRate:         BuiltinCheck{Enabled: true, Threshold: 0.05, Tolerance: 1.0, MinRequests: 50},
			LatencyP99:        BuiltinCheck{Enabled: true, Threshold: 1000, Tolerance: 0.5, MinRequests: 50},
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
	m := g.Metrics
	if m.Prometheus.URL == "" {
		return errs
	}
	if u, err := url.Parse(m.Prometheus.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("gates.metrics.prometheus.url", strconv.Quote(m.Prometheus.URL), "an http or https URL")
	}
	if err := m.Prometheus.HTTP.Validate(); err != nil {
		bad("gates.metrics.prometheus.http", "the client configuration", "valid: "+err.Error())
	}
	for key, d := range map[string]Duration{"gates.metrics.interval": m.Interval, "gates.metrics.window": m.Window, "gates.metrics.queryTimeout": m.QueryTimeout} {
		if d <= 0 {
			bad(key, d.D(), "a positive duration")
		}
	}
	if m.BakeTime < 0 {
		bad("gates.metrics.bakeTime", m.BakeTime.D(), "a duration of zero or more")
	}
	if m.RequiredPasses < 1 {
		bad("gates.metrics.requiredPasses", m.RequiredPasses, "a positive integer")
	}
	for key, c := range map[string]BuiltinCheck{"errorRate": m.ErrorRate, "latencyP99": m.LatencyP99, "outboundErrorRate": m.OutboundErrorRate} {
		if c.Threshold < 0 || c.Tolerance < 0 || c.MinRequests < 0 {
			bad("gates.metrics."+key, fmt.Sprintf("threshold %g, tolerance %g, minRequests %g", c.Threshold, c.Tolerance, c.MinRequests), "made of numbers of zero or more")
		}
	}
	seen := map[string]bool{}
	for i, c := range m.Checks {
		key := fmt.Sprintf("gates.metrics.checks[%d]", i)
		if len(validation.IsDNS1123Label(c.Name)) > 0 {
			bad(key+".name", strconv.Quote(c.Name), "a lowercase name of letters, digits and dashes")
		} else if builtinNames[c.Name] || seen[c.Name] {
			bad(key+".name", strconv.Quote(c.Name), "a name no other check uses")
		}
		seen[c.Name] = true
		for field, text := range map[string]string{"query": c.Query, "requests": c.Requests} {
			if strings.TrimSpace(text) == "" {
				bad(key+"."+field, `""`, "a PromQL template")
			} else if _, err := template.New("").Parse(text); err != nil {
				bad(key+"."+field, strconv.Quote(text), "a Go template: "+err.Error())
			}
		}
		if c.GroupBy == "" {
			bad(key+".groupBy", `""`, "the label that names the workload")
		}
		if c.Threshold < 0 || c.Tolerance < 0 || c.MinRequests < 0 {
			bad(key, fmt.Sprintf("threshold %g, tolerance %g, minRequests %g", c.Threshold, c.Tolerance, c.MinRequests), "made of numbers of zero or more")
		}
		if c.Tolerance > 0 && !strings.Contains(c.Query, "{{.Offset}}") {
			bad(key+".query", strconv.Quote(c.Query), "usable with a tolerance: it must place {{.Offset}} after its range selectors for the baseline")
		}
	}
	return errs
}

// GateDeps are the outside systems the gates talk to. Nil fields are built
// from the configuration.
type GateDeps struct {
	// Istiods lists a revision's Ready istiod pods.
	Istiods func(revision string) []analysis.Istiod
	// Sync answers syncz; default from Gates.Sync.
	Sync analysis.SyncSource
	// Prometheus answers PromQL; default from Gates.Metrics.Prometheus.
	Prometheus analysis.Querier
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
		forward = append(forward, analysis.SyncGate{Source: src, Istiods: deps.Istiods, RootNamespace: rootNamespace,
			Timeout: g.Sync.Timeout.D(), Interval: g.Sync.Interval.D()})
	}
	if m := g.Metrics; m.Prometheus.URL != "" || deps.Prometheus != nil {
		q := deps.Prometheus
		if q == nil {
			client, err := promconfig.NewClientFromConfig(m.Prometheus.HTTP, "meshwave")
			if err != nil {
				return nil, fmt.Errorf("prometheus client: %w", err)
			}
			api, err := promapi.NewClient(promapi.Config{Address: m.Prometheus.URL, Client: client})
			if err != nil {
				return nil, fmt.Errorf("prometheus client: %w", err)
			}
			q = promv1.NewAPI(api)
		}
		var checks []analysis.Check
		if m.ErrorRate.Enabled {
			checks = append(checks, analysis.ErrorRateCheck(m.ErrorRate.Threshold, m.ErrorRate.Tolerance, m.ErrorRate.MinRequests))
		}
		if m.LatencyP99.Enabled {
			checks = append(checks, analysis.LatencyP99Check(m.LatencyP99.Threshold, m.LatencyP99.Tolerance, m.LatencyP99.MinRequests))
		}
		if m.OutboundErrorRate.Enabled {
			checks = append(checks, analysis.OutboundErrorRateCheck(m.OutboundErrorRate.Threshold, m.OutboundErrorRate.Tolerance, m.OutboundErrorRate.MinRequests))
		}
		for _, c := range m.Checks {
			checks = append(checks, analysis.Check{Name: c.Name, Query: c.Query, Requests: c.Requests, GroupBy: c.GroupBy,
				Threshold: c.Threshold, Tolerance: c.Tolerance, MinRequests: c.MinRequests, Unit: c.Unit})
		}
		for _, c := range checks {
			gate, err := analysis.NewMetricGate(c, q, m.BakeTime.D(), m.Interval.D(), m.Window.D(), m.QueryTimeout.D())
			if err != nil {
				return nil, err
			}
			forward = append(forward, gate)
		}
	}
	rollback := analysis.Chain{analysis.RolloutGate{}, analysis.InjectionGate{}}
	return func(w canary.WaveUnderTest) analysis.Chain {
		if w.Rollback {
			return rollback
		}
		return forward
	}, nil
}
