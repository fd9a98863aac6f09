package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// withFacts is in with every workload carrying its Facts, as the agent
// hands them in; the workloads are copies, so in is left as it was.
func withFacts(in Input) Input {
	ws := make([]Workload, len(in.Snapshot.Workloads))
	for i, w := range in.Snapshot.Workloads {
		w.Facts = ReadFacts(&w)
		ws[i] = w
	}
	in.Snapshot.Workloads = ws
	return in
}

// decideBothWays decides in twice, once reading every workload's labels
// and annotations and the peers as given, and once from the Facts kept
// beside the workloads and the peers read on demand (as the agent hands
// both in), and fails t unless both decisions are the same.
func decideBothWays(t testing.TB, in Input) Decision {
	t.Helper()
	kept := withFacts(in)
	kept.Status = in.Status.DeepCopy()
	peers := in.Snapshot.Peers
	kept.Snapshot.Peers = nil
	reads := 0
	kept.Snapshot.ReadPeers = func() []Peer { reads++; return peers }
	want := Decide(in)
	got := Decide(kept)
	require.Equal(t, want, got, "the decision from kept facts differs from the one that read the workloads")
	requireAdmitted(t, in, got, reads)
	return want
}

func TestFactsAreWhatADecisionReads(t *testing.T) {
	gw := deploy("istio-ingressgateway", label("istio", "ingressgateway"))
	bad := deploy("bad", waveAnn("-1"), ann(AnnotationSkip, "maybe"))
	moved := deploy("moved", onRevision("1-26"), ann(AnnotationMove, `{"revision":"1-26","from":"1-25","wave":1,"at":"2026-11-29T12:00:00Z","migration":"1-26@2026-11-29T12:00:00Z"}`))
	skipped := deploy("skipped", ann(AnnotationSkip, "true"), waveAnn("3"), ann(AnnotationReadinessTimeout, "90s"))

	f := ReadFacts(&gw)
	require.Equal(t, &Facts{Settings: WorkloadSettings{Wave: DefaultWave}, Gateway: "gateway (istio=ingressgateway)"}, f)

	f = ReadFacts(&bad)
	require.Equal(t, []string{AnnotationWave, AnnotationSkip}, []string{f.Errors[0].Key, f.Errors[1].Key})
	require.Equal(t, "-1", f.Errors[0].Value)

	f = ReadFacts(&moved)
	require.NotNil(t, f.Record)
	require.Equal(t, MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: t0, Migration: "1-26@2026-11-29T12:00:00Z"}, *f.Record)

	f = ReadFacts(&skipped)
	require.Equal(t, WorkloadSettings{Wave: 3, Skip: true, ReadinessTimeout: 90 * time.Second}, f.Settings)
	require.Nil(t, f.Record)
	require.Empty(t, f.Gateway)
}

// A workload's Facts are taken as they are: a decision does not read the
// maps of a workload that carries them. (The agent keeps them beside the
// very object they were read from, which never changes.)
func TestADecisionTakesTheFactsAWorkloadCarries(t *testing.T) {
	a, b := deploy("a"), deploy("b")
	b.Facts = &Facts{Settings: WorkloadSettings{Wave: DefaultWave}, Gateway: "gateway (told)"}
	p := PlanNamespace("shop", []Workload{a, b}, "1-26", "", 0, WaveSizes{CanarySize: 1, BatchSize: 5})
	require.Equal(t, [][]string{{"a"}}, waveNames(p))
	require.Equal(t, []Exclusion{{"b", "gateway (told)"}}, p.Excluded)
}

func TestDecisionsAreTheSameFromKeptFacts(t *testing.T) {
	s, st := movedNamespace(300)
	s.Workloads[3].Labels["istio"] = "ingressgateway"
	s.Workloads[250].Annotations[AnnotationSkip] = "true"
	s.Workloads[260].Annotations[AnnotationWave] = "x"
	cfg := Config{Sizes: WaveSizes{CanarySize: 1, BatchSize: 50}}
	for _, verdicts := range [][]Verdict{
		{{Gate: "rollout", Result: ResultPending, RetryAfter: time.Second}},
		{{Gate: "rollout", Result: ResultPass, Reason: "rolled out"}},
		{{Gate: "rollout", Result: ResultFail, Reason: "crashing"}},
	} {
		in := Input{Snapshot: s, Status: st, Verdicts: verdicts, Now: t0.Add(time.Minute), Config: cfg}
		decideBothWays(t, in)
		w, ok := waveToVerify(s, st, cfg)
		kw, kok := waveToVerify(withFacts(in).Snapshot, st, cfg)
		require.Equal(t, ok, kok)
		require.Equal(t, len(w.Workloads), len(kw.Workloads))
	}
	delete(s.Workloads[260].Annotations, AnnotationWave)
	in := Input{Snapshot: s, Status: st, Now: t0.Add(time.Minute), Config: cfg}
	require.Equal(t, PlanWaves([]PlanInput{{Snapshot: s, Status: st}}, cfg.Sizes), PlanWaves([]PlanInput{{Snapshot: withFacts(in).Snapshot, Status: st}}, cfg.Sizes))
}

// A decision reads the peers only to decide whether the namespace may
// start, and then once.
func TestADecisionReadsThePeersOnlyForAdmission(t *testing.T) {
	reads := 0
	busy := func() []Peer {
		reads++
		return []Peer{{Name: "cart", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	}
	s := snap(deploy("a"), deploy("b"))
	s.ReadPeers = busy
	d := Decide(Input{Snapshot: s, Now: t0, Config: Config{Concurrency: 1}})
	require.Equal(t, 1, reads)
	require.Equal(t, PhasePending, d.Status.Phase)
	require.Empty(t, d.Moves)

	s.ReadPeers = func() []Peer { reads++; return nil }
	d = Decide(Input{Snapshot: s, Now: t0, Config: Config{Concurrency: 1}})
	require.Equal(t, 2, reads)
	require.Equal(t, PhaseMigrating, d.Status.Phase)
	require.Len(t, d.Moves, 1)

	// Under way, the next decisions never read them.
	s.ReadPeers = func() []Peer { t.Fatal("a migration under way read its peers"); return nil }
	Decide(Input{Snapshot: s, Status: d.Status, Now: t0.Add(time.Second), Config: Config{Concurrency: 1},
		Verdicts: []Verdict{{Gate: "rollout", Result: ResultPending, RetryAfter: time.Second}}})
}
