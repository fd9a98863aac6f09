package canary

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestANamespaceThatNeverOptedInIsLeftAlone(t *testing.T) {
	s := newSim(t, deploy("a"))
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	d := s.decide(nil)
	assert.Equal(t, Decision{}, d)
}

func TestAnOldFinishedStatusOnANamespaceNobodyOptedInTakesNoWrite(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.playUntil(PhaseCompleted)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.optedIn = false // a new agent, or a namespace it never saw opted in
	d := s.decide(nil)
	assert.Nil(t, d.Status)
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Events)
}

func TestRemovingTheTargetStopsAndUndoesNothing(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	d := s.decide(nil)
	assert.Equal(t, PhaseStopped, d.Status.Phase)
	assert.Equal(t, "meshwave.io/target-revision was removed: the migration stopped at wave 1 of 2 and nothing was undone", d.Status.Reason)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev], "the label stays where it was")

	d = s.decide(nil)
	assert.Nil(t, d.Status)
}

func TestARetargetMidWaveKeepsTheSourceTheWorkloadsCameFrom(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.install("1-27")
	s.decide(nil)
	s.rollOut("1-26", "a")
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "1-27", d.Status.TargetRevision)
	assert.Equal(t, "1-25", d.Status.SourceLabel, "b never ran 1-26: a rollback must not send it there")
	assert.Equal(t, "1-25", d.Status.SourceRevision)
}

// A migration paused by a person, or blocked, forward in wave 2 (a, b, c
// on 1-26, d on 1-25) when canary is repointed to 1-27 starts over
// (TargetChanged), and its fresh status keeps the source of the migration
// it replaces (1-25) while it waits: once it starts, its rollbacks return
// the workloads to 1-25, where the namespace came from, not to the
// abandoned 1-26 that most pods run.
func TestARepointWhilePausedKeepsTheSource(t *testing.T) {
	for _, how := range []string{"going forward", "paused by a person", "blocked by an invalid annotation"} {
		t.Run(how, func(t *testing.T) {
			s := toWave2Passed(t)
			switch how {
			case "paused by a person":
				s.snap.Namespace.Annotations[AnnotationPaused] = "true"
				s.decide(nil)
				require.Equal(t, PhasePaused, s.status.Phase)
			case "blocked by an invalid annotation":
				s.snap.Workloads[3].Annotations[AnnotationWave] = "-1"
				s.decide(nil)
				require.Equal(t, PhaseBlocked, s.status.Phase)
			}
			s.snap.Mesh.Tags["canary"] = "1-27"
			s.now = s.now.Add(time.Minute)
			s.decide(nil)
			require.Contains(t, s.reasons(), "TargetChanged")
			switch how {
			case "paused by a person":
				delete(s.snap.Namespace.Annotations, AnnotationPaused)
			case "blocked by an invalid annotation":
				delete(s.snap.Workloads[3].Annotations, AnnotationWave)
			}
			for i := 0; i < 3 && s.status.Wave == 0; i++ {
				s.now = s.now.Add(time.Minute)
				s.decide(nil)
			}
			require.Equal(t, 1, s.status.Wave, "%s %s", s.status.Phase, s.status.Reason)
			assert.Equal(t, "1-27", s.status.TargetRevision)
			assert.Equal(t, "1-25", s.status.SourceRevision, "the source of the migration it replaces")
			assert.Equal(t, "1-25", s.status.SourceLabel)
		})
	}
}

// A migration that started over on a repoint, and waits (paused), keeps
// the source of the one it replaced through a second repoint before it
// starts.
func TestASourceKeptThroughTwoRepointsBeforeTheStart(t *testing.T) {
	s := onTag4(t)
	s.install("1-28")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b, c
	s.rollOut("1-26", "b", "c")
	require.Equal(t, 2, s.status.Wave)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	for _, rev := range []string{"1-27", "1-28"} {
		s.snap.Mesh.Tags["canary"] = rev
		s.now = s.now.Add(time.Minute)
		s.decide(nil)
		require.Equal(t, 0, s.status.Wave, rev)
		assert.Equal(t, "1-25", s.status.SourceRevision, "kept while it waits, after the repoint to %s", rev)
	}
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, 1, s.status.Wave, "%s %s", s.status.Phase, s.status.Reason)
	assert.Equal(t, "1-28", s.status.TargetRevision)
	assert.Equal(t, "1-25", s.status.SourceRevision)
}

// A migration paused by a person at wave 2 (a, b, c moved 1-25 -> 1-26)
// whose tag is repointed back to the source 1-25 (the canary aborted)
// starts over to 1-25. Its source is not 1-25 too: its rollbacks would
// restart workloads onto the very revision they are leaving, and a failed
// wave could never be undone.
func TestARepointBackToTheSourceNeverMakesTheSourceTheTarget(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	s.snap.Mesh.Tags["canary"] = "1-25"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Contains(t, s.reasons(), "TargetChanged")
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	for i := 0; i < 3 && s.status.Wave == 0; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(nil)
	}
	require.Equal(t, 1, s.status.Wave, "%s %s", s.status.Phase, s.status.Reason)
	assert.Equal(t, "1-25", s.status.TargetRevision)
	assert.NotEqual(t, s.status.TargetRevision, s.status.SourceRevision, "a migration whose rollback goes to its own target")
}

// A Completed migration 1-25 -> 1-26 (everything on 1-26, label 1-26)
// blocked by an invalid annotation (Blocked, blockedPhase Completed) and
// given another target (1-27) meanwhile waits at wave 0. The migration that
// starts once the annotation is fixed takes its source from the label and
// the pods (1-26), not from the migration that ended (1-25): a rollback to
// 1-25 would send everything to a revision no workload has run since, and
// with 1-25 uninstalled (as it may be once 1-26 is done) precheck would
// block the namespace for good on a source that is not its own.
func TestABlockedCompletedMigrationPassesNoSourceToTheNext(t *testing.T) {
	for _, how := range []string{"with 1-25 installed", "with 1-25 uninstalled"} {
		t.Run(how, func(t *testing.T) {
			s := batchedSim(t, "a", "b", "c")
			s.install("1-27")
			s.playUntil(PhaseCompleted)
			require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
			s.snap.Workloads[1].Annotations[AnnotationWave] = "-1"
			s.decide(nil)
			require.Equal(t, PhaseBlocked, s.status.Phase)
			require.Equal(t, PhaseCompleted, s.status.BlockedPhase)
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
			s.now = s.now.Add(time.Minute)
			s.decide(nil)
			require.Equal(t, 0, s.status.Wave)
			if how == "with 1-25 uninstalled" {
				delete(s.snap.Mesh.Revisions, "1-25")
			}
			delete(s.snap.Workloads[1].Annotations, AnnotationWave)
			for i := 0; i < 3 && s.status.Wave == 0; i++ {
				s.now = s.now.Add(time.Minute)
				s.decide(nil)
			}
			require.Equal(t, 1, s.status.Wave, "%s: %s", s.status.Phase, s.status.Reason)
			assert.Equal(t, "1-26", s.status.SourceRevision, "every workload runs 1-26")
			assert.Equal(t, "1-26", s.status.SourceLabel)
		})
	}
}

// An ended status keeps the revision its migration went to (1-26) while
// the tag canary names 1-27. A rollback asked after completion
// (meshwave.io/rollback=all) makes it RollingBack under 1-26, a phase that
// is not terminal, and the repoint is still not read as a target changed
// mid-way: the rollback is judged to its end, RolledBack, and nothing is
// restarted forward to 1-27, a migration nobody asked for.
func TestARollbackAskedAfterCompletionOnARepointedTagEndsRolledBack(t *testing.T) {
	s := completedOnTag(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.decide(nil)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	require.Len(t, d.Moves, 3, "every moved workload is returned")
	var played []Decision
	for i := 0; i < 6; i++ {
		for _, w := range s.snap.Workloads {
			if r, ok := ReadMoveRecord(w.Annotations); ok {
				s.rollOut(r.Revision, w.Name)
			}
		}
		s.now = s.now.Add(2 * time.Minute)
		played = append(played, s.decide(s.gates()))
	}
	assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s: %v", s.status.Reason, s.reasons())
	assert.Empty(t, forwardMovesTo(played, "1-27"), "a rollback request started a migration to 1-27: %v", s.reasons())
}

// A tag repointed after a migration ended moves nothing until the target
// is set again, alone or through a block: an invalid annotation on the
// completed namespace blocks it (Blocked, blockedPhase Completed, still
// under 1-26), a phase that is not terminal, and once the annotation is
// fixed the namespace is Completed again, not migrating to 1-27.
func TestARepointedTagMovesNothingOfAnEndedMigration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block bool
	}{
		{"a repoint alone", false},
		{"a block set after the repoint, then fixed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := completedOnTag(t)
			if tc.block {
				s.snap.Workloads[1].Annotations[AnnotationWave] = "-1"
				s.decide(nil)
				require.Equal(t, PhaseBlocked, s.status.Phase)
				s.now = s.now.Add(time.Minute)
				s.decide(nil)
				delete(s.snap.Workloads[1].Annotations, AnnotationWave)
			}
			var played []Decision
			for i := 0; i < 6; i++ {
				s.now = s.now.Add(2 * time.Minute)
				played = append(played, s.decide(s.gates()))
			}
			assert.Equal(t, PhaseCompleted, s.status.Phase, "%s: %v", s.status.Reason, s.reasons())
			assert.Empty(t, forwardMovesTo(played, "1-27"), "a migration to 1-27 nobody asked for: %v", s.reasons())
		})
	}
}

// A repoint in the same edit as rollback=wave or =all rolls back under
// 1-26 and ends RolledBack with nothing forward to 1-27; after an opt-out
// and an opt-in, the retry moves each workload to 1-27 once, with no
// adoption.
func TestARepointWithARollbackAskedRollsBackAndTheRetryMovesEachWorkloadOnce(t *testing.T) {
	for _, scope := range []string{"wave", "all"} {
		t.Run("rollback="+scope, func(t *testing.T) {
			s := toWave2Passed(t)
			s.snap.Namespace.Annotations[AnnotationRollback] = scope
			s.snap.Mesh.Tags["canary"] = "1-27"
			var played []Decision
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			require.Equal(t, PhaseRolledBack, s.status.Phase)
			assert.Equal(t, "1-26", s.status.TargetRevision)
			assert.Empty(t, forwardMovesTo(played, "1-27"))
			delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
			s.decide(nil)
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
			s.events, played = nil, nil
			for i := 0; i < 12; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.Equal(t, PhaseCompleted, s.status.Phase)
			assert.ElementsMatch(t, []string{"a", "b", "c", "d"}, forwardMovesTo(played, "1-27"))
			assert.NotContains(t, s.reasons(), "StatusAdopted")
		})
	}
}

// A wave failed under policy Pause (a moved to 1-26 and failed there); a
// person asks meshwave.io/rollback=wave, and in the same reconcile the tag
// canary is repointed to 1-27. The request is acted on before the repoint,
// as if its own reconcile had come first: the failed wave is rolled back
// (a returns to 1-25), and the request is not reported ignored ("no wave
// has started" would be false).
func TestARollbackAskedOfAFailedWaveSurvivesARepoint(t *testing.T) {
	s := onTag4(t)
	s.cfg.FailurePolicy = PolicyPause
	s.step3(s.gates) // wave 1: a
	s.now = s.now.Add(5 * time.Minute)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	require.Equal(t, WaveFailed, s.status.WaveState)
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.snap.Mesh.Tags["canary"] = "1-27"
	var played []Decision
	for i := 0; i < 6; i++ {
		played = append(played, s.step3(s.gates))
	}
	assert.Equal(t, map[string]int{"a": 1}, backMoves(played), "the failed wave is rolled back as asked: %s %s", s.status.Phase, s.status.Reason)
	assert.NotContains(t, s.reasons(), "RollbackIgnored")
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

// Half-way through canary (1-26), a person asks meshwave.io/rollback=wave
// and sets the target to 1-26 (the same revision, named directly) in one
// edit. That is the same migration, renamed: the wave is rolled back, and
// the migration ends RolledBack as any wave rollback does, under its new
// name, with no StatusAdopted Warning about a rollback its status does not
// know.
func TestAWaveRollbackAskedWithTheSameRevisionByAnotherNameIsTheSameMigration(t *testing.T) {
	s := toWave2Passed(t)
	id := s.status.MigrationID()
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.events = nil
	var played []Decision
	for i := 0; i < 14 && s.status.Phase != PhaseRolledBack; i++ {
		played = append(played, s.step3(s.gates))
	}
	for i := 0; i < 3; i++ {
		played = append(played, s.step3(s.gates))
	}
	assert.Equal(t, map[string]int{"b": 1, "c": 1}, backMoves(played))
	assert.Empty(t, forwardMovesTo(played, "1-26"))
	assert.NotContains(t, s.reasons(), "StatusAdopted", "the status was never lost or contradicted")
	assert.NotContains(t, s.reasons(), "TargetChangedDuringRollback", "not another target")
	assert.Equal(t, "1-26", s.status.Target)
	assert.Equal(t, id, s.status.MigrationID())
	assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
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

// A tag repointed while a rollback is under way, or paused or blocked in
// it: the rollback keeps the revision it returns from (1-26) and ends
// RolledBack with one rollback restart per moved workload and nothing
// forward to 1-27; then nothing more is written.
func TestATagRepointedMidRollbackEndsRolledBack(t *testing.T) {
	for _, how := range []string{"rolling back", "paused rolling back", "blocked rolling back"} {
		t.Run(how, func(t *testing.T) {
			s, played, release := midRollback(t, how)
			s.snap.Mesh.Tags["canary"] = "1-27"
			played = append(played, s.decide(nil))
			release()
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s: %v", s.status.Reason, s.reasons())
			assert.Equal(t, "1-26", s.status.TargetRevision)
			assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, backMoves(played))
			assert.Empty(t, forwardMovesTo(played, "1-27"), "%v", s.reasons())
			assert.Equal(t, "1-25", s.snap.Namespace.Labels[LabelRev])
			// Nothing spins afterwards.
			for i := 0; i < 3; i++ {
				s.now = s.now.Add(time.Minute)
				d := s.decide(s.gates())
				assert.Nil(t, d.Status, "decision %d", i)
				assert.Empty(t, d.Moves)
			}
		})
	}
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
	assert.True(t, peerNow().HoldsSlot, "a new target alone: the slot is held until its own decision writes the new migration's status (set back before that, the target continues the migration admitted)")
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

// The holders of a namespace rolling back while its target changes say
// what meshwave does: the rollback returns the target's pods to the source
// first, the new target takes the source's pods once it ended, and a tag
// repointed while the rollback is paused names no move to the revision it
// names now (resuming returns the pods on 1-26 to 1-25).
func TestHoldersOfARollbackUnderAChangedTargetSayWhatItDoes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, s *sim)
		rev    string
		check  func(t *testing.T, hs []Holder)
	}{
		{"the target's pods are moving back to the source",
			func(t *testing.T, s *sim) {
				s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
				s.now = s.now.Add(time.Minute)
				s.decide(nil)
				require.Equal(t, "canary", s.status.Target)
			}, "1-26",
			func(t *testing.T, hs []Holder) {
				require.Len(t, hs, 3)
				for _, h := range hs {
					assert.Equal(t, ReasonRollingBack, h.Code, "%s: %s", h.Name, h.Reason)
					assert.Equal(t, HolderMoving, h.State, h.Name)
				}
			}},
		{"the source's pods move on to the new target once the rollback ended",
			func(t *testing.T, s *sim) {
				s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
				s.now = s.now.Add(time.Minute)
				s.decide(nil)
				require.Equal(t, "canary", s.status.Target)
				s.rollOut("1-25", "a") // a returned already
			}, "1-25",
			func(t *testing.T, hs []Holder) {
				require.Len(t, hs, 2)
				for _, h := range hs {
					assert.Equal(t, HolderWillMove, h.State, "%s: %s (%s)", h.Name, h.Reason, h.Code)
					assert.Equal(t, "namespace shop is rolling back to 1-25, then to 1-27 (meshwave.io/target-revision=1-27)", h.Reason)
				}
			}},
		{"a tag repointed while the rollback is paused names no move to its new revision",
			func(t *testing.T, s *sim) {
				s.now = s.now.Add(time.Minute)
				s.decide(failRollout("a", "bad"))
				require.Equal(t, PhasePaused, s.status.Phase)
				require.Equal(t, WaveRollingBack, s.status.WaveState)
				s.snap.Mesh.Tags["canary"] = "1-27"
				s.decide(nil)
				require.Equal(t, "1-26", s.status.TargetRevision)
			}, "1-26",
			func(t *testing.T, hs []Holder) {
				require.Len(t, hs, 3)
				for _, h := range hs {
					assert.NotEqual(t, ReasonWillMove, h.Code, "%s: %s", h.Name, h.Reason)
					assert.NotContains(t, h.Reason, "1-27", h.Name)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := toWave2Passed(t)
			s.snap.Namespace.Annotations[AnnotationRollback] = "all"
			s.now = s.now.Add(time.Minute)
			s.decide(nil)
			require.Equal(t, PhaseRollingBack, s.status.Phase)
			tc.change(t, s)
			tc.check(t, holdersIn(tc.rev, s.snap, s.status).Holders)
		})
	}
}

// staleRollbackOver1_27 plays midRollback (shop on canary = 1-26, waves 1
// and 2 passed, rollback=all asked) and keeps a copy of the RollingBack
// status; then sets the target to 1-27: the rollback ends first, and the
// migration to 1-27 starts and runs until until() holds.
func staleRollbackOver1_27(t *testing.T, until func(s *sim) bool) (*sim, string) {
	s, _, _ := midRollback(t, "rolling back")
	stale := encoded(t, s.status)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	for i := 0; i < 20 && !until(s); i++ {
		s.step3(s.gates)
	}
	require.True(t, until(s), "%s %s w%d: %s", s.status.Target, s.status.Phase, s.status.Wave, s.status.Reason)
	return s, stale
}

// A status kept from a rollback asked before the target changed
// (RollingBack, target canary) and put back over the newer migration to
// 1-27, by a sync of a stale manifest or a backup, is contradicted by that
// migration's move records and goes by them (design.md: "a kept status
// the records show a newer migration ... over is not kept"; "its records
// are what to go by"), as when the status is lost:
//   - put back after 1-27 completed, it moves nothing, leaves the label on
//     1-27 (not on 1-25, which nothing runs: pods created then would get a
//     1-25 sidecar), and reports neither a rollback nor meshwave's own
//     label as switched by someone;
//   - put back half-way through 1-27 while a peer holds the only slot, it
//     leaves the label on 1-27, which a runs;
//   - a rollback asked over it is done: a, moved by the 1-27 migration,
//     goes back, nothing goes forward, and the request is not ignored;
//   - put back after the 1-27 migration ended RolledBack, it starts nothing
//     again: a retry is a target removed and set again.
func TestARollbackStatusPutBackOverANewTargetGoesByTheRecords(t *testing.T) {
	completed := func(s *sim) bool { return s.status.Target == "1-27" && s.status.Phase == PhaseCompleted }
	halfWay := func(s *sim) bool {
		return s.status.Target == "1-27" && s.status.Wave == 1 && s.status.WaveState == WavePassed
	}
	started := func(s *sim) bool { return s.status.Target == "1-27" && s.status.Wave == 1 }
	t.Run("put back after the new target completed, it keeps the label on the new target", func(t *testing.T) {
		s, stale := staleRollbackOver1_27(t, completed)
		require.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev])
		s.events = nil
		s.raw, s.status = &stale, nil // restored by a sync
		var labels []string
		var played []Decision
		for i := 0; i < 4; i++ {
			played = append(played, s.step3(s.gates))
			labels = append(labels, s.snap.Namespace.Labels[LabelRev])
		}
		assert.Empty(t, movesInOrder(played))
		assert.Equal(t, []string{"1-27", "1-27", "1-27", "1-27"}, labels, "the label of a namespace whose every pod runs 1-27")
		assert.NotContains(t, s.reasons(), "RolledBack", "a rollback that had ended long ago is reported again")
		assert.NotContains(t, s.reasons(), "LabelReverted", "meshwave's own label reported as switched by someone")
	})
	t.Run("put back half-way through the new target, it keeps the label on the new target", func(t *testing.T) {
		s, stale := staleRollbackOver1_27(t, halfWay)
		require.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev])
		s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
		s.raw, s.status = &stale, nil // restored by a sync
		for i := 0; i < 4; i++ {
			s.step3(s.gates)
		}
		assert.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev], "a runs 1-27 and the migration to 1-27 is half-way; status %s %s: %s", s.status.Target, s.status.Phase, s.status.Reason)
	})
	for _, how := range []string{"the status lost", "the status put back"} {
		t.Run("a rollback asked with "+how+" is done", func(t *testing.T) {
			s, stale := staleRollbackOver1_27(t, halfWay)
			require.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev])
			s.events = nil
			s.raw, s.status = nil, nil
			if how == "the status put back" {
				s.raw = &stale
			}
			s.snap.Namespace.Annotations[AnnotationRollback] = "all"
			var played []Decision
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.NotContains(t, s.reasons(), "RollbackIgnored", "a wave of 1-27 had passed: a runs 1-27")
			assert.Empty(t, forwardMovesTo(played, "1-27"), "the rollback asked is done, nothing moves forward: %v", movesInOrder(played))
			assert.Equal(t, map[string]int{"a": 1}, backMoves(played), "a, moved by the 1-27 migration, goes back")
			assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
		})
		t.Run("after the new target rolled back, "+how+" starts nothing", func(t *testing.T) {
			s, stale := staleRollbackOver1_27(t, started)
			require.Equal(t, []WorkloadState{{Name: "a", State: StateMoving}}, s.status.Workloads)
			s.now = s.now.Add(time.Minute)
			s.decide(failRollout("a", "a did not roll out"))
			for i := 0; i < 6 && s.status.Phase != PhaseRolledBack; i++ {
				s.step3(s.gates)
			}
			require.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
			require.Equal(t, "1-27", s.status.Target)
			s.events = nil
			s.raw, s.status = nil, nil
			if how == "the status put back" {
				s.raw = &stale
			}
			var played []Decision
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.Empty(t, forwardMovesTo(played, "1-27"), "the 1-27 migration ended RolledBack and nobody set its target again: %v %v", movesInOrder(played), s.reasons())
			assert.NotContains(t, s.reasons(), "MigrationStarted")
			assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
		})
	}
}

// A rollback under way runs to its end before a new target is taken up,
// even one that resolves to nothing (a revision not installed yet, a
// typo); once it ended, that target blocks.
func TestARollbackRunsToItsEndWhenTheNewTargetDoesNotResolve(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide([]Verdict{pass("rollout"), {Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3"}})
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-28" // not installed
	s.rollOut("1-25", "a")
	s.now = s.now.Add(time.Minute)
	d := s.decide(s.gates())
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRolledBack, d.Status.Phase, "not blocked half-way: %s", d.Status.Reason)
	assert.Equal(t, "1-26", d.Status.Target, "the rollback's own target, until it ended")

	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase, "ended, the new target is taken up: it does not resolve")
	assert.Equal(t, `invalid input: meshwave.io/target-revision on namespace shop: "1-28" is not an installed revision or tag (no MutatingWebhookConfiguration istio-sidecar-injector-1-28 or istio-revision-tag-1-28 exists)`, d.Status.Reason)
	assert.Empty(t, d.Moves)
}
