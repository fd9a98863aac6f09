package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decideStoppingAfterTheNamespaceWrite decides as the sim does, but the
// agent stops right after the namespace write: the status and label land,
// no workload patch does.
func (s *sim) decideStoppingAfterTheNamespaceWrite(verdicts []Verdict) Decision {
	s.t.Helper()
	in := Input{Snapshot: s.snap, Status: s.status, Verdicts: verdicts, Now: s.now, Config: s.cfg, WasOptedIn: s.optedIn}
	d := Decide(in)
	_, s.optedIn = s.snap.Namespace.Annotations[AnnotationTargetRevision]
	written := d
	written.Moves, written.Evictions, written.Events = nil, nil, nil
	s.apply(written)
	return d
}

func TestAFirstWaveNoneOfWhoseRestartsWentOutWaitsForTheNextWindow(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:59:50Z")
	d := s.decideStoppingAfterTheNamespaceWrite(nil)
	require.Equal(t, 1, s.status.Wave)
	require.Len(t, d.Moves, 1, "the decision asked for a's restart, which never went out")
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	s.now = at(t, "2026-11-29T15:10:00Z") // back after the window closed
	d = s.decide(nil)
	assert.Empty(t, d.Moves, "no restart goes out of the window")
	assert.Equal(t, "1-25", d.Label, "the label goes back to the source: pods created meanwhile keep their revision")
	require.NotNil(t, d.Status)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, 0, d.Status.Wave)
	assert.Nil(t, d.Status.StartedAt)
	assert.Equal(t, "the first wave of 2 is waiting for the maintenance window opening at 2026-11-30T14:00:00Z", d.Status.Reason)
	assert.Equal(t, at(t, "2026-11-30T14:00:00Z"), *d.Status.NextWindow)
	assert.Equal(t, "1-25", d.Status.SourceLabel, "the source is kept until the wave starts")
	assert.False(t, d.Status.HoldsSlot(), "a migration that has not started holds no slot")
	assert.Equal(t, []Event{
		{Type: EventNormal, Reason: "WaveDeferred", Message: "wave 1 was written as started, but none of its workloads was restarted before the maintenance window closed: it starts when a window opens"},
		{Type: EventNormal, Reason: "WaitingForWindow", Message: d.Status.Reason},
	}, d.Events)
	assert.Equal(t, at(t, "2026-11-30T14:00:00Z").Sub(s.now), d.RequeueAfter)

	d = s.decide(nil)
	assert.Nil(t, d.Status, "the wait is written once")
	assert.Empty(t, d.Events)

	s.now = at(t, "2026-11-30T14:00:00Z")
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Equal(t, "1-26", d.Label)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: s.now, Migration: "1-26@2026-11-30T14:00:00Z"}, d.Moves[0].Record)
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
}

func TestALaterWaveNoneOfWhoseRestartsWentOutWaitsForTheNextWindow(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.cfg.DelayBetweenWaves = 0
	s.now = at(t, "2026-11-29T14:50:00Z")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.now = at(t, "2026-11-29T14:59:50Z")
	d := s.decideStoppingAfterTheNamespaceWrite(s.gates())
	require.Equal(t, 2, s.status.Wave, "wave 1 passed and wave 2 was written as started")
	require.Len(t, d.Moves, 1)
	require.Equal(t, "b", d.Moves[0].Workload)

	s.now = at(t, "2026-11-29T15:10:00Z")
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label, "the label stays on the target the first wave moved to")
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, "wave 2 is waiting for the maintenance window opening at 2026-11-30T14:00:00Z", d.Status.Reason)
	assert.True(t, d.Status.HoldsSlot(), "half-way, it keeps its slot")
	assert.Equal(t, Counts{Total: 2, Pending: 1, Moved: 1}, d.Status.Counts)

	s.now = at(t, "2026-11-30T14:00:00Z")
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

func TestAWaveWrittenAsStartedIsRestartedWhenTheAgentComesBackInsideTheWindow(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:59:00Z")
	s.decideStoppingAfterTheNamespaceWrite(nil)

	s.now = at(t, "2026-11-29T14:59:30Z")
	d := s.decide(nil)
	require.Len(t, d.Moves, 1, "the missing restart is sent while the window is open")
	assert.Equal(t, "a", d.Moves[0].Workload)
	assert.Nil(t, d.Status, "the wave in flight is unchanged")
	assert.Equal(t, 1, s.status.Wave)
}

func TestAWaveOneOfWhoseRestartsWentOutFinishesAfterTheWindowCloses(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.cfg.Sizes = WaveSizes{CanarySize: 2}
	s.now = at(t, "2026-11-29T14:59:50Z")
	d := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	require.Len(t, d.Moves, 2)
	d.Moves = d.Moves[:1] // a's restart went out, b's did not
	s.apply(d)

	s.now = at(t, "2026-11-29T15:10:00Z")
	d = s.decide(nil)
	require.Len(t, d.Moves, 1, "the wave started: its last restart goes out whatever the hour")
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Nil(t, d.Status, "the status is unchanged")
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

func TestAWaveWithoutWindowsIsNeverDeferred(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decideStoppingAfterTheNamespaceWrite(nil)
	s.now = s.now.Add(24 * time.Hour)
	d := s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
}
