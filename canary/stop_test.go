package canary

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestANamespaceOptedOutWhileWaitingForItsWindowStopsWithAStatusThatReadsBack(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(s *sim)
		wave  int
	}{
		{"before the first wave", func(s *sim) {}, 0},
		{"between waves", func(s *sim) {
			s.now = at(t, "2026-11-29T14:59:00Z")
			s.decide(nil)
			s.rollOut("1-26", "a")
			s.decide(s.gates())
		}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, deploy("a"), deploy("b"))
			s.cfg.MaintenanceWindows = windowAt2pm(t)
			c.setup(s)
			s.now = at(t, "2026-11-29T16:00:00Z")
			s.decide(nil)
			require.NotNil(t, s.status.NextWindow, "waiting for its window")
			require.Equal(t, c.wave, s.status.Wave)

			delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
			d := s.decide(nil) // the sim fails the test unless the status reads back
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseStopped, d.Status.Phase)
			assert.Nil(t, d.Status.NextWindow, "a stopped namespace waits for no window")
		})
	}
}

// The status written for a target that is not a name names no target;
// removing the annotation stops it, still without one, and that status
// reads back.
func TestAStatusBlockedOnATargetThatIsNoNameReadsBackOnceTheTargetIsRemoved(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = ""
	s.decide(nil)
	require.Equal(t, PhaseBlocked, s.status.Phase)
	require.Empty(t, s.status.Target)

	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	d := Decide(Input{Snapshot: s.snap, Status: s.status, Now: s.now, Config: s.cfg, WasOptedIn: true})
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseStopped, d.Status.Phase)
	assert.NoError(t, d.Status.Validate(), "meshwave writes a status it cannot read back")
}
