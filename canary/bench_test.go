package canary

import (
	"fmt"
	"testing"
	"time"
)

// largeNamespace is a namespace of n two-pod Deployments in ten waves,
// halfway through its migration.
func largeNamespace(n int) (Snapshot, *Status) {
	var ws []Workload
	for i := 0; i < n; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%05d", i), waveAnn(fmt.Sprint(i%10))))
	}
	s := snap(ws...)
	start := t0
	st := &Status{Phase: PhaseMigrating, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 3, WaveState: WaveVerifying, StartedAt: &start, WaveStartedAt: &start, GatesSince: &start}
	for i := 0; i < 50; i++ {
		st.Workloads = append(st.Workloads, WorkloadState{Name: fmt.Sprintf("svc-%05d", i*10), State: StateMoving})
	}
	return s, st
}

// BenchmarkDecideLargeNamespace measures one decision, which every
// reconcile of the namespace makes, over 10,000 Deployments.
func BenchmarkDecideLargeNamespace(b *testing.B) {
	s, st := largeNamespace(10000)
	pending := []Verdict{{Gate: "rollout", Result: ResultPending, RetryAfter: time.Second}}
	cfg := Config{Sizes: WaveSizes{CanarySize: 1, BatchSize: 50}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Minute), Config: cfg})
	}
}

// BenchmarkPlanNamespace measures planning 10,000 Deployments.
func BenchmarkPlanNamespace(b *testing.B) {
	s, _ := largeNamespace(10000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		PlanNamespace("shop", s.Workloads, "1-26", "", 0, WaveSizes{BatchSize: 50})
	}
}

// BenchmarkPlanWaves measures `meshwave plan` over 10,000 Deployments in
// 100 namespaces.
func BenchmarkPlanWaves(b *testing.B) {
	var inputs []PlanInput
	for n := 0; n < 100; n++ {
		s, _ := largeNamespace(100)
		s.Namespace.Name = fmt.Sprintf("ns-%03d", n)
		inputs = append(inputs, PlanInput{Snapshot: s})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		PlanWaves(inputs, WaveSizes{BatchSize: 50})
	}
}

// BenchmarkMovePatch measures the persist-settings patch of one workload:
// reading its pods' settings and encoding the merge patch.
func BenchmarkMovePatch(b *testing.B) {
	w := deploy("cart")
	for i := range w.Pods {
		w.Pods[i].Annotations["sidecar.istio.io/proxyCPU"] = "100m"
		w.Pods[i].Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"] = "3306"
	}
	rec := MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: t0, Migration: MigrationID("1-26", t0)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		MovePatch(w, PersistedSettings(w, DefaultPersistAnnotations), rec)
	}
}
