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

// keepFacts gives every workload of s its Facts, as the agent hands them
// in from its caches: read once per object, not once per decision.
func keepFacts(s Snapshot) Snapshot {
	for i := range s.Workloads {
		s.Workloads[i].Facts = ReadFacts(&s.Workloads[i])
	}
	return s
}

// BenchmarkDecideLargeNamespace measures one decision, which every
// reconcile of the namespace makes, over 10,000 Deployments whose facts
// were kept, as the agent keeps them.
func BenchmarkDecideLargeNamespace(b *testing.B) {
	s, st := largeNamespace(10000)
	benchmarkDecide(b, keepFacts(s), st)
}

// BenchmarkDecideLargeNamespaceReadingEveryWorkload is
// BenchmarkDecideLargeNamespace for a caller that keeps no facts (the
// agent's first decision on each object, `meshwave plan`): the decision
// reads every workload's labels and annotations.
func BenchmarkDecideLargeNamespaceReadingEveryWorkload(b *testing.B) {
	s, st := largeNamespace(10000)
	benchmarkDecide(b, s, st)
}

// BenchmarkReadFacts measures reading one workload's facts: the agent's
// cost per object change.
func BenchmarkReadFacts(b *testing.B) {
	s, _ := movedNamespace(1000)
	w := &s.Workloads[0] // carries a move record and a restart stamp
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ReadFacts(w)
	}
}

func benchmarkDecide(b *testing.B, s Snapshot, st *Status) {
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

// BenchmarkPlanWaves measures planning 10,000 Deployments in 100
// namespaces, their facts kept, as the agent's caches hand them to the
// holders metric's plans.
func BenchmarkPlanWaves(b *testing.B) {
	benchmarkPlanWaves(b, true)
}

// BenchmarkPlanWavesReadingEveryWorkload is BenchmarkPlanWaves reading
// every workload's labels and annotations in the call: a plan over
// objects never read before (`meshwave plan` reads each once, as it
// gathers).
func BenchmarkPlanWavesReadingEveryWorkload(b *testing.B) {
	benchmarkPlanWaves(b, false)
}

func benchmarkPlanWaves(b *testing.B, kept bool) {
	var inputs []PlanInput
	for n := 0; n < 100; n++ {
		s, _ := largeNamespace(100)
		s.Namespace.Name = fmt.Sprintf("ns-%03d", n)
		if kept {
			s = keepFacts(s)
		}
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

// movedNamespace is largeNamespace late in its migration: of n two-pod
// Deployments, the first 70% were moved in earlier waves of 50 and carry
// the records of those moves and their restart stamps, and the next 50
// are the wave in flight, patched and rolling out.
func movedNamespace(n int) (Snapshot, *Status) {
	s, st := largeNamespace(n)
	s.Namespace.Labels[LabelRev] = "1-26" // switched at the first wave
	moved := n * 7 / 10
	wave := 1 + moved/50
	st.Wave, st.Workloads = wave, nil
	for i := range s.Workloads[:moved+50] {
		w := &s.Workloads[i]
		rec := MoveRecord{Revision: "1-26", From: "1-25", Wave: 1 + i/50, At: t0, Migration: st.MigrationID()}
		w.Annotations[AnnotationMove] = rec.Encode()
		w.TemplateAnnotations[AnnotationRestartedAt] = t0.Format(time.RFC3339)
		if i < moved {
			onRevision("1-26")(w)
		} else {
			st.Workloads = append(st.Workloads, WorkloadState{Name: w.Name, State: StateMoving})
		}
	}
	return s, st
}

// BenchmarkDecideMovedNamespace measures one decision over 10,000
// Deployments of which 7,050 carry a move record, their facts kept.
func BenchmarkDecideMovedNamespace(b *testing.B) {
	s, st := movedNamespace(10000)
	s = keepFacts(s)
	pending := []Verdict{{Gate: "rollout", Result: ResultPending, RetryAfter: time.Second}}
	cfg := Config{Sizes: WaveSizes{CanarySize: 1, BatchSize: 50}}
	if d := Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Minute), Config: cfg}); len(d.Moves) > 0 || d.Status != nil && d.Status.Phase != PhaseMigrating {
		b.Fatalf("the namespace is not mid-wave as meant: %d moves, status %+v", len(d.Moves), d.Status)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Minute), Config: cfg})
	}
}
