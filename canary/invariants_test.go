package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The invariants against damaged, stale or hostile state, scenario by
// scenario: each test names the invariant and the scenario that broke it
// before its fix.

// Invariant 1 (no Deployment restarted twice for one move).
//
// Scenario: the status of wave 2 is edited (by a person, or an older tool)
// so that its member list also names a, which moved in wave 1 of this
// migration (or its wave is bumped to 3 with b and c still listed). The
// records show no wave beyond the status's, so nothing is adopted, and
// ensureMoves treats a member whose record is of another wave of the same
// migration as not moved: it is restarted again.
func TestAMemberAlreadyMovedByThisMigrationIsNeverRestartedAgain(t *testing.T) {
	t.Run("a moved workload listed in the wave", func(t *testing.T) {
		s := toWave2(t)
		s.editStatus(func(m map[string]any) {
			ws := m["workloads"].([]any)
			m["workloads"] = append([]any{map[string]any{"name": "a", "state": "Moving"}}, ws...)
		})
		d := s.decide(nil)
		assert.Empty(t, forwardMoves(d), "a already carries wave 1's move of this migration; patches %v", s.patches)
	})
	t.Run("the wave number bumped", func(t *testing.T) {
		s := toWave2(t)
		s.editStatus(func(m map[string]any) { m["wave"], m["totalWaves"] = 3, 3 })
		d := s.decide(nil)
		assert.Empty(t, forwardMoves(d), "b and c already carry wave 2's move of this migration; patches %v", s.patches)
	})
}

// Invariant 4 (meshwave never writes a status it cannot read back; an
// invalid one is rebuilt, never looped on).
//
// Scenario: the namespace was paused by meshwave (policy Pause) and its
// status's pausedAt was edited into the future (a clock-skewed tool, a
// typo of the year). Resuming adds now - pausedAt to pausedSeconds, which
// goes negative, and meshwave writes a status that its own Validate
// refuses: the next reconcile finds it unreadable, emits
// StatusUnreadable and rebuilds it from the records, losing the failure
// history.
func TestAResumeWithAFuturePausedAtWritesAReadableStatus(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.editStatus(func(m map[string]any) { m["pausedAt"] = s.now.Add(time.Hour).Format(time.RFC3339) })
	delete(s.snap.Namespace.Annotations, AnnotationPaused)

	st, _, err := ParseStatus(map[string]string{AnnotationStatus: *s.raw})
	require.NoError(t, err, "the edited status is read as valid")
	d := Decide(Input{Snapshot: s.snap, Status: st, Now: s.now, Config: s.cfg})
	require.NotNil(t, d.Status)
	assert.NoError(t, d.Status.Validate(), "meshwave writes pausedSeconds %v", d.Status.PausedSeconds)
}

// Invariant 9 (bad input: a clear error, and nothing else changes) and
// the status size bound ("bounded in size whatever the namespace holds").
//
// Scenario: a Deployment carries a huge invalid meshwave.io/wave value
// (200 KB of control bytes, a paste gone wrong). The Blocked status's
// reason quotes every bad value in full with %q, which escapes each byte
// as \x01: the status meshwave writes on the namespace is ~800 KB, over
// the apiserver's 256 KiB limit for an object's annotations, so the
// namespace write is refused with 422 on every retry and the reason never
// reaches anyone.
func TestAHugeBadAnnotationIsQuotedShort(t *testing.T) {
	huge := strings.Repeat("\x01", 200_000)
	s := newSim(t, deploy("a", waveAnn(huge)), deploy("b"))
	d := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	require.NotNil(t, d.Status)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	assert.Less(t, len(raw), 256*1024, "the status is %d bytes", len(raw))
	for _, e := range d.Events {
		assert.Less(t, len(e.Message), 256*1024, "event %s of %d bytes", e.Reason, len(e.Message))
	}
}

// Invariant 5 (the namespace keeps its istio.io/rev label while meshwave
// owns it: from its first wave until the target is removed).
//
// Scenario: mid-migration (wave 1 moved, label 1-26), someone types a bad
// meshwave.io/wave on an unrelated Deployment, so the namespace is
// Blocked. Meanwhile istio.io/rev is reset to 1-25 (a GitOps sync). The
// blocked namespace still holds its concurrency slot, but ownedLabel is ""
// while Blocked: the label is not put back, and any pod of the moved
// canary rescheduled meanwhile is injected by the source.
func TestTheLabelIsKeptWhileBlockedHalfWay(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	require.Equal(t, WavePassed, s.status.WaveState)
	s.snap.Workloads[1].Annotations[AnnotationWave] = "x"
	s.decide(nil)
	require.Equal(t, PhaseBlocked, s.status.Phase)
	require.True(t, s.status.HoldsSlot())

	s.snap.Namespace.Labels[LabelRev] = "1-25"
	d := s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "the label meshwave owns is left at %q while blocked half-way", s.snap.Namespace.Labels[LabelRev])
}
