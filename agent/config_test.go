package agent

import (
	"context"
	"math"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/analysis/sequential"
	"github.com/meshwave/meshwave/canary"
)

func TestParseConfigReadsValuesOverTheDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte("batchSize: 10\nreadinessTimeout: 90s\nfailurePolicy: Pause\n"))
	require.NoError(t, err)
	assert.Equal(t, 10, cfg.BatchSize)
	assert.Equal(t, 90*time.Second, cfg.ReadinessTimeout.D())
	assert.Equal(t, "Pause", cfg.FailurePolicy)
	assert.Equal(t, 1, cfg.CanarySize, "untouched keys keep their default")
	assert.Equal(t, 30*time.Second, cfg.DelayBetweenWaves.D())
}

func TestParseConfigRejectsBadValues(t *testing.T) {
	tests := []struct {
		name, yaml, err string
	}{
		{"an unknown key", "batches: 3\n", "config key batches: unknown key (keys match exactly, case included)"},
		{"a key in another case", "BatchSize: 7\n", "config key BatchSize: unknown key (keys match exactly, case included)"},
		{"a nested key in another case", "gates: {metrics: {bakeTime: 2m, Window: 2m}}\n", "config key gates.metrics.Window: unknown key (keys match exactly, case included)"},
		{"an unknown key of a check", "gates: {metrics: {prometheus: {url: 'http://p:9090'}, checks: [{name: mine, query: x, requests: r, groupBy: app, Threshold: 1}]}}\n",
			"config key gates.metrics.checks[0].Threshold: unknown key (keys match exactly, case included)"},
		{"an unknown key of Prometheus's client config", "gates: {metrics: {prometheus: {url: 'http://p:9090', http: {tls_confg: {insecure_skip_verify: true}}}}}\n",
			"config key gates.metrics.prometheus.http: yaml: unmarshal errors:\n  line 1: field tls_confg not found in type config.plain"},
		{"a key set twice", "batchSize: 3\nbatchSize: 4\n", "config: yaml: unmarshal errors:\n  line 2: key \"batchSize\" already set in map"},
		{"a file that is not a mapping", "- batchSize\n", "config: the file is not a mapping of keys to values"},
		{"a duration that is not one", "readinessTimeout: 5 minutes\n", `config key readinessTimeout: "5 minutes" is not a Go duration such as "90s" or "5m"`},
		{"a duration without a unit", "gates: {metrics: {window: 10}}\n", `config key gates.metrics.window: 10 is not a Go duration such as "90s" or "5m"`},
		{"a YAML 1.1 boolean where a string goes", "gates: {sync: {mode: on}}\n", "config key gates.sync.mode: true is not a string"},
		{"a quoted integer", "batchSize: '7'\n", `config key batchSize: "7" is not an integer`},
		{"a NaN threshold", "gates: {metrics: {errorRate: {threshold: .nan}}}\n", "config key gates.metrics.errorRate.threshold: NaN is not a finite number"},
		{"an infinite minimum", "gates: {metrics: {checks: [{minRequests: -.inf}]}}\n", "config key gates.metrics.checks[0].minRequests: -Inf is not a finite number"},
		{"a NaN under an unknown key", "gates: {metrics: {errorRat: {threshold: .nan}}}\n", "config key gates.metrics.errorRat.threshold: NaN is not a finite number"},
		{"checks without a Prometheus URL", "gates: {metrics: {checks: [{name: mine, query: 'sum by (app) (rate(x[{{.Window}}]))', requests: 'sum by (app) (increase(x[{{.Window}}]))', groupBy: app}]}}\n",
			"config key gates.metrics.checks: 1 checks are set but gates.metrics.prometheus.url is empty: set it, or remove the checks, which would never run"},
		{"a template naming a missing field", "gates: {metrics: {prometheus: {url: 'http://p:9090'}, checks: [{name: mine, query: 'sum by (app) (rate(x{ns=\"{{.Nmespace}}\"}[{{.Window}}]))', requests: 'sum by (app) (increase(x[{{.Window}}]))', groupBy: app}]}}\n",
			`config key gates.metrics.checks[0].query: "sum by (app) (rate(x{ns=\"{{.Nmespace}}\"}[{{.Window}}]))" is not a PromQL template of the fields {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}: {{.Nmespace}} is not one of the fields {{.Namespace}}, {{.Workloads}}, {{.Window}}, {{.Offset}}, {{.GroupBy}}, {{.Cluster}}`},
		{"a window under a second", "gates: {metrics: {window: 500ms}}\n", "config key gates.metrics.window: 500ms is not a duration of at least 1s in whole milliseconds"},
		{"a window longer than the bake time", "gates: {metrics: {bakeTime: 30s, window: 1m}}\n",
			"config key gates.metrics.bakeTime: 30s is not at least gates.metrics.window (1m0s): the first rates would reach back before the wave was up and mix in the old revision's traffic"},
		{"an unknown mode of the error check", "gates: {metrics: {errorRate: {mode: bayes}}}\n", `config key gates.metrics.errorRate.mode: "bayes" is not "threshold" or "sequential"`},
		{"a sequential check's alpha and step that cannot work", "gates: {metrics: {errorRate: {mode: sequential, sequential: {alpha: 0, step: 1500ms}}}}\n",
			"config key gates.metrics.errorRate.sequential.alpha: 0 is not a number from 1e-06 up to 1, 1 not included\n" +
				"config key gates.metrics.errorRate.sequential.step: 1.5s is not a whole number of seconds, at least 1s"},
		{"a sequential check's floor of 100%", "gates: {metrics: {errorRate: {mode: sequential, sequential: {floor: 1}}}}\n",
			"config key gates.metrics.errorRate.sequential.floor: 1 is not a share of requests from 0 up to 1, 1 not included"},
		{"a sequential check's history shorter than a look, and a maximum duration of too many", "gates: {metrics: {errorRate: {mode: sequential, sequential: {step: 1s, history: 500ms, maxDuration: 4h}}}}\n",
			"config key gates.metrics.errorRate.sequential.history: 500ms is not from two steps (1s) to 10699 of them: a look is a whole step on the epoch's grid, and each run reads it with one range query of at most 11000 points, five minutes of lead-in included\n" +
				"config key gates.metrics.errorRate.sequential.maxDuration: 4h0m0s is not from two steps (1s) to 10699 of them: a look is a whole step on the epoch's grid, and each run reads it with one range query of at most 11000 points, five minutes of lead-in included"},
		{"a sequential check's tolerance past a thousand", "gates: {metrics: {latencyP99: {mode: sequential, sequential: {tolerance: 1e308}}}}\n",
			"config key gates.metrics.latencyP99.sequential.tolerance: 1e+308 is not a number from 0 to 1000"},
		{"an unknown mode of the latency check", "gates: {metrics: {latencyP99: {mode: quantile}}}\n", `config key gates.metrics.latencyP99.mode: "quantile" is not "threshold" or "sequential"`},
		{"a zero batch", "batchSize: 0\n", "config key batchSize: 0 is not an integer from 1 to 500"},
		{"a canary larger than the status lists", "canarySize: 501\n", "config key canarySize: 501 is not an integer from 1 to 500"},
		{"an unknown policy", "failurePolicy: Retry\n", `config key failurePolicy: "Retry" is not one of "RollbackWave", "Pause" or "Continue"`},
		{"msname in the allow-list", "persistAnnotations: [msname]\n", `config key persistAnnotations[0]: "msname" is not allowed: the msname labels must never be written into templates`},
		{"a percentage over 100", "maxFailedPercent: 150\n", "config key maxFailedPercent: 150 is not a percentage from 0 to 100"},
		{"a lease shorter than its renew deadline", "leaderElection: {enabled: true, leaseName: x, leaseDuration: 5s, renewDeadline: 10s, retryPeriod: 2s}\n",
			"config key leaderElection: leaseDuration 5s, renewDeadline 10s, retryPeriod 2s is not ordered leaseDuration > renewDeadline > retryPeriod > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			require.Error(t, err)
			assert.Equal(t, tt.err, err.Error())
		})
	}
}

func TestValidateNamesTheKeyOfANaNSetInGo(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Gates.Metrics.ErrorRate.Threshold = math.NaN()
	assert.EqualError(t, cfg.Validate(), "config key gates.metrics.errorRate: threshold NaN, tolerance 1, minRequests 50 is not made of finite numbers of zero or more")
}

func TestParseConfigReadsPrometheusClientConfigAsPrometheusDoes(t *testing.T) {
	cfg, err := ParseConfig([]byte("gates: {metrics: {prometheus: {url: 'https://p:9090', http: {tls_config: {insecure_skip_verify: true}, authorization: {credentials: s3cret}}}}}\n"))
	require.NoError(t, err)
	http := cfg.Gates.Metrics.Prometheus.HTTP
	assert.True(t, http.TLSConfig.InsecureSkipVerify)
	require.NotNil(t, http.Authorization)
	assert.Equal(t, "Bearer", http.Authorization.Type)
	assert.Equal(t, "s3cret", string(http.Authorization.Credentials))
	assert.True(t, http.FollowRedirects, "Prometheus's defaults stay")
}

func TestTheDefaultConfigIsValid(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
}

func TestParseConfigReadsMaintenanceWindows(t *testing.T) {
	cfg, err := ParseConfig([]byte("maintenanceWindows:\n- {schedule: '0 22 * * 1-5', duration: 4h, timeZone: Europe/Berlin}\n- {schedule: '0 8 * * 6', duration: 12h}\n"))
	require.NoError(t, err)
	require.Len(t, cfg.MaintenanceWindows, 2)
	assert.Equal(t, MaintenanceWindow{Schedule: "0 22 * * 1-5", Duration: Duration(4 * time.Hour), TimeZone: "Europe/Berlin"}, cfg.MaintenanceWindows[0])
	ws := cfg.Decisions().MaintenanceWindows
	require.Len(t, ws, 2)
	assert.Equal(t, `"0 22 * * 1-5" for 4h0m0s in Europe/Berlin`, ws[0].String())
	assert.Equal(t, `"0 8 * * 6" for 12h0m0s in UTC`, ws[1].String(), "no time zone is UTC")

	cfg, err = ParseConfig(nil)
	require.NoError(t, err)
	assert.Empty(t, cfg.Decisions().MaintenanceWindows, "none by default: always open")
}

func TestParseConfigRejectsBadMaintenanceWindows(t *testing.T) {
	for _, tt := range []struct{ name, yaml, err string }{
		{"six fields", "maintenanceWindows: [{schedule: '0 0 22 * * *', duration: 1h}]\n",
			`config key maintenanceWindows[0].schedule: "0 0 22 * * *" is not a cron expression of five fields (minute hour day-of-month month day-of-week), e.g. "0 2 * * 6"; the time zone goes in timeZone`},
		{"an hour out of range", "maintenanceWindows: [{schedule: '0 24 * * *', duration: 1h}]\n",
			`config key maintenanceWindows[0].schedule: "0 24 * * *" is not a cron expression of five fields: `},
		{"a window that never opens", "maintenanceWindows: [{schedule: '0 0 31 4 *', duration: 1h}]\n",
			`config key maintenanceWindows[0].schedule: "0 0 31 4 *" is not a cron expression that ever opens`},
		{"no duration", "maintenanceWindows: [{schedule: '0 2 * * *'}]\n",
			`config key maintenanceWindows[0].duration: "0s" is not a duration from 1m to 744h (31 days), e.g. "2h"`},
		{"a duration that is not one", "maintenanceWindows: [{schedule: '0 2 * * *', duration: 2 hours}]\n",
			`config key maintenanceWindows[0].duration: "2 hours" is not a Go duration such as "90s" or "5m"`},
		{"an unknown time zone", "maintenanceWindows: [{schedule: '0 2 * * *', duration: 1h}, {schedule: '0 2 * * *', duration: 1h, timeZone: Europe/Berlln}]\n",
			`config key maintenanceWindows[1].timeZone: "Europe/Berlln" is not an IANA time zone such as "Europe/Berlin" or "UTC"`},
		{"a key in another case", "maintenanceWindows: [{schedule: '0 2 * * *', duration: 1h, timezone: UTC}]\n",
			"config key maintenanceWindows[0].timezone: unknown key (keys match exactly, case included)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

// With mode sequential, the error check is the sequential one, built with
// the configured test and times, in the threshold check's place.
func TestTheSequentialModeReplacesTheThresholdErrorCheck(t *testing.T) {
	cfg, err := ParseConfig([]byte("gates: {sync: {enabled: false}, metrics: {prometheus: {url: 'http://p:9090'}, errorRate: {mode: sequential, sequential: {alpha: 0.01, step: 30s}}}}\n"))
	require.NoError(t, err)
	build, err := cfg.Gates.BuildGates(cfg.RootNamespace, GateDeps{Prometheus: noProm{}})
	require.NoError(t, err)
	chain := build(canary.WaveUnderTest{})
	var names []string
	for _, g := range chain {
		names = append(names, g.Name())
	}
	assert.Equal(t, []string{"rollout", "injection", "error-rate", "latency-p99"}, names, "the threshold latency check stays")
	seq, ok := chain[2].(*analysis.SequentialGate)
	require.True(t, ok, "%T", chain[2])
	assert.Equal(t, analysis.SequentialGate{Measure: analysis.SequentialErrors{}, Test: sequential.ErrorTest{Alpha: 0.01, Tolerance: 0.5, Floor: 0.005}, Prometheus: noProm{},
		Step: 30 * time.Second, History: 10 * time.Minute, MaxDuration: 15 * time.Minute, QueryTimeout: 10 * time.Second}, *seq)

	cfg, err = ParseConfig([]byte("gates: {sync: {enabled: false}, metrics: {prometheus: {url: 'http://p:9090'}, latencyP99: {mode: sequential}}}\n"))
	require.NoError(t, err)
	build, err = cfg.Gates.BuildGates(cfg.RootNamespace, GateDeps{Prometheus: noProm{}})
	require.NoError(t, err)
	chain = build(canary.WaveUnderTest{})
	require.Len(t, chain, 4)
	_, threshold := chain[2].(*analysis.MetricGate)
	assert.True(t, threshold, "the threshold error check first: %T", chain[2])
	assert.Equal(t, &analysis.SequentialGate{Measure: analysis.SequentialLatency{Quantile: 0.99}, Test: sequential.ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}, Prometheus: noProm{},
		Step: 15 * time.Second, History: 10 * time.Minute, MaxDuration: 15 * time.Minute, QueryTimeout: 10 * time.Second}, chain[3], "the latency check, sequential, after it")

	cfg, err = ParseConfig([]byte("gates: {sync: {enabled: false}, metrics: {prometheus: {url: 'http://p:9090'}, errorRate: {mode: sequential}}}\n"))
	require.NoError(t, err)
	_, err = cfg.Gates.BuildGates(cfg.RootNamespace, GateDeps{Prometheus: instantOnly{}})
	assert.EqualError(t, err, "config key gates.metrics.errorRate.mode: the sequential check needs a Prometheus client that runs range queries")
}

type instantOnly struct{}

func (instantOnly) Query(context.Context, string, time.Time, ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	return model.Vector{}, nil, nil, nil
}

// A configuration whose only metric check is the latency (the error rate
// turned off, say for a check of one's own) judges every sidecar wave on
// Prometheus. On a wave into ambient without a waypoint the latency check
// is left out of the chain, and nothing else measures the wave: it
// passes as soon as its pods are up, with no bake time, no metric and
// nothing in its verdicts saying so.
func TestAWaveIntoAmbientWithoutAWaypointIsNotPassedUnmeasured(t *testing.T) {
	cfg, err := ParseConfig([]byte("gates: {sync: {enabled: false}, metrics: {prometheus: {url: 'http://p:9090'}, errorRate: {enabled: false}}}\n"))
	require.NoError(t, err)
	build, err := cfg.Gates.BuildGates(cfg.RootNamespace, GateDeps{Prometheus: noProm{}})
	require.NoError(t, err)
	measured := func(w canary.WaveUnderTest) bool {
		for _, v := range build(w).Evaluate(context.Background(), w, w.GatesSince.Add(time.Second)) {
			if v.Analysis {
				return true
			}
		}
		return false
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	pod := canary.Pod{Name: "cart-1", Current: true, Running: true, Ready: true, Node: "n1",
		Labels:      map[string]string{canary.LabelDataplaneMode: canary.DataplaneAmbient, canary.LabelInject: "false"},
		Annotations: map[string]string{canary.AnnotationRedirection: canary.RedirectionEnabled}}
	w := canary.WaveUnderTest{Namespace: "shop", Wave: 1, TargetRevision: "1-26", SourceRevision: "1-26", Expect: "1-26", Ambient: true, GatesSince: now,
		Workloads: []canary.WaveWorkload{{
			Workload: canary.Workload{Namespace: "shop", Name: "cart", Replicas: 1, Generation: 2, Pods: []canary.Pod{pod},
				Status: canary.RolloutStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}},
			Record: canary.MoveRecord{Revision: "1-26", At: now, Mode: canary.ModeAmbient}, Deadline: now.Add(5 * time.Minute), Timeout: 5 * time.Minute,
		}}}
	sidecar := w
	sidecar.Ambient, sidecar.SourceRevision = false, "1-25"
	injected := canary.Pod{Name: "cart-1", Current: true, Running: true, Ready: true, Node: "n1", Revision: "1-26"}
	sidecar.Workloads = []canary.WaveWorkload{w.Workloads[0]}
	sidecar.Workloads[0].Pods = []canary.Pod{injected}
	sidecar.Workloads[0].Record.Mode = ""
	require.True(t, measured(sidecar), "a sidecar wave is measured by the latency check")
	behind := w
	behind.Waypoint = "waypoint"
	require.True(t, measured(behind), "a wave behind a waypoint is measured through it")
	assert.True(t, measured(w), "a wave into ambient without a waypoint passes with no metric check, its only one left out of the chain")
}
