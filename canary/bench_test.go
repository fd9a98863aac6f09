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
// reconcile of the namespace makes, over 5,000 Deployments.
func BenchmarkDecideLargeNamespace(b *testing.B) {
	s, st := largeNamespace(5000)
	pending := []Verdict{{Gate: "rollout", Result: ResultPending, RetryAfter: time.Second}}
	cfg := Config{Sizes: WaveSizes{CanarySize: 1, BatchSize: 50}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Minute), Config: cfg})
	}
}

// BenchmarkPlanNamespace measures planning 5,000 Deployments.
func BenchmarkPlanNamespace(b *testing.B) {
	s, _ := largeNamespace(5000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		PlanNamespace("shop", s.Deployments, "1-26", "", 0, WaveSizes{BatchSize: 50})
	}
}
