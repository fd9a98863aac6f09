package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestManualRollbackOfEverythingAfterCompletion(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.DelayBetweenWaves = 0
	for i := 0; i < 20 && (s.status == nil || s.status.Phase != PhaseCompleted); i++ {
		d := s.decide(s.gates())
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.decide(nil)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.True(t, d.ClearRollback, "the request is consumed")
	assert.Equal(t, "1-25", d.Label)
	assert.Len(t, d.Moves, 3)
	for _, m := range d.Moves {
		assert.True(t, m.Record.Rollback)
		s.rollOut("1-25", m.Workload)
	}
	d = s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
	assert.Equal(t, 3, d.Status.Counts.RolledBack)
	assert.Equal(t, map[string]int{"a": 2, "b": 2, "c": 2}, s.patches)
}

func TestManualRollbackOfTheWaveInFlight(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.DelayBetweenWaves = 0
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates()) // wave 1 passes, wave 2 (b, c) starts
	require.Equal(t, 2, s.status.Wave)
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	d := s.decide(nil)
	var names []string
	for _, m := range d.Moves {
		names = append(names, m.Workload)
	}
	assert.Equal(t, []string{"b", "c"}, names, "only the wave in flight goes back")
	assert.Equal(t, "1-25", d.Label)
}

func TestARollbackRequestBeforeAnyWaveIsIgnored(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Peers = []Peer{{Name: "cart", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.decide(nil)
	assert.True(t, d.ClearRollback)
	assert.Empty(t, d.Moves)
	assert.Equal(t, "RollbackIgnored", d.Events[0].Reason)
}

// Nothing spins, and a rollback request is consumed once acted on. Wave 2
// (b, c) fails and is being rolled back (scope wave). The operator
// escalates with meshwave.io/rollback=all while the rollback is in flight:
// the rollback widens to everything, a (moved in wave 1) is returned too,
// the request is consumed, and the rollback is judged to its end instead
// of staying RollingBack, requeued every 10s.
func TestARollbackOfAllAskedDuringAWaveRollbackWidensIt(t *testing.T) {
	s := toWave2(t)
	s.decide(failRollout("b", "b did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	require.Equal(t, RollbackWave, s.status.Rollback)
	s.rollOut("1-25", "b", "c")

	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	var requeues []time.Duration
	for i := 0; i < 5; i++ {
		d := s.decide(s.gates())
		requeues = append(requeues, d.RequeueAfter)
		s.rollOut("1-25", "a", "b", "c")
		s.now = s.now.Add(time.Minute)
	}
	_, pending := s.snap.Namespace.Annotations[AnnotationRollback]
	assert.False(t, pending, "the rollback=all request is never consumed (requeues %v)", requeues)
	assert.NotEqual(t, PhaseRollingBack, s.status.Phase, "after 5 decisions (5 minutes) with every pod back on 1-25 the rollback is still in progress; requeues %v", requeues)
	assert.Equal(t, 2, s.patches["a"], "rollback=all must return a too; patches %v", s.patches)
}

// rollback=all returns every workload the migration moved, and all asked
// during a wave's rollback widens it:
//   - wave 2 (b, c) failed and was rolled back: the namespace is
//     RolledBack, its label on 1-25, while a, which passed wave 1, still
//     runs 1-26. The owner asks meshwave.io/rollback=all to return
//     everything, and a is returned, not left on the target of a migration
//     that is over with "nothing to roll back: the namespace is
//     RolledBack";
//   - a rollback of all after completion pauses because a's restart was
//     refused. The owner, asked to act, asks again with rollback=wave (or
//     keeps the "wave" an automation writes): the rollback of all is not
//     narrowed to the last wave, and a is returned.
func TestARollbackOfAllIsNeverNarrowedOrRefusedWhileSomethingIsStillMoved(t *testing.T) {
	t.Run("all after a wave's rollback ended", func(t *testing.T) {
		s := toWave2(t)
		s.decide(failRollout("b", "b did not roll out"))
		s.rollOut("1-25", "b", "c")
		s.decide(s.gates())
		require.Equal(t, PhaseRolledBack, s.status.Phase)
		s.snap.Namespace.Annotations[AnnotationRollback] = "all"
		d := s.decide(nil)
		assert.Len(t, d.Moves, 1, "a still runs 1-26 (moved in wave 1); events %v", d.Events)
	})
	t.Run("wave asked while a rollback of all is paused", func(t *testing.T) {
		s := newSim(t, deploy("a"), deploy("b"))
		s.playUntil(PhaseCompleted)
		s.snap.Namespace.Annotations[AnnotationRollback] = "all"
		s.refused = map[string]string{"a": "denied (403 Forbidden)"}
		s.decide(nil)
		s.refused = nil
		s.decide(nil)
		require.Equal(t, PhasePaused, s.status.Phase)
		require.Equal(t, RollbackAll, s.status.Rollback)
		s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
		s.playUntil(PhaseRolledBack)
		assert.Equal(t, 2, s.patches["a"], "rollback=all was narrowed to %q: %s", s.status.Rollback, s.status.Reason)
	})
}

func TestARollbackWhoseMembersAreAllGoneEnds(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.snap.Workloads = s.snap.Workloads[1:] // a was deleted
	d := s.decide(nil)
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
	assert.Zero(t, d.RequeueAfter, "nothing left to wait for")
}

// A rollback returns a workload its migration moved whose record is gone
// (removed by hand, or the workload put back whole from git): its
// template's restart stamp, or its rollout's, and its pods on the target
// show the move no record explains.
func TestARollbackReturnsAMovedWorkloadWhoseRecordIsGone(t *testing.T) {
	for _, c := range []struct {
		name  string
		scope RollbackScope
		undo  func(w *Workload)
	}{
		{"record removed, rollback of the wave", RollbackWave, func(w *Workload) { delete(w.Annotations, AnnotationMove) }},
		{"record removed, rollback of all", RollbackAll, func(w *Workload) { delete(w.Annotations, AnnotationMove) }},
		{"put back whole from git, rollback of all", RollbackAll, func(w *Workload) {
			stamp, err := time.Parse(time.RFC3339, w.TemplateAnnotations[AnnotationRestartedAt])
			if err != nil {
				panic(err)
			}
			w.RolledOutRestart = stamp // its ReplicaSet keeps the stamp
			delete(w.Annotations, AnnotationMove)
			delete(w.TemplateAnnotations, AnnotationRestartedAt)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, deploy("a"), deploy("b"))
			s.decide(nil)
			s.rollOut("1-26", "a")
			s.decide(s.gates())
			require.Equal(t, WavePassed, s.status.WaveState)
			c.undo(&s.snap.Workloads[0])
			s.snap.Namespace.Annotations[AnnotationRollback] = string(c.scope)
			d := s.decide(nil)
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseRollingBack, d.Status.Phase)
			require.Len(t, d.Moves, 1, "a goes back though no record shows its move")
			assert.Equal(t, "a", d.Moves[0].Workload)
			rec := d.Moves[0].Record
			assert.Equal(t, MoveRecord{Revision: "1-25", From: "1-26", Wave: 1, At: s.now, Rollback: true, Scope: rec.Scope, Migration: s.status.MigrationID(), Stamp: rec.Stamp}, rec)
			assert.Equal(t, 1, d.Status.Counts.Moving, "on its way back")

			s.rollOut("1-25", "a")
			s.now = s.now.Add(time.Minute)
			d = s.decide(s.gates())
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseRolledBack, d.Status.Phase)
			assert.True(t, strings.HasPrefix(d.Status.Reason, "rolled back 1 workloads to 1-25"), d.Status.Reason)
			assert.Equal(t, map[string]int{"a": 2}, s.patches)
		})
	}
}

func TestARollbackLeavesAWorkloadBackOnTheSourceWhoseRecordIsGone(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.decide(nil)
	s.rollOut("1-25", "a")
	delete(s.snap.Workloads[0].Annotations, AnnotationMove) // its rollback's record
	s.now = s.now.Add(time.Minute)
	d := s.decide(s.gates())
	assert.Empty(t, d.Moves, "a runs the source: it is not restarted again")
	assert.Equal(t, map[string]int{"a": 2}, s.patches)
}

// A rollback asked in the same edit that puts back an old status of
// another migration is not dropped: the migration on record that the
// namespace continues takes it.
func TestARollbackAskedWithAStaleStatusPutBackIsTakenByTheMigrationOnRecord(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("d"))
	s.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.decide(nil)
	s.rollOut("1-27", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	s.rollOut("1-27", "b", "c")
	s.decide(s.gates())
	require.Equal(t, 2, s.status.Wave)
	require.Equal(t, WavePassed, s.status.WaveState)

	old := t0.Add(-time.Hour)
	s.status = &Status{Phase: PhaseStopped, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 1, StartedAt: &old, Reason: "meshwave.io/target-revision was removed: the migration stopped at wave 1 of 2 and nothing was undone"}
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.NotContains(t, s.reasons(), "RollbackIgnored")
	assert.False(t, d.ClearRollback, "the request waits for the migration it is about")
	require.NotNil(t, d.Status)
	assert.Equal(t, "1-27", d.Status.Target)
	assert.Equal(t, 2, d.Status.Wave)

	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Equal(t, RollbackAll, d.Status.Rollback)
	assert.True(t, d.ClearRollback)
	assert.ElementsMatch(t, []string{"a", "b", "c"}, func() []string {
		var out []string
		for _, mv := range d.Moves {
			out = append(out, mv.Workload)
		}
		return out
	}())
}
