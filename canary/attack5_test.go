package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Break 1 (97f7b10, retarget). A namespace rolled back its migration to
// canary (1-26) and then migrated to the new target 1-27, to Completed.
// GitOps (or a backup) restores the status annotation as it was during the
// rollback: RollingBack, target canary. The decider keeps it (undoing, its
// target differs from 1-27) and reads its records only against 1-26
// (rev = st.TargetRevision, keeps), so the newer 1-27 migration on record
// does not contradict it (recordConflict never looks at 1-27). It then
// "rolls back 0 workloads", writes RolledBack, puts the namespace label
// back to the source 1-25 while every pod runs 1-27 (pods created then get
// a 1-25 sidecar), and reports meshwave's own label as reverted by someone
// (LabelReverted). Before 97f7b10 a status of another target was replaced
// by a fresh one and the label was never touched.
// Promise: a stale status restored by GitOps is contradicted by the records
// of a newer migration (design.md), and the label of a Completed namespace
// is not moved back to a revision nothing runs.
func TestAttack5AStaleRollbackStatusRestoredAfterTheNewTargetCompletedFlipsTheLabel(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.step3(s.gates)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	stale := encoded(t, s.status)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	for i := 0; i < 20 && (s.status.Target != "1-27" || s.status.Phase != PhaseCompleted); i++ {
		s.step3(s.gates)
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
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
}

// Break 1b, the same restored while the 1-27 migration is half-way (wave
// 1 passed: a on 1-27). The stale status "rolls back" b and c (already on
// 1-25), ends RolledBack, and sets the label to 1-25; the new 1-27 status
// that follows is Pending (it owns no label) and must wait for a slot: the
// label stays 1-25 while a runs 1-27, for as long as a peer holds the
// slot. Every pod of a created meanwhile gets the 1-25 sidecar.
func TestAttack5AStaleRollbackStatusRestoredMidNewMigrationLeavesTheLabelOnTheSource(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.step3(s.gates)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	stale := encoded(t, s.status)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	for i := 0; i < 20 && (s.status.Target != "1-27" || s.status.Wave < 1 || s.status.WaveState != WavePassed); i++ {
		s.step3(s.gates)
	}
	require.Equal(t, "1-27", s.status.Target)
	require.Equal(t, WavePassed, s.status.WaveState)
	require.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev])
	s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	s.raw, s.status = &stale, nil // restored by a sync
	for i := 0; i < 4; i++ {
		s.step3(s.gates)
	}
	assert.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev], "a runs 1-27 and the migration to 1-27 is half-way; status %s %s: %s", s.status.Target, s.status.Phase, s.status.Reason)
}

// Half-way through canary (1-26), a person asks meshwave.io/rollback=wave
// and sets the target to 1-26 (the same revision, named directly) in one
// edit. That is the same migration, renamed: the wave is rolled back, and
// the migration ends RolledBack as any wave rollback does, under its new
// name. It was first read as a new target: the fresh status then took
// the wave's rollback for one it "does not know" (StatusAdopted, a
// Warning) before ending the same way.
func TestAttack5AWaveRollbackAskedWithTheSameRevisionByAnotherNameIsTheSameMigration(t *testing.T) {
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

// wave3RolledBackInOneSecond plays toWave2Passed on to wave 3 (d), started
// at second S+0.1, failed and rolled back at S+0.3 (d's stamp pushed to
// S+1, and with 6c753f8 its record's At too), RolledBack at S+0.5. If
// future is set, a person restarts d (kubectl rollout restart from a
// machine whose clock is an hour ahead) after its move.
func wave3RolledBackInOneSecond(t *testing.T, future bool) *sim {
	s := toWave2Passed(t)
	s.now = s.now.Truncate(time.Minute).Add(5*time.Minute + 100*time.Millisecond)
	d := s.decide(s.gates())
	require.Equal(t, []string{"d>1-26"}, movesInOrder([]Decision{d}))
	if future {
		s.snap.Workloads[3].TemplateAnnotations[AnnotationRestartedAt] = s.now.Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	s.now = s.now.Add(200 * time.Millisecond)
	d = s.decide(failRollout("d", "bad"))
	require.Equal(t, []string{"d<1-25"}, movesInOrder([]Decision{d}))
	require.NotNil(t, d.Moves[0].Record.Stamp, "the rollback's stamp is pushed past now")
	require.True(t, d.Moves[0].Record.Stamp.After(s.now), "the rollback's stamp is pushed past now: %v", d.Moves[0].Record.Stamp)
	require.False(t, d.Moves[0].Record.At.After(s.now), "its record is dated when it was made")
	s.rollOut("1-25", "d")
	s.now = s.now.Add(200 * time.Millisecond)
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	return s
}

// requireRetryMovesD plays a retry (the target just set again) to its
// end: it must resume the migration and move d again, not be adopted as
// the rollback on record.
func requireRetryMovesD(t *testing.T, s *sim) {
	t.Helper()
	s.events = nil
	played := []Decision{s.decide(nil)}
	for i := 0; i < 8 && s.status.Phase != PhaseCompleted; i++ {
		played = append(played, s.step3(s.gates))
	}
	assert.NotContains(t, s.reasons(), "StatusAdopted", "%s", s.status.Reason)
	assert.Equal(t, PhaseCompleted, s.status.Phase, "the retry moves d again: %s", s.status.Reason)
	assert.Equal(t, []string{"d"}, forwardMovesTo(played, "1-26"))
}

// Break 3 (the first version of the stamp fix, 6c753f8, dated a record at
// its pushed stamp; a record now carries it as Stamp). A wave's rollback
// in the second of its move has its record dated the pushed second (S+1), a time after now. A
// person retries (removes and sets the target again) within that second:
// retriedAt S+0.7 is before the rollback's record, so current() does not
// make the rollback history, continueOnRecord takes the retry's Pending
// status for one that "does not know the rollback on record"
// (StatusAdopted), and the retry is turned into RollingBack -> RolledBack:
// the retry is lost, nothing moves. Before 6c753f8 the record carried
// S+0.3 and the retry resumed the migration.
// Promise: the target set again after a rollback ended is a retry; the
// rollbacks before it are history.
func TestAttack5ARetryInTheSecondARollbackStampWasPushedToIsEaten(t *testing.T) {
	s := wave3RolledBackInOneSecond(t, false)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.now = s.now.Add(100 * time.Millisecond)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.now = s.now.Add(100 * time.Millisecond)
	requireRetryMovesD(t, s)
}

// Break 4 (the same first version), the same with a wider window: after d was
// moved, a person restarted it from a machine whose clock is an hour
// ahead (its template's restartedAt is an hour in the future). The wave's
// rollback pushes its stamp past that one, and now dates its record there
// too, an hour ahead. Every retry within the hour (here 5 minutes after
// the rollback ended) is eaten as above: StatusAdopted, RolledBack.
func TestAttack5AFutureRestartStampMakesEveryRetryWithinItAnAdoptedRollback(t *testing.T) {
	s := wave3RolledBackInOneSecond(t, true)
	s.now = s.now.Add(time.Minute)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)
	s.now = s.now.Add(5 * time.Minute)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	requireRetryMovesD(t, s)
}

// Break 5 (97f7b10, holders). A namespace rolling back its migration to
// canary (1-26) before its new target 1-27: every workload will move to
// 1-27 once the rollback ends. `meshwave holders 1-25` reads the kept
// status (st.undoing()) and says of the workloads on 1-25 (d, never moved,
// and those already returned) "cannot: namespace shop is rolling back to
// 1-25", i.e. that meshwave does not move them, which is false.
// Promise: meshwave holders tells the truth (will move / cannot).
func TestAttack5HoldersOfTheSourceDuringARollbackBeforeANewTargetSayTheyStay(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, "canary", s.status.Target)
	s.rollOut("1-25", "a") // a returned already
	hs := holdersIn("1-25", s.snap, s.status)
	require.Len(t, hs.Holders, 2)
	for _, h := range hs.Holders {
		assert.Equal(t, HolderWillMove, h.State, "%s: %s (%s)", h.Name, h.Reason, h.Code)
		assert.Equal(t, "namespace shop is rolling back to 1-25, then to 1-27 (meshwave.io/target-revision=1-27)", h.Reason)
	}
}
