package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forgedCompleted is a Completed status for shop's move to 1-26, as a
// person would write it over a namespace that never moved.
const forgedCompleted = `{"phase":"Completed","target":"1-26","targetRevision":"1-26","sourceLabel":"1-25","sourceRevision":"1-25","wave":2,"totalWaves":2,"counts":{"total":2,"moved":2},"startedAt":"2025-12-31T00:00:00Z","completedAt":"2026-01-01T00:00:00Z"}`

// A Completed status over a namespace whose label, move records and pods
// show no move is not believed: a StatusRejected Event names what
// contradicts it, and the migration runs from where the workloads are,
// moving each once.
func TestACompletedStatusNothingInTheNamespaceShowsIsRejected(t *testing.T) {
	s := batchedSim(t, "a", "b")
	raw := forgedCompleted
	s.raw, s.optedIn = &raw, true
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, "1-25", d.Status.SourceRevision)
	assert.Equal(t, "1-26", d.Label)
	var rejected []string
	for _, e := range s.events {
		if e.Reason == "StatusRejected" {
			rejected = append(rejected, e.Message)
		}
	}
	assert.Equal(t, []string{"the status says migration 1-26@2025-12-31T00:00:00Z completed 2 waves, but the namespace is not labelled istio.io/rev=1-26, no workload carries a move record of it and no pod runs 1-26, while deployment a, deployment b still run elsewhere; the migration starts over from where the workloads run"}, rejected)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

// What founds a completion: the label on the target, a move record of the
// migration, a pod on the target, or nothing left elsewhere but what the
// migration left out.
func TestACompletedStatusIsBelievedWhenAnythingShowsTheMove(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s *sim)
	}{
		{"the label on the target", func(s *sim) { s.snap.Namespace.Labels[LabelRev] = "1-26" }},
		{"a pod on the target", func(s *sim) { s.rollOut("1-26", "a") }},
		{"nothing but a gateway elsewhere", func(s *sim) {
			s.snap.Workloads = []Workload{deploy("gw", label("istio", "ingressgateway"))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := batchedSim(t, "a", "b")
			raw := forgedCompleted
			s.raw, s.optedIn = &raw, true
			tc.edit(s)
			s.now = s.now.Add(time.Minute)
			s.decide(nil)
			assert.NotContains(t, s.reasons(), "StatusRejected")
			assert.Empty(t, s.patches)
		})
	}
}
