package canary

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rollback under way (or paused or blocked in it) when a person sets
// another target finishes first: the workloads it had not returned yet
// are not left on the abandoned revision, and the next migration starts
// from where the namespace came from, not from a guess over pods half-way
// back.
func TestATargetChangedMidRollbackFinishesTheRollbackFirst(t *testing.T) {
	for _, how := range []string{"rolling back", "paused rolling back", "blocked rolling back"} {
		t.Run(how, func(t *testing.T) {
			s, played, release := midRollback(t, how)
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
			d := s.decide(nil)
			played = append(played, d)
			assert.Equal(t, "canary", s.status.Target, "the rollback's status stays until it is done: %s", s.status.Reason)
			release()
			for i := 0; i < 8 && (s.status.Target != "1-27" || s.status.Phase != PhaseCompleted); i++ {
				played = append(played, s.step3(s.gates))
				if s.status.Target == "canary" && s.status.Phase == PhaseRolledBack {
					assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, backMoves(played))
					assert.Empty(t, forwardMovesTo(played, "1-27"), "%v", s.reasons())
				}
			}
			moves := movesInOrder(played)
			require.NotEmpty(t, moves)
			last := slices.IndexFunc(moves, func(m string) bool { return m[1] == '>' && m[2:] == "1-27" })
			require.GreaterOrEqual(t, last, 0, "the new target is migrated to once the rollback ended: %v %v", moves, s.reasons())
			assert.ElementsMatch(t, []string{"a<1-25", "b<1-25", "c<1-25"}, moves[:last], "every moved workload back first")
			assert.Equal(t, PhaseCompleted, s.status.Phase, "%s", s.status.Reason)
			assert.Equal(t, "1-27", s.status.TargetRevision)
			assert.Equal(t, "1-25", s.status.SourceRevision, "the next migration's source is where the namespace came from")
		})
	}
}

// A person sets another target and asks for a rollback in one edit, half-way
// through a migration: the rollback is done first, and the request is not
// reported ignored; then the new target is migrated to from the source.
func TestATargetChangedWithARollbackAskedRollsBackFirst(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	var played []Decision
	d := s.step3(s.gates)
	played = append(played, d)
	require.NotNil(t, s.status)
	assert.Equal(t, PhaseRollingBack, s.status.Phase, "%s", s.status.Reason)
	assert.Equal(t, "canary", s.status.Target)
	assert.True(t, d.ClearRollback, "the request is taken")
	for _, e := range d.Events {
		assert.NotEqual(t, "RollbackIgnored", e.Reason, e.Message)
	}
	for i := 0; i < 10 && (s.status.Target != "1-27" || s.status.Phase != PhaseCompleted); i++ {
		played = append(played, s.step3(s.gates))
	}
	moves := movesInOrder(played)
	first := slices.IndexFunc(moves, func(m string) bool { return m[1] == '>' })
	require.GreaterOrEqual(t, first, 0, "%v %v", moves, s.reasons())
	assert.ElementsMatch(t, []string{"a<1-25", "b<1-25", "c<1-25"}, moves[:first])
	assert.Equal(t, PhaseCompleted, s.status.Phase, "%s", s.status.Reason)
	assert.Equal(t, "1-27", s.status.TargetRevision)
	assert.Equal(t, "1-25", s.status.SourceRevision)
}

// Its peers count a namespace whose rollback goes before a new target:
// its own next decision restarts workloads without asking Admit.
func TestAPeerRollingBackBeforeANewTargetHoldsItsSlot(t *testing.T) {
	s := toWave2Passed(t)
	peerNow := func() Peer {
		t.Helper()
		p, ok := PeerOf("shop", s.snap.Namespace.Annotations, s.snap.Mesh.Resolve, func() ([]Workload, error) { return s.snap.Workloads, nil })
		require.True(t, ok)
		return p
	}
	// A migration under way, asked to roll back as its target changes.
	s.snap.Namespace.Annotations[AnnotationStatus] = encoded(t, s.status)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	assert.False(t, peerNow().HoldsSlot, "a new target alone: a migration that starts over asks for a slot")
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	assert.True(t, peerNow().HoldsSlot, "its rollback goes first")

	// Rolling back, then a new target.
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.step3(s.gates)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.snap.Namespace.Annotations[AnnotationStatus] = encoded(t, s.status)
	assert.True(t, peerNow().HoldsSlot)
	assert.Equal(t, PhaseRollingBack, peerNow().Phase)

	// Once rolled back, the new target waits for a slot like any other.
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	for i := 0; i < 6 && s.status.Phase != PhaseRolledBack; i++ {
		s.step3(s.gates)
	}
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.snap.Namespace.Annotations[AnnotationStatus] = encoded(t, s.status)
	assert.False(t, peerNow().HoldsSlot)
	assert.Equal(t, PhasePending, peerNow().Phase)
}

// The holders of a namespace rolling back before its new target say it
// rolls back, not that the new target will take them.
func TestHoldersOfARollbackBeforeANewTargetSayItRollsBack(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, "canary", s.status.Target)
	hs := holdersIn("1-26", s.snap, s.status)
	require.Len(t, hs.Holders, 3)
	for _, h := range hs.Holders {
		assert.Equal(t, ReasonRollingBack, h.Code, "%s: %s", h.Name, h.Reason)
		assert.Equal(t, HolderMoving, h.State, h.Name)
	}
}

// A rollback asked of a migration that ended, in the same edit as another
// target: nothing of the new target moved yet, and the request says so
// without claiming no wave ever ran.
func TestARollbackAskedOfAnEndedMigrationWithANewTargetSaysWhy(t *testing.T) {
	s := onTag4(t)
	for i := 0; i < 20 && (s.status == nil || s.status.Phase != PhaseCompleted); i++ {
		s.step3(s.gates)
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.events = nil
	d := s.step3(s.gates)
	assert.True(t, d.ClearRollback)
	var got []string
	for _, e := range d.Events {
		if e.Reason == "RollbackIgnored" {
			got = append(got, e.Message)
		}
	}
	assert.Equal(t, []string{"nothing to roll back: the migration to canary is Completed, and no wave to 1-27 has started"}, got)
	assert.Empty(t, backMoves([]Decision{d}))
}
