package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// A person (or a restored backup) sets sourceLabel 1-25 and sourceRevision
// 9-99, which no injector serves, on a namespace paused before its first
// wave. The source a waiting status carries is checked before the start:
// the namespace is blocked, or starts from its real source 1-25; it never
// starts with every move record saying From 9-99 and a rollback whose
// gates expect pods on 9-99 (label 1-25 injects 1-25), which never pass.
func TestAnEditedSourceRevisionOnAWaitingStatusIsNotTrusted(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)
	require.Equal(t, 0, s.status.Wave)
	s.editStatus(func(m map[string]any) {
		m["sourceLabel"], m["sourceRevision"] = "1-25", "9-99"
	})
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	if s.status.Wave == 0 {
		assert.Equal(t, PhaseBlocked, s.status.Phase, "refused, or started with the real source")
		return
	}
	assert.Equal(t, "1-25", s.status.SourceRevision, "started from an uninstalled source revision")
	for _, m := range d.Moves {
		assert.Equal(t, "1-25", m.Record.From, m.Workload)
	}
}
