package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// neverMeets is a namespace window that never meets windowAt2pm: Mondays
// at midnight, against every day at 14:00.
const neverMeets = `{"schedule":"0 0 * * 1","duration":"1h"}`

const neverMeetsError = `meshwave.io/maintenance-window on namespace shop: "{\"schedule\":\"0 0 * * 1\",\"duration\":\"1h\"}" is not windows that meet the agent's maintenanceWindows within a year (a namespace narrows them, never widens them); a rollback runs whatever the windows say, so it goes on`

// rollingBackA is a namespace whose canary a failed: it rolls a back.
func rollingBackA(t *testing.T) *sim {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:30:00Z")
	s.decide(nil)
	s.rollOut("1-26", "a")
	errRate := Verdict{Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3 > threshold 0.05"}
	s.decide([]Verdict{pass("rollout"), errRate})
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	return s
}

func TestAWindowAnnotationThatNeverMeetsDoesNotStopARollback(t *testing.T) {
	for _, value := range []string{neverMeets, `{"schedule":"every day"}`} {
		t.Run(value, func(t *testing.T) {
			s := rollingBackA(t)
			s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = value
			s.rollOut("1-25", "a")
			s.now = s.now.Add(time.Minute)
			d := s.decide(s.gates())
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseRolledBack, d.Status.Phase, "the rollback ends; it is not blocked")
			assert.Equal(t, "rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: a: 5xx ratio 0.3 > threshold 0.05", d.Status.Reason)
			require.Len(t, d.Events, 2)
			assert.Equal(t, "InvalidAnnotation", d.Events[0].Reason)
			assert.Equal(t, EventWarning, d.Events[0].Type)
			assert.Contains(t, d.Events[0].Message, "meshwave.io/maintenance-window on namespace shop: ")
			assert.Contains(t, d.Events[0].Message, "; a rollback runs whatever the windows say, so it goes on")
			assert.Equal(t, "RolledBack", d.Events[1].Reason)
			assert.Contains(t, d.Status.Warnings, d.Events[0].Message, "the status says so too")
			assert.Equal(t, map[string]int{"a": 2}, s.patches)
		})
	}
}

func TestAWindowAnnotationSetDuringARollbackIsReportedOnce(t *testing.T) {
	s := rollingBackA(t)
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	s.now = s.now.Add(time.Minute)
	d := s.decide(s.gates()) // a is still rolling back
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Equal(t, []Event{{Type: EventWarning, Reason: "InvalidAnnotation", Message: neverMeetsError}}, d.Events)
	assert.Equal(t, neverMeetsError, d.Status.Warnings[len(d.Status.Warnings)-1])

	s.now = s.now.Add(time.Minute)
	d = s.decide(s.gates())
	assert.Nil(t, d.Status, "nothing changed")
	assert.Empty(t, d.Events, "reported once")
}

func TestAWindowAnnotationBlocksNoRollbackAskedInTheSameEdit(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:30:00Z")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	require.Len(t, d.Moves, 1)
	assert.True(t, d.Moves[0].Record.Rollback)
	assert.True(t, d.ClearRollback)
}

func TestARollbackBlockedByAWindowAnnotationGoesOn(t *testing.T) {
	s := rollingBackA(t)
	// A status a version that blocked on the annotation left behind.
	blocked := s.status.DeepCopy()
	blocked.BlockedPhase, blocked.Phase, blocked.BlockedKind = blocked.Phase, PhaseBlocked, BlockedInvalidInput
	blocked.Reason = "invalid input: " + neverMeets
	s.status = blocked
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	s.rollOut("1-25", "a")
	d := s.decide(s.gates())
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase, "unblocked, the rollback goes on")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
}

func TestAWindowAnnotationThatNeverMeetsStillBlocksAMigrationGoingForward(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:30:00Z")
	s.decide(nil)
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, PhaseMigrating, d.Status.BlockedPhase)
	assert.Empty(t, d.Moves)
}
