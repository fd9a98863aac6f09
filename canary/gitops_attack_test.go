package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// migrateAll runs the sim's migration to its end, rolling out each move.
func migrateAll(t *testing.T, s *sim) {
	t.Helper()
	for i := 0; i < 50 && s.status.Phase != PhaseCompleted; i++ {
		s.now = s.now.Add(time.Minute)
		d := s.decide(s.gates())
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
}

func TestMoreTemplatesRevertedThanTheStatusRemembersAreReportedOnceAndTheStatusSettles(t *testing.T) {
	var ws []Workload
	for i := 0; i < 12; i++ {
		ws = append(ws, deploy(fmt.Sprintf("w%02d", i), argoApp("shop")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 20}
	s.decide(nil)
	s.rollOut("1-26", "w00")
	migrateAll(t, s)

	// Argo CD's self-heal takes every template back from git.
	for i := range s.snap.Workloads {
		delete(s.snap.Workloads[i].TemplateAnnotations, AnnotationRestartedAt)
	}
	s.now = s.now.Add(time.Minute)
	s.events = nil
	d := s.decide(nil)
	assert.Len(t, d.Reverts, maxReverts, "each reverted template the status can remember is reported")
	assert.Len(t, s.status.Reverts, maxReverts)
	assert.Contains(t, s.status.Warnings, templatesUnlistedWarning, "the others together")
	assert.Equal(t, maxReverts+1, len(s.events))

	for i := 0; i < 5; i++ {
		s.now = s.now.Add(time.Second)
		s.events = nil
		d = s.decide(nil)
		assert.Empty(t, d.Reverts, "reported once, not again at decision %d", i)
		assert.Nil(t, d.Status, "nothing new to write at decision %d", i)
		assert.NotContains(t, s.reasons(), "TemplateReverted")
	}
}

func TestAnArgoCDTrackingIDOfAnyLengthKeepsTheStatusReadable(t *testing.T) {
	app := strings.Repeat("x", 100_000)
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationArgoTrackingID] = app + ":/Namespace:shop"
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	for n := 1; n <= 3; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-25"
		s.decide(nil) // sim.apply requires the status written to read back
	}
	assert.Equal(t, PhasePaused, s.status.Phase, "three reverts pause, whatever the owner's name")
	for _, r := range s.status.Reverts {
		assert.LessOrEqual(t, len(r.Owner), 512)
	}
	for _, r := range s.last.Reverts {
		assert.LessOrEqual(t, len(r.Owner), 512, "the metric's owner label is bounded")
	}
}
