package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

type noProm struct{}

func (noProm) Query(context.Context, string, time.Time, ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	return model.Vector{}, nil, nil, nil
}

func (noProm) QueryRange(context.Context, string, promv1.Range, ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	return model.Matrix{}, nil, nil, nil
}

type noSyncz struct{}

func (noSyncz) Syncz(context.Context, analysis.Istiod, string) ([]analysis.ProxySync, error) {
	return nil, nil
}

func (noSyncz) CallerNamespace() (string, error) { return "istio-system", nil }

// watchdog crashes the fuzzing process, which saves the input as a
// failure, when one input takes longer than any config should: a loop or
// an explosion the fuzzer would otherwise only show as a stall.
func watchdog(input []byte) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			panic(fmt.Sprintf("one input took over 10s: %q", input))
		}
	}()
	return func() { close(done) }
}

// FuzzParseConfig reads arbitrary bytes as the config file. ParseConfig
// must not panic; an error must say it is about the config; and what it
// accepts must be usable: valid, its gates built, each check's query
// rendered for a wave, and read back the same from its own JSON.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("batchSize: 10\nreadinessTimeout: 90s\nfailurePolicy: Pause\n"))
	f.Add([]byte("BatchSize: 7\ngates: {metrics: {errorRate: {threshold: .nan}}}\n"))
	f.Add([]byte("gates: {metrics: {prometheus: {url: 'http://p:9090'}, errorRate: {mode: sequential, sequential: {alpha: 0.01, step: 30s}}}}\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		defer watchdog(raw)()
		cfg, err := ParseConfig(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config") {
				t.Fatalf("an error that does not say it is about the config: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted, then invalid: %v", err)
		}
		build, err := cfg.Gates.BuildGates(cfg.RootNamespace, GateDeps{
			Istiods: func(string) []analysis.Istiod { return nil }, Sync: noSyncz{}, Prometheus: noProm{},
		})
		if err != nil {
			t.Fatalf("accepted, but the gates do not build: %v", err)
		}
		at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		w := canary.WaveUnderTest{Namespace: "shop", Workloads: []canary.WaveWorkload{
			{Workload: canary.Workload{Namespace: "shop", Name: "api.v1"}, Record: canary.MoveRecord{At: at}},
		}}
		for _, g := range build(w) {
			if mg, ok := g.(*analysis.MetricGate); ok {
				if q, err := mg.Query(w, at.Add(time.Hour)); err != nil || q == "" {
					t.Fatalf("check %s does not render: %q, %v", mg.Name(), q, err)
				}
			}
		}
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("accepted, but cannot be written back: %v", err)
		}
		again, err := ParseConfig(js)
		if err != nil {
			t.Fatalf("its own JSON is refused: %v\n%s", err, js)
		}
		// Prometheus writes secrets back as <secret>.
		again.Gates.Metrics.Prometheus.HTTP, cfg.Gates.Metrics.Prometheus.HTTP = promconfig.HTTPClientConfig{}, promconfig.HTTPClientConfig{}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("read back differently:\n%+v\n%+v", cfg, again)
		}
	})
}
