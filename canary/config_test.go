package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithDefaultsFillsOnlyTheUnsetSettings(t *testing.T) {
	def := DefaultConfig()
	noDelay := def
	noDelay.DelayBetweenWaves = 0
	set := Config{
		Sizes: WaveSizes{CanarySize: 2, BatchSize: 7}, Concurrency: 3, ReadinessTimeout: time.Minute, DelayBetweenWaves: time.Second,
		PersistAnnotations: []string{"proxy.istio.io/config"}, FailurePolicy: PolicyPause, MaxFailedPercent: 10, InconclusiveLimit: 9,
		PrecheckRetry: time.Hour, RequiredPasses: 4, AnalysisInterval: 2 * time.Minute, MetricChecks: true, BakeTime: 3 * time.Minute, StrictPrechecks: true,
	}
	tests := []struct {
		name     string
		in, want Config
	}{
		{"an empty config takes every default, and no delay between waves", Config{}, noDelay},
		{"the defaults are a fixed point", def, def},
		{"every setting given stays", set, set},
		{"an empty allow-list stays empty: nothing is persisted",
			Config{PersistAnnotations: []string{}}, func() Config { c := noDelay; c.PersistAnnotations = []string{}; return c }()},
		{"negative sizes and counts take the defaults",
			Config{Sizes: WaveSizes{CanarySize: -1, BatchSize: -5}, Concurrency: -1, InconclusiveLimit: -1, RequiredPasses: -1}, noDelay},
		{"wave sizes are capped at what a status lists",
			Config{Sizes: WaveSizes{CanarySize: MaxWaveSize + 1, BatchSize: 10 * MaxWaveSize}},
			func() Config {
				c := noDelay
				c.Sizes = WaveSizes{CanarySize: MaxWaveSize, BatchSize: MaxWaveSize}
				return c
			}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.in.WithDefaults())
		})
	}
}

func TestPlanningWithoutSizesCutsTheDefaultWaves(t *testing.T) {
	var ws []Workload
	for i := range 7 {
		ws = append(ws, deploy(fmt.Sprintf("w%d", i)))
	}
	want := [][]string{{"w0"}, {"w1", "w2", "w3", "w4", "w5"}, {"w6"}}
	assert.Equal(t, want, waveNames(PlanNamespace("shop", ws, "1-26", "", 0, WaveSizes{})))
	plans := PlanWaves([]PlanInput{{Snapshot: snap(ws...)}}, WaveSizes{})
	require.Len(t, plans, 1)
	assert.Equal(t, want, waveNames(plans[0]))
}

func TestAWorkloadsReadinessTimeoutOverridesTheConfiguredOne(t *testing.T) {
	for _, tt := range []struct {
		name       string
		configured time.Duration
		want       time.Duration
	}{
		{"over the default", 0, 5 * time.Minute},
		{"over a configured one", 2 * time.Minute, 2 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t, deploy("a", ann(AnnotationReadinessTimeout, "90s")), deploy("b"))
			s.cfg.Sizes = WaveSizes{CanarySize: 2}
			s.cfg.ReadinessTimeout = tt.configured
			s.decide(nil)
			w, ok := waveToVerify(s.snap, s.status, s.cfg)
			require.True(t, ok)
			require.Len(t, w.Workloads, 2)
			assert.Equal(t, "a", w.Workloads[0].Name)
			assert.Equal(t, 90*time.Second, w.Workloads[0].Timeout, "its own annotation")
			assert.Equal(t, t0.Add(90*time.Second), w.Workloads[0].Deadline)
			assert.Equal(t, "b", w.Workloads[1].Name)
			assert.Equal(t, tt.want, w.Workloads[1].Timeout)
			assert.Equal(t, t0.Add(tt.want), w.Workloads[1].Deadline)
		})
	}
}
