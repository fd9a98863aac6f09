package canary

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sim is an in-memory namespace that applies decisions the way the agent
// does, so whole migrations can be played through Decide.
type sim struct {
	t       *testing.T
	snap    Snapshot
	status  *Status
	now     time.Time
	cfg     Config
	patches map[string]int
	events  []Event
	last    Decision
	// raw, when set, is the status annotation as a person or an older
	// writer left it, read back as the agent reads it.
	raw *string
	// refused are the move patches the apiserver refuses, with its answer;
	// answers are the refusals of the last decision's patches, which the
	// next decision is told about, as the agent does.
	refused, answers map[string]string
	// restored counts the patches that only wrote a move record back.
	restored map[string]int
	// optedIn is whether the namespace carried its target at the last
	// decision, as the agent remembers it.
	optedIn bool
}

func newSim(t *testing.T, ws ...Workload) *sim {
	return &sim{t: t, snap: snap(ws...), now: t0, cfg: Config{DelayBetweenWaves: time.Minute}, patches: map[string]int{}}
}

// decide runs one decision with the given verdicts and applies it.
func (s *sim) decide(verdicts []Verdict) Decision {
	s.t.Helper()
	in := Input{Snapshot: s.snap, Status: s.status, Verdicts: verdicts, Now: s.now, Config: s.cfg, WasOptedIn: s.optedIn}
	if s.raw != nil {
		in.Status, _, in.StatusErr = ParseStatus(map[string]string{AnnotationStatus: *s.raw})
	}
	in.Refused, s.answers = s.answers, nil
	d := decideBothWays(s.t, in)
	_, s.optedIn = s.snap.Namespace.Annotations[AnnotationTargetRevision]
	s.apply(d)
	s.last = d
	return d
}

func (s *sim) apply(d Decision) {
	if d.Status != nil {
		// Every status meshwave writes is one it reads back as valid.
		raw, err := d.Status.Encode()
		require.NoError(s.t, err)
		back, _, err := ParseStatus(map[string]string{AnnotationStatus: raw})
		require.NoError(s.t, err, "the status written reads back: %s", raw)
		s.status, s.raw = back, nil
	}
	if d.SetPaused {
		s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	}
	if d.ClearRollback {
		delete(s.snap.Namespace.Annotations, AnnotationRollback)
	}
	if d.Label != "" {
		s.snap.Namespace.Labels[LabelRev] = d.Label
	}
	for _, m := range d.Moves {
		if answer, ok := s.refused[m.Workload]; ok {
			if s.answers == nil {
				s.answers = map[string]string{}
			}
			s.answers[m.Workload] = answer
			continue
		}
		if m.RecordOnly {
			if s.restored == nil {
				s.restored = map[string]int{}
			}
			s.restored[m.Workload]++
		} else {
			s.patches[m.Workload]++
		}
		for i := range s.snap.Workloads {
			w := &s.snap.Workloads[i]
			if w.Name != m.Workload {
				continue
			}
			var p struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					Template struct {
						Metadata struct {
							Annotations map[string]string `json:"annotations"`
						} `json:"metadata"`
					} `json:"template"`
				} `json:"spec"`
			}
			require.NoError(s.t, json.Unmarshal(m.Patch, &p))
			for k, v := range p.Metadata.Annotations {
				w.Annotations[k] = v
			}
			for k, v := range p.Spec.Template.Metadata.Annotations {
				w.TemplateAnnotations[k] = v
			}
		}
	}
	s.events = append(s.events, d.Events...)
}

// rollOut makes every pod of the named workloads run rev.
func (s *sim) rollOut(rev string, names ...string) {
	for _, n := range names {
		for i := range s.snap.Workloads {
			if s.snap.Workloads[i].Name == n {
				onRevision(rev)(&s.snap.Workloads[i])
			}
		}
	}
}

// gates evaluates a stand-in chain: each wave member passes when its pods
// run the expected revision, else it is pending.
func (s *sim) gates() []Verdict {
	w, ok := WaveToVerify(s.snap, s.status, s.cfg)
	if !ok {
		return nil
	}
	for _, m := range w.Workloads {
		for _, p := range m.Pods {
			if p.Revision != w.Expect {
				return []Verdict{{Gate: "rollout", Result: ResultPending, Reason: m.Name + " rolling out", RetryAfter: 5 * time.Second}}
			}
		}
	}
	return []Verdict{{Gate: "rollout", Result: ResultPass, Reason: "all rolled out"}}
}

func (s *sim) reasons() []string {
	var out []string
	for _, e := range s.events {
		out = append(out, e.Reason)
	}
	return out
}

func pass(gate string) Verdict { return Verdict{Gate: gate, Result: ResultPass, Reason: "ok"} }

func TestAFreshNamespaceStartsWithTheCanaryWave(t *testing.T) {
	s := newSim(t, deploy("b"), deploy("a", waveAnn("0")), deploy("c"))
	d := s.decide(nil)

	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Equal(t, 2, d.Status.TotalWaves, "a canary of 1, then b and c in one batch")
	assert.Equal(t, []WorkloadState{{Name: "a", State: StateMoving}}, d.Status.Workloads)
	assert.Equal(t, "1-25", d.Status.SourceLabel)
	assert.Equal(t, "1-26", d.Label)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
	assert.Equal(t, MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: t0, Migration: "1-26@2026-11-29T12:00:00Z"}, d.Moves[0].Record)
	assert.Equal(t, []string{"MigrationStarted", "WaveStarted", "Restarted"}, s.reasons())
	assert.Equal(t, "wave 1/2 (canary) started: a", d.Events[1].Message)
	assert.Equal(t, Counts{Total: 3, Pending: 2, Moving: 1}, d.Status.Counts)
}

func TestAWholeMigrationMovesEveryWaveInOrderAndCompletes(t *testing.T) {
	s := newSim(t, deploy("a", waveAnn("0")), deploy("b", waveAnn("1")), deploy("c", waveAnn("1")), deploy("d"),
		deploy("gw", label("istio", "ingressgateway")))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	var order [][]string
	for i := 0; i < 40 && (s.status == nil || s.status.Phase != PhaseCompleted); i++ {
		d := s.decide(s.gates())
		if len(d.Moves) > 0 {
			var names []string
			for _, m := range d.Moves {
				names = append(names, m.Workload)
			}
			order = append(order, names)
			s.rollOut("1-26", names...)
		}
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
	assert.Equal(t, [][]string{{"a"}, {"b", "c"}, {"d"}}, order)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, s.patches, "each workload is patched exactly once; the gateway never")
	assert.Equal(t, "moved 4 workloads to 1-26 in 3 waves", s.status.Reason)
	assert.Equal(t, Counts{Total: 5, Moved: 4, Skipped: 1}, s.status.Counts)
	assert.Equal(t, 3, s.status.TotalWaves)
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
}

func TestTheNextWaveWaitsForTheDelayBetweenWaves(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	d := s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, time.Minute, d.RequeueAfter)
	assert.Empty(t, d.Moves)

	s.now = s.now.Add(30 * time.Second)
	d = s.decide(nil)
	assert.Nil(t, d.Status, "nothing changes before the delay is over")
	assert.Equal(t, 30*time.Second, d.RequeueAfter)

	s.now = s.now.Add(30 * time.Second)
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
}

func TestAnAgentRestartedAfterTheStatusWriteSendsOnlyTheMissingPatches(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 2}
	d := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	require.Len(t, d.Moves, 2)
	// The status and the first patch landed; the agent died before the second.
	s.status = d.Status.DeepCopy()
	s.snap.Namespace.Labels[LabelRev] = d.Label
	s.apply(Decision{Moves: d.Moves[:1]})

	s.now = s.now.Add(time.Second)
	d = s.decide(s.gates())
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Equal(t, 1, d.Moves[0].Record.Wave)

	s.rollOut("1-26", "a", "b")
	d = s.decide(s.gates())
	assert.Empty(t, d.Moves, "no workload is patched twice")
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

func TestInvalidAnnotationsBlockTheNamespaceAndWriteNothingElse(t *testing.T) {
	s := newSim(t, deploy("cart", waveAnn("abc")), deploy("web"))
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, `invalid input: meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`, d.Status.Reason)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
	assert.False(t, d.SetPaused)
	assert.Zero(t, d.RequeueAfter, "retrying invalid input does not help")
	assert.Equal(t, []Event{
		{Workload: "cart", Type: EventWarning, Reason: "InvalidAnnotation", Message: `meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`},
		{Type: EventWarning, Reason: "InvalidAnnotation", Message: `invalid input: meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`},
	}, d.Events)

	d = s.decide(nil)
	assert.Nil(t, d.Status, "the same problem is not written again")
	assert.Empty(t, d.Events, "nor reported again")

	delete(s.snap.Workloads[0].Annotations, AnnotationWave)
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, "fixing the value lets it start")
}

func TestInvalidInputMidWaveBlocksAndThenResumesWhereItWas(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Namespace.Annotations[AnnotationPriority] = "first"
	d := s.decide(s.gates())
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, PhaseMigrating, d.Status.BlockedPhase)
	assert.Empty(t, d.Moves)

	delete(s.snap.Namespace.Annotations, AnnotationPriority)
	s.rollOut("1-26", "a")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, WaveVerifying, d.Status.WaveState)
	assert.Empty(t, d.Moves, "the wave's workload is not restarted again")
	d = s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
}

func TestATargetThatNamesNothingBlocks(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-99"
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, `meshwave.io/target-revision on namespace shop: "1-99" is not an installed revision or tag`)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
}

func TestPrechecks(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Snapshot)
		reason string
		retry  bool
	}{
		{"a namespace without injected pods is never relabelled", func(s *Snapshot) {
			for i := range s.Workloads {
				notInjected()(&s.Workloads[i])
			}
		}, "precheck failed: nothing to migrate: no workload has an injected pod; istio.io/rev stays 1-25", false},
		{"istio-injection takes precedence over istio.io/rev", func(s *Snapshot) { s.Namespace.Labels[LabelInjection] = "enabled" },
			"precheck failed: namespace carries istio-injection=enabled, which takes precedence over istio.io/rev, so switching istio.io/rev would move nothing; move it to istio.io/rev first", false},
		{"a namespace without istio.io/rev is left alone", func(s *Snapshot) { delete(s.Namespace.Labels, LabelRev) },
			"precheck failed: namespace has no istio.io/rev label; meshwave moves namespaces that select their revision with istio.io/rev", false},
		{"a source revision that is gone blocks, since a rollback would have nowhere to go", func(s *Snapshot) { delete(s.Mesh.Revisions, "1-25") },
			"precheck failed: its source revision istio.io/rev=1-25 is not installed (no injector webhook configuration), so a rollback would have nowhere to go", true},
		{"a target without a ready istiod waits", func(s *Snapshot) { s.Mesh.Revisions["1-26"] = Revision{Name: "1-26", Istiods: 2} },
			"precheck failed: revision 1-26 has no Ready istiod pod (2 pods)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t, deploy("a"))
			tt.mutate(&s.snap)
			d := s.decide(nil)
			assert.Equal(t, PhaseBlocked, d.Status.Phase)
			assert.Equal(t, tt.reason, d.Status.Reason)
			assert.Empty(t, d.Label)
			assert.Empty(t, d.Moves)
			assert.Equal(t, tt.retry, d.RequeueAfter > 0)
			assert.Equal(t, "PrecheckFailed", d.Events[0].Reason)
		})
	}
}

func TestPrecheckWarnsAboutSingleReplicasWithoutPDBAndReportsGateways(t *testing.T) {
	s := newSim(t, deploy("solo", replicas(1)), deploy("guarded", replicas(1), func(w *Workload) { w.HasPDB = true }),
		deploy("ingress", label("operator.istio.io/component", "IngressGateways")))
	d := s.decide(nil)
	assert.Equal(t, []string{
		"deployment solo has one replica and no PodDisruptionBudget: it is unavailable while it restarts",
		"deployment ingress is a gateway (operator.istio.io/component=IngressGateways) and is skipped: once istio.io/rev switches, a restarted gateway pod is injected by 1-26",
	}, d.Status.Warnings)
	assert.Contains(t, s.events, Event{Workload: "ingress", Type: EventNormal, Reason: "Skipped", Message: "gateway (operator.istio.io/component=IngressGateways): never restarted by meshwave; migrate it after its namespace"})
}

func TestANamespaceWaitingForItsTurnStaysPending(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Peers = []Peer{{Name: "cart", Priority: 10, Phase: PhaseMigrating, HoldsSlot: true}}
	d := s.decide(nil)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, "waiting for a free slot: 1 of 1 in use by cart", d.Status.Reason)
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Moves)
}

func failRollout(name, reason string) []Verdict {
	return []Verdict{{Gate: "rollout", Result: ResultFail, Reason: reason, Failed: []WorkloadState{{Name: name, State: StateFailed, Reason: reason}}}}
}

func TestAFailedWaveUnderPausePausesAndResumesWithFreshTimers(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.now = s.now.Add(5 * time.Minute)
	d := s.decide(failRollout("a", "a did not roll out within 5m0s: 1 of 2 updated replicas available"))
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, WaveFailed, d.Status.WaveState)
	assert.True(t, d.SetPaused, "meshwave sets meshwave.io/paused so that removing it resumes")
	assert.Equal(t, "wave 1 failed: rollout fail: a did not roll out within 5m0s: 1 of 2 updated replicas available; paused by failure policy Pause", d.Status.Reason)
	assert.Equal(t, []WorkloadState{{Name: "a", State: StateFailed, Reason: "a did not roll out within 5m0s: 1 of 2 updated replicas available"}}, d.Status.Workloads)
	assert.Equal(t, Counts{Total: 2, Pending: 1, Failed: 1}, d.Status.Counts)
	assert.Contains(t, s.events, Event{Workload: "a", Type: EventWarning, Reason: "WorkloadFailed", Message: "wave 1, rollout: a did not roll out within 5m0s: 1 of 2 updated replicas available"})

	d = s.decide(nil)
	assert.Nil(t, d.Status, "paused stays paused")

	s.now = s.now.Add(10 * time.Minute)
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, WaveVerifying, d.Status.WaveState)
	assert.Equal(t, s.now, *d.Status.GatesSince, "gate timeouts count again from the resume")
	assert.Equal(t, 600.0, d.Status.PausedSeconds)
	assert.Empty(t, d.Moves, "resuming does not restart the workload again")

	s.rollOut("1-26", "a")
	d = s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState)
}

func TestPausingByAnnotationLetsTheWaveInFlightFinish(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.rollOut("1-26", "a")
	d := s.decide(s.gates())
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, "paused by meshwave.io/paused after wave 1", d.Status.Reason)
	assert.False(t, d.SetPaused)
	assert.Empty(t, d.Moves)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
}

func TestAFailedWaveRollsBackByDefault(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	errRate := Verdict{Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3 > threshold 0.05"}
	d := s.decide([]Verdict{pass("rollout"), pass("injection"), pass("xds-sync"), errRate})
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Equal(t, "1-25", d.Label, "the label goes back to the source")
	require.Len(t, d.Moves, 1)
	// In the second of the move it undoes: its stamp is pushed to the
	// second after, and its record says so (Stamp).
	stamp := t0.Add(time.Second)
	assert.Equal(t, MoveRecord{Revision: "1-25", From: "1-26", Wave: 1, At: t0, Rollback: true, Migration: "1-26@2026-11-29T12:00:00Z", Stamp: &stamp}, d.Moves[0].Record)
	assert.Contains(t, string(d.Moves[0].Patch), `"kubectl.kubernetes.io/restartedAt":"2026-11-29T12:00:01Z"`)
	assert.Equal(t, "wave 1 failed: error-rate fail: a: 5xx ratio 0.3 > threshold 0.05", d.Status.Reason)

	w, ok := WaveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.Equal(t, "1-25", w.Expect)
	assert.True(t, w.Rollback)

	s.rollOut("1-25", "a")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
	assert.Equal(t, "rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: a: 5xx ratio 0.3 > threshold 0.05", d.Status.Reason)
	assert.Equal(t, 1, d.Status.Counts.RolledBack)
	assert.Equal(t, map[string]int{"a": 2}, s.patches, "moved once, rolled back once")
	assert.Contains(t, s.reasons(), "RolledBack")

	d = s.decide(nil)
	assert.Nil(t, d.Status, "RolledBack is final")
}

func TestInconclusiveResultsAreRetriedThenPause(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	low := Verdict{Gate: "error-rate", Result: ResultInconclusive, Analysis: true, Checked: true, Reason: "12 requests < minimum 50", RetryAfter: 10 * time.Second}
	chain := []Verdict{pass("rollout"), pass("injection"), pass("xds-sync"), low}
	for i := 1; i <= 2; i++ {
		d := s.decide(chain)
		assert.Equal(t, PhaseAnalyzing, d.Status.Phase)
		assert.Equal(t, i, d.Status.Analysis.Inconclusive)
		assert.Equal(t, 10*time.Second, d.RequeueAfter)
		s.now = s.now.Add(10 * time.Second)
	}
	d := s.decide(chain)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, "wave 1 paused: error-rate inconclusive 3 times: 12 requests < minimum 50", d.Status.Reason)
	assert.True(t, d.SetPaused)
	assert.Empty(t, d.Moves)
	assert.Equal(t, 1, s.patches["a"])
	assert.Zero(t, s.patches["b"], "an inconclusive wave never advances")
}

func TestMetricChecksNeedConsecutivePasses(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.RequiredPasses = 2
	s.cfg.AnalysisInterval = 15 * time.Second
	s.decide(nil)
	s.rollOut("1-26", "a")
	ok := Verdict{Gate: "error-rate", Result: ResultPass, Analysis: true, Checked: true, Reason: "0.1% <= 5%"}
	d := s.decide([]Verdict{pass("rollout"), ok})
	assert.Equal(t, PhaseAnalyzing, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Analysis.ConsecutivePasses)
	assert.Equal(t, 15*time.Second, d.RequeueAfter)
	assert.Equal(t, map[string]time.Time{"error-rate": t0}, d.Status.Analysis.Checked)

	deferred := Verdict{Gate: "error-rate", Result: ResultPending, Analysis: true, Deferred: true, RetryAfter: 7 * time.Second}
	s.now = s.now.Add(8 * time.Second)
	d = s.decide([]Verdict{pass("rollout"), deferred})
	assert.Nil(t, d.Status, "a check that was not due changes nothing")
	assert.Equal(t, 7*time.Second, d.RequeueAfter)

	s.now = s.now.Add(7 * time.Second)
	d = s.decide([]Verdict{pass("rollout"), ok})
	assert.Equal(t, WavePassed, d.Status.WaveState)
}

func TestContinuePolicyToleratesFailuresUpToTheLimit(t *testing.T) {
	var ws []Workload
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		ws = append(ws, deploy(n))
	}
	s := newSim(t, ws...)
	s.cfg.FailurePolicy, s.cfg.MaxFailedPercent = PolicyContinue, 25
	s.cfg.DelayBetweenWaves = 0
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}

	s.decide(nil) // wave 1: a
	d := s.decide(failRollout("a", "a did not roll out"))
	assert.Equal(t, PhaseMigrating, d.Status.Phase, "1 of 5 failed is 20%, within 25%")
	assert.Contains(t, s.reasons(), "FailureTolerated")
	require.Len(t, d.Moves, 1, "before wave 1 is left behind, a's record says it failed")
	assert.True(t, d.Moves[0].RecordOnly)
	assert.Equal(t, OutcomeFailed, d.Moves[0].Record.Outcome)
	assert.Equal(t, 1, d.Status.Wave)

	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	assert.Equal(t, 1, d.Status.PastFailed)
	var moved []string
	for _, m := range d.Moves {
		moved = append(moved, m.Workload)
	}
	assert.Equal(t, []string{"b", "c"}, moved)

	s.rollOut("1-26", "c")
	d = s.decide(failRollout("b", "b did not roll out"))
	assert.Equal(t, PhasePaused, d.Status.Phase, "2 of 5 failed is 40%, over 25%")
	assert.Equal(t, "wave 2 failed: rollout fail: b did not roll out; 2 of 5 workloads failed (40%), over maxFailedPercent 25", d.Status.Reason)
	assert.Equal(t, Counts{Total: 5, Pending: 2, Moving: 1, Failed: 2}, d.Status.Counts)
}

func TestStatusStaysSmallWithThousandsOfWorkloads(t *testing.T) {
	var ws []Workload
	for i := 0; i < 5000; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i)))
	}
	for i := 0; i < 500; i++ {
		ws = append(ws, deploy(fmt.Sprintf("skip-%04d", i), ann(AnnotationSkip, "true")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 50}
	d := s.decide(nil)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	assert.Less(t, len(raw), 8*1024, "status of %d bytes", len(raw))
	assert.Equal(t, 5500, d.Status.Counts.Total)
	assert.Len(t, d.Status.Skipped, maxSkipped)
	assert.True(t, strings.HasPrefix(d.Status.Skipped[0].Workload, "skip-"))
}

// playUntil decides, rolling out every patched workload and passing the
// stand-in gates, until the status reaches phase (or 40 decisions pass).
func (s *sim) playUntil(phase Phase) {
	s.t.Helper()
	for i := 0; i < 40 && (s.status == nil || s.status.Phase != phase); i++ {
		for _, w := range s.snap.Workloads {
			if r, ok := ReadMoveRecord(w.Annotations); ok {
				s.rollOut(r.Revision, w.Name)
			}
		}
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(s.t, phase, s.status.Phase, s.status.Reason)
}

// editStatus rewrites the status JSON as a person would.
func (s *sim) editStatus(edit func(map[string]any)) {
	raw, err := s.status.Encode()
	require.NoError(s.t, err)
	var m map[string]any
	require.NoError(s.t, json.Unmarshal([]byte(raw), &m))
	edit(m)
	out, err := json.Marshal(m)
	require.NoError(s.t, err)
	str := string(out)
	s.raw, s.status = &str, nil
}

// step3 rolls out every workload to its last record, lets two minutes pass
// and decides with the verdicts given.
func (s *sim) step3(verdicts func() []Verdict) Decision {
	for _, w := range s.snap.Workloads {
		if r, ok := ReadMoveRecord(w.Annotations); ok {
			s.rollOut(r.Revision, w.Name)
		}
	}
	s.now = s.now.Add(2 * time.Minute)
	return s.decide(verdicts())
}

// batchedSim is namespace shop of the named workloads, moved in a canary
// of one and then waves of two.
func batchedSim(t *testing.T, names ...string) *sim {
	var ws []Workload
	for _, n := range names {
		ws = append(ws, deploy(n))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	return s
}

// install adds ready control planes of the revisions to the mesh.
func (s *sim) install(revs ...string) {
	for _, rev := range revs {
		s.snap.Mesh.Revisions[rev] = Revision{Name: rev, Istiods: 1, ReadyIstiods: 1}
	}
}

// toWave2 plays a, then b and c: wave 2 is patched, not rolled out.
func toWave2(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 2)
	return s
}

// onTag4 is shop (a, b, c, d) migrating to the tag canary (1-26), with
// 1-27 installed; canary 1, batches of 2.
func onTag4(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c", "d")
	s.install("1-27")
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	return s
}

// toWave2Passed plays onTag4 until wave 2 (b, c) passed: a, b, c on 1-26.
func toWave2Passed(t *testing.T) *sim {
	s := onTag4(t)
	for i := 0; i < 20 && (s.status == nil || s.status.Wave < 2 || s.status.WaveState != WavePassed); i++ {
		s.step3(s.gates)
	}
	require.Equal(t, 2, s.status.Wave)
	require.Equal(t, WavePassed, s.status.WaveState)
	return s
}

// midRollback plays toWave2Passed into a rollback of everything asked by
// a person, left as how says: "rolling back", "paused rolling back" (a
// rollback restart failed) or "blocked rolling back" (an invalid
// annotation). release lifts the pause or the block.
func midRollback(t *testing.T, how string) (s *sim, played []Decision, release func()) {
	t.Helper()
	s = toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	played = append(played, s.step3(s.gates))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	switch how {
	case "paused rolling back":
		s.now = s.now.Add(time.Minute)
		played = append(played, s.decide(failRollout("a", "bad")))
		require.Equal(t, PhasePaused, s.status.Phase)
		require.Equal(t, WaveRollingBack, s.status.WaveState)
	case "blocked rolling back":
		s.snap.Workloads[3].Annotations[AnnotationWave] = "-1"
		played = append(played, s.decide(nil))
		require.Equal(t, PhaseBlocked, s.status.Phase)
	}
	return s, played, func() {
		switch how {
		case "paused rolling back":
			delete(s.snap.Namespace.Annotations, AnnotationPaused)
		case "blocked rolling back":
			delete(s.snap.Workloads[3].Annotations, AnnotationWave)
		}
	}
}

// completedOnTag plays shop to Completed on the tag canary (1-26), then
// repoints canary to 1-27.
func completedOnTag(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c")
	s.install("1-27")
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.playUntil(PhaseCompleted)
	require.Equal(t, "1-26", s.status.TargetRevision)
	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Tags["canary"] = "1-27"
	s.decide(nil)
	require.Equal(t, PhaseCompleted, s.status.Phase)
	require.Equal(t, "1-26", s.status.TargetRevision, "an ended status keeps its revision")
	return s
}
