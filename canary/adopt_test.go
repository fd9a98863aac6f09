package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestALostStatusIsAdoptedFromTheMoveRecordsAndNothingIsRestartedTwice(t *testing.T) {
	s := toWave2(t)
	s.status = nil
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Empty(t, d.Moves, "the wave on record is judged, not restarted")
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 2, d.Status.Wave)
	assert.Equal(t, WaveVerifying, d.Status.WaveState)
	assert.Equal(t, []WorkloadState{{Name: "b", State: StateMoving}, {Name: "c", State: StateMoving}}, d.Status.Workloads)
	assert.Equal(t, "1-25", d.Status.SourceLabel)
	assert.Equal(t, "1-26@2026-11-29T12:00:00Z", d.Status.MigrationID())
	assert.Contains(t, s.events, Event{Type: EventWarning, Reason: "StatusAdopted",
		Message: "the namespace has no status; continuing migration 1-26@2026-11-29T12:00:00Z at wave 2 (migrating)"})

	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
	assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", s.status.Reason)
}

func TestAnUnreadableStatusIsRebuiltOnceFromTheRecords(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"JSON cut short", `{"phase":`},
		{"a field meshwave never writes", `{"phase":"Migrating","wave":2,"totalWaves":3,"target":"1-26","bogus":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw
			s := toWave2(t)
			s.raw, s.status = &raw, nil
			d := s.decide(nil)
			require.NotNil(t, d.Status)
			assert.Empty(t, d.Moves)
			assert.Equal(t, "StatusUnreadable", d.Events[0].Reason)
			assert.Equal(t, EventWarning, d.Events[0].Type)
			assert.Contains(t, d.Events[0].Message, "meshwave.io/status is not meshwave's status JSON")
			assert.Equal(t, "StatusAdopted", d.Events[1].Reason)
			assert.Equal(t, 2, d.Status.Wave)

			d = s.decide(nil)
			for _, e := range d.Events {
				assert.NotEqual(t, "StatusUnreadable", e.Reason, "the rebuilt status reads back")
			}
			assert.NotEqual(t, soon, d.RequeueAfter, "nothing spins")
		})
	}
}

func TestAnEditedStartTimeRestartsNothingTwice(t *testing.T) {
	for _, tt := range []struct {
		name, startedAt, why string
	}{
		{"moved later", "2026-11-29T13:00:00Z", "the status disagrees with the Deployments' move records: the move records show moves of migration 1-26@2026-11-29T12:00:00Z, which the status's 1-26@2026-11-29T13:00:00Z does not know"},
		{"moved earlier", "2026-11-29T11:00:00Z", "the status disagrees with the Deployments' move records: the move records show migration 1-26@2026-11-29T12:00:00Z, newer than the status's 1-26@2026-11-29T11:00:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := toWave2(t)
			s.editStatus(func(m map[string]any) { m["startedAt"] = tt.startedAt })
			d := s.decide(nil)
			assert.Empty(t, d.Moves)
			require.NotNil(t, d.Status)
			assert.Equal(t, "1-26@2026-11-29T12:00:00Z", d.Status.MigrationID())
			assert.Equal(t, "StatusAdopted", d.Events[0].Reason)
			assert.Equal(t, tt.why+"; continuing migration 1-26@2026-11-29T12:00:00Z at wave 2 (migrating)", d.Events[0].Message)
			s.playUntil(PhaseCompleted)
			assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
		})
	}
}

// A workload counts as moved only once its wave passed. A namespace owner
// (or a manifest copied from a Deployment that was moved) puts a
// meshwave.io/move record of wave 3 of the current migration on d while
// wave 2 (b, c) is still rolling out. Adopting the records at wave 3 does
// not count wave 2 as passed: b and c never rolled out (their pods still
// run 1-25) and were never judged, so the migration does not complete and
// counts only a as moved.
func TestARecordOfALaterWaveDoesNotLetTheWaveInFlightSkipJudgment(t *testing.T) {
	s := batchedSim(t, "a", "b", "c", "d")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b, c patched, not rolled out
	require.Equal(t, 2, s.status.Wave)

	forged := MoveRecord{Revision: "1-26", From: "1-25", Wave: 3, At: s.now, Migration: s.status.MigrationID()}
	s.snap.Workloads[3].Annotations[AnnotationMove] = forged.Encode()
	s.rollOut("1-26", "d") // d's owner restarted it after the label switch
	for i := 0; i < 5 && s.status.Phase != PhaseCompleted; i++ {
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	var bPods []string
	for _, p := range s.snap.Workloads[1].Pods {
		bPods = append(bPods, p.Revision)
	}
	assert.NotEqual(t, PhaseCompleted, s.status.Phase, "b and c never rolled out (b's pods run %v) and never passed wave 2: %s", bPods, s.status.Reason)
	assert.LessOrEqual(t, s.status.Counts.Moved, 1, "only a passed its wave; counts %+v", s.status.Counts)
}

// A hostile namespace owner, who may edit its Deployments but not the
// namespace, puts on a of a completed namespace the move record of a
// "newer migration" in the last wave a record may name (maxWaves). Its
// peers read shop as holding its slot (the records contradict the status),
// and shop's decision adopts the records: that wave, with a workload
// deployed since still to plan after it. Nothing spins: every status
// written reads back (an unreadable one would be adopted again on every
// reconcile, and read by the peers as holding, so every other namespace
// would wait with nothing said why), and the migration, which cannot have
// a wave after the last, pauses half-way, holding its slot as any
// migration paused half-way does, with a reason that names the records.
func TestAForgedMoveRecordOfTheLastWaveNeitherSpinsNorHoldsUnexplained(t *testing.T) {
	s := batchedSim(t, "a", "b", "c")
	s.playUntil(PhaseCompleted)
	// A workload deployed since, on 1-25: it waits for the next migration.
	s.snap.Workloads = append(s.snap.Workloads, deploy("d"))
	s.now = s.now.Add(time.Hour)
	forged := MoveRecord{Revision: "1-26", From: "1-25", Wave: maxWaves, At: s.now, Migration: MigrationID("1-26", s.now)}
	s.snap.Workloads[0].Annotations[AnnotationMove] = forged.Encode()
	_, ok := ReadMoveRecord(s.snap.Workloads[0].Annotations)
	require.True(t, ok, "meshwave reads the forged record as its own")
	require.True(t, peerOf(Input{Snapshot: s.snap, Status: s.status}).HoldsSlot)

	// shop's decisions; each status written must read back (sim.apply).
	writes := 0
	for i := 0; i < 8; i++ {
		s.now = s.now.Add(2 * time.Minute)
		d := s.decide(s.gates())
		if d.Status != nil {
			writes++
		}
		for _, m := range d.Moves {
			if !m.RecordOnly {
				s.rollOut(m.Record.Revision, m.Workload)
			}
		}
	}
	assert.Equal(t, PhasePaused, s.status.Phase)
	assert.Equal(t, fmt.Sprintf("wave %d not started: a status holds at most %d waves, and the move records put this migration at wave %d; check the workloads' meshwave.io/move records", maxWaves+1, maxWaves, maxWaves), s.status.Reason)
	assert.Equal(t, maxWaves, s.status.TotalWaves)
	assert.Zero(t, s.patches["d"], "nothing is restarted past the last wave")
	assert.LessOrEqual(t, writes, 3, "adopted, passed, paused: then nothing more")
	assert.True(t, s.status.HoldsSlot(), "paused half-way: its status says why it holds its slot")
}

func TestAStatusThatRegressedToAnEarlierWaveHasTheLaterWaveJudged(t *testing.T) {
	s := batchedSim(t, "a", "b", "c")
	s.decide(nil)
	older, err := s.status.Encode() // wave 1 under test: the write a deposed leader might repeat
	require.NoError(t, err)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b and c patched
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
	s.raw, s.status = &older, nil

	// The status's wave is judged again; b and c, patched in a wave the
	// status does not know, are not counted as moved: they are the next
	// wave to judge, without a second restart.
	d := s.decide(s.gates())
	assert.Empty(t, d.Moves)
	require.NotNil(t, d.Status)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Equal(t, Counts{Total: 3, Pending: 2, Moving: 1}, d.Status.Counts, "b and c are not moved before their wave passes")
	for i := 0; i < 4 && s.status.Wave < 2; i++ {
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(t, 2, s.status.Wave)
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.Equal(t, []string{"b", "c"}, []string{w.Workloads[0].Name, w.Workloads[1].Name})
	s.decide(s.gates())
	assert.Equal(t, ResultPending, s.gates()[0].Result, "b and c have not rolled out")
	assert.NotEqual(t, PhaseCompleted, s.status.Phase)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches, "nothing restarted twice")
}

func TestAStatusOlderThanARollbackContinuesTheRollback(t *testing.T) {
	t.Run("the status of the wave under test", func(t *testing.T) {
		s := newSim(t, deploy("a"), deploy("b"))
		s.decide(nil)
		older, err := s.status.Encode()
		require.NoError(t, err)
		s.decide(failRollout("a", "a did not roll out"))
		require.Equal(t, PhaseRollingBack, s.status.Phase)
		require.Equal(t, 2, s.patches["a"], "moved, then rolled back")

		// The status write of the rollback is lost (or a stale cache
		// shows the one before it): the status says wave 1 is under test.
		s.raw, s.status = &older, nil
		s.snap.Namespace.Labels[LabelRev] = "1-26"
		d := s.decide(nil)
		assert.Empty(t, d.Moves, "a must not be sent forward again")
		require.NotNil(t, d.Status)
		assert.Equal(t, PhaseRollingBack, d.Status.Phase)
		assert.Equal(t, RollbackWave, d.Status.Rollback)
		assert.Equal(t, "1-25", d.Label)
		assert.Equal(t, Event{Type: EventWarning, Reason: "StatusAdopted",
			Message: "the status disagrees with the Deployments' move records: the move records show a rollback of a in migration 1-26@2026-11-29T12:00:00Z, which the status (Migrating) does not know; continuing migration 1-26@2026-11-29T12:00:00Z at wave 1 (rollingback)"}, d.Events[0])
		s.rollOut("1-25", "a")
		s.decide(s.gates())
		assert.Equal(t, PhaseRolledBack, s.status.Phase)
		assert.Equal(t, map[string]int{"a": 2}, s.patches)
	})
	t.Run("a Completed status after a rollback of everything", func(t *testing.T) {
		s := newSim(t, deploy("a"), deploy("b"))
		s.playUntil(PhaseCompleted)
		completed, err := s.status.Encode()
		require.NoError(t, err)
		s.snap.Namespace.Annotations[AnnotationRollback] = "all"
		s.decide(nil)
		require.Equal(t, PhaseRollingBack, s.status.Phase)
		require.Equal(t, map[string]int{"a": 2, "b": 2}, s.patches)

		s.raw, s.status = &completed, nil
		d := s.decide(nil)
		assert.Empty(t, d.Moves)
		require.NotNil(t, d.Status)
		assert.Equal(t, PhaseRollingBack, d.Status.Phase)
		assert.Equal(t, RollbackAll, d.Status.Rollback)
	})
}

// A status from an older write never sends a rolled-back wave forward
// again. The namespace first waited for its slot, so meshwave wrote a
// Pending status (no startedAt). It then ran wave 1 (a) and wave 2 (b, c);
// wave 2 failed and is being rolled back. The status is then put back to
// that first Pending write (a backup restore, a GitOps re-sync of a
// namespace manifest captured while it waited). A Pending status has no
// migration ID to compare with the records, yet the rollback in flight is
// not the history of a retry nobody asked for: b and c are not moved
// forward again.
func TestAPendingStatusFromBeforeTheStartContinuesTheRollback(t *testing.T) {
	s := batchedSim(t, "a", "b", "c")
	s.snap.Peers = []Peer{{Name: "cart", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	s.decide(nil)
	require.Equal(t, PhasePending, s.status.Phase)
	waiting, err := s.status.Encode()
	require.NoError(t, err)
	s.snap.Peers = nil

	s.decide(nil) // wave 1: a
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b, c
	require.Equal(t, 2, s.status.Wave)
	s.decide(failRollout("b", "b did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 2}, s.patches)

	s.raw, s.status = &waiting, nil
	s.now = s.now.Add(time.Minute)
	var forward []string
	for i := 0; i < 10; i++ {
		d := s.decide(s.gates())
		forward = append(forward, forwardMoves(d)...)
		for _, m := range d.Moves {
			s.rollOut(m.Record.Revision, m.Workload)
		}
		s.now = s.now.Add(time.Minute)
	}
	assert.Empty(t, forward, "b and c were rolled back; the old Pending status sends them forward again (patches %v, phase %s, retriedAt %v)", s.patches, s.status.Phase, s.status.RetriedAt)
}

// rollback=all returns every workload the migration moved, and the records
// outrank the status. A completed two-wave migration (a in wave 1, b in
// wave 2) is asked rollback=all. The namespace write lands (RollingBack,
// all) and b's rollback patch lands, but a's meets a conflict. Before the
// next reconcile the status goes back to the Completed write (a deposed
// leader's view, a restore). Adoption sees only b's rollback record, at the
// last wave, and still rebuilds a rollback of all: a is returned too.
func TestAPartialRollbackOfAllIsAdoptedAsARollbackOfAll(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.playUntil(PhaseCompleted)
	completed, err := s.status.Encode()
	require.NoError(t, err)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.refused = map[string]string{"a": "conflict"} // a's patch does not land
	s.decide(nil)
	s.refused, s.answers = nil, nil
	require.Equal(t, RollbackAll, s.status.Rollback)

	s.raw, s.status = &completed, nil
	s.playUntil(PhaseRolledBack)
	assert.Equal(t, 2, s.patches["a"], "a was moved by this migration and rollback=all was asked; patches %v, %s", s.patches, s.status.Reason)
}

// A rollback of a wave returns that wave, whatever the status says: older,
// then missing. Waves [a] [b c] [d]. Wave 3 (d) was patched, then the
// status went back to the write of wave 2 under test (a deposed leader's
// write). Wave 2 fails; its rollback also returns d, recorded in wave 3,
// so the rollback records carry waves 2 and 3. The status is then lost.
// Rebuilt from the records, it is still a rollback of a wave, not of
// everything: a, which passed wave 1 and which nobody asked to roll back,
// stays on 1-26.
func TestAWaveRollbackAdoptedFromItsRecordsStaysAWaveRollback(t *testing.T) {
	s := batchedSim(t, "a", "b", "c", "d")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, 2, s.status.Wave)
	older, err := s.status.Encode()
	require.NoError(t, err)
	s.rollOut("1-26", "b", "c")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, 3, s.status.Wave)

	s.raw, s.status = &older, nil
	s.decide(failRollout("b", "b did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	require.Equal(t, RollbackWave, s.status.Rollback)
	require.Equal(t, 1, s.patches["a"])

	s.status = nil // lost
	s.playUntil(PhaseRolledBack)
	assert.Equal(t, 1, s.patches["a"], "a passed wave 1; the rollback of wave 2 was adopted as %q and returned it too: %s", s.status.Rollback, s.status.Reason)
}

// A workload counts as moved only once its wave passed, also under a
// status rebuilt from the records. Under policy Continue (maxFailedPercent
// 40) the canary a fails and is tolerated (pastFailed 1; a's record says it
// failed); wave 2 (b, c) starts, and the status is lost. The status adopted
// from the records keeps a's failure: the migration completes with one
// workload failed, not with three moved.
func TestAToleratedFailureSurvivesALostStatus(t *testing.T) {
	s := batchedSim(t, "a", "b", "c")
	s.cfg.FailurePolicy, s.cfg.MaxFailedPercent = PolicyContinue, 40
	s.cfg.DelayBetweenWaves = 0
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out")) // tolerated; a's record says so
	s.decide(nil)
	require.Equal(t, 2, s.status.Wave)
	require.Equal(t, 1, s.status.PastFailed)

	s.status = nil
	s.decide(nil)
	for i := 0; i < 20 && s.status.Phase != PhaseCompleted; i++ {
		s.rollOut("1-26", "b", "c")
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
	assert.Equal(t, 1, s.status.Counts.Failed, "a failed wave 1; %s (counts %+v)", s.status.Reason, s.status.Counts)
}

// Nothing spins: no flip-flop between two statuses, no status write every
// reconcile. Leader A, whose clock runs 5 minutes ahead, starts wave 2 and
// writes b's move record with at = its now. Leadership moves to B, whose
// clock is right; b rolls out and B completes the migration with
// completedAt = its now, before b's record. A move that a skewed clock
// dated after the migration ended does not adopt the status back to
// Migrating on every reconcile (each adoption asking for a requeue in
// 100 ms, writing the status, a StatusAdopted and a Completed Event): the
// namespace stays Completed, and 20 reconciles over 2 seconds write the
// status at most twice.
func TestARecordDatedAfterCompletionDoesNotFlipFlop(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	skew := 5 * time.Minute
	s.now = s.now.Add(skew) // leader A's clock
	s.decide(nil)
	require.Equal(t, 2, s.status.Wave)
	s.now = s.now.Add(-skew) // leader B's clock
	s.rollOut("1-26", "b")

	var phases []Phase
	writes, requeues := 0, []time.Duration{}
	for i := 0; i < 20; i++ {
		d := s.decide(s.gates())
		if d.Status != nil {
			writes++
		}
		phases = append(phases, s.status.Phase)
		requeues = append(requeues, d.RequeueAfter)
		s.now = s.now.Add(100 * time.Millisecond)
	}
	assert.LessOrEqual(t, writes, 2, "20 reconciles over 2 seconds wrote the status %d times: phases %v, requeues %v", writes, phases, requeues)
	assert.Equal(t, PhaseCompleted, s.status.Phase)
}

func TestAnOlderMigrationsRecordIsHistoryOnceTheStatusHasMovesOfItsOwn(t *testing.T) {
	s := toWave2(t)
	z := deploy("z")
	z.Annotations[AnnotationMove] = MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: t0.Add(-time.Hour), Migration: MigrationID("1-26", t0.Add(-time.Hour))}.Encode()
	s.snap.Workloads = append(s.snap.Workloads, z)
	id := s.status.MigrationID()
	for i := 0; i < 3; i++ {
		d := s.decide(nil)
		assert.NotContains(t, reasonsOf(d.Events), "StatusAdopted", "decision %d", i)
		assert.Equal(t, id, s.status.MigrationID(), "decision %d", i)
		assert.Empty(t, d.Moves, "decision %d", i)
	}
}

func TestRemovingAndReaddingTheTargetAfterARollbackRetries(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.rollOut("1-25", "a")
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)

	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	d := s.decide(nil)
	assert.Equal(t, PhaseStopped, d.Status.Phase)
	assert.Equal(t, "meshwave.io/target-revision was removed after the migration ended RolledBack: "+s.last.Status.Reason[len("meshwave.io/target-revision was removed after the migration ended RolledBack: "):], d.Status.Reason)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	require.Len(t, d.Moves, 1, "the retry moves the canary again")
	assert.Equal(t, "a", d.Moves[0].Workload)
	assert.Equal(t, 3, s.patches["a"], "moved, rolled back, moved again")
}

// stoppedAfterAWaveRollback plays toWave2, fails and rolls back wave 2
// (b, c), and removes the target: the migration is Stopped, and the
// rollback is on record.
func stoppedAfterAWaveRollback(t *testing.T) *sim {
	s := toWave2(t)
	s.rollOut("1-26", "b")
	s.decide(failRollout("c", "c did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	require.Equal(t, RollbackWave, s.status.Rollback)
	s.rollOut("1-25", "b", "c")
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)
	return s
}

func TestARetryAfterAWaveRollbackResumesAndKeepsGoing(t *testing.T) {
	s := stoppedAfterAWaveRollback(t)
	s.now = s.now.Add(time.Hour)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	d := s.decide(s.gates())
	require.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave, "the last wave that moved forward is judged again")
	assert.Equal(t, s.now, *d.Status.RetriedAt)
	assert.Equal(t, []string{"MigrationResumed"}, reasonsOf(d.Events))

	// The rollback of wave 2 is history: the retry neither adopts it nor
	// loops; it plans b and c again.
	d = s.decide(s.gates())
	assert.NotContains(t, reasonsOf(d.Events), "StatusAdopted")
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 3, "c": 3}, s.patches, "b and c: moved, rolled back, moved again")
	assert.NotContains(t, reasonsOf(s.events[len(s.events)-6:]), "StatusAdopted")
}

// retried plays toWave2, fails and rolls back wave 2 (b, c), removes and
// re-adds the target (a retry), passes wave 1 again and starts wave 2 of
// the retry. refused are the wave-2 patches that do not land. It returns
// the RolledBack status written before the retry.
func retried(t *testing.T, refused map[string]string) (*sim, string) {
	s := toWave2(t)
	s.rollOut("1-26", "b")
	s.decide(failRollout("c", "c did not roll out"))
	s.rollOut("1-25", "b", "c")
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	rolledBack, err := s.status.Encode()
	require.NoError(t, err)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	s.now = s.now.Add(time.Hour)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.decide(nil)
	require.NotNil(t, s.status.RetriedAt)
	s.decide(s.gates()) // a passes again
	s.now = s.now.Add(time.Minute)
	s.refused = refused
	d := s.decide(nil)
	require.Equal(t, 2, s.status.Wave)
	require.Len(t, d.Moves, 2)
	s.refused, s.answers = nil, nil
	return s, rolledBack
}

// A status from an older write never lets a patched wave skip judgment.
// After a rollback of wave 2, the target is removed and added again (a
// retry); wave 1 passes again and wave 2 (b, c) is patched again. The
// status then goes back to the RolledBack write from before the retry (a
// restore, a GitOps re-sync). The forward moves newer than that status's
// end contradict it: it is not kept as final, so b and c, just restarted
// onto 1-26, are judged, rather than the label switched back to 1-25 and
// all three counted as moved.
func TestAStatusFromBeforeARetryIsAdoptedFromTheRetry(t *testing.T) {
	s, rolledBack := retried(t, nil)
	s.raw, s.status = &rolledBack, nil
	d := s.decide(nil)
	require.NotNil(t, s.status)
	assert.NotEqual(t, PhaseRolledBack, s.status.Phase, "b and c were moved again after this status was written, and are never judged (label set to %q, counts %+v)", d.Label, s.status.Counts)
}

// A lost status never restarts a workload its gates did not send back. In
// a retry after a rollback of wave 2, wave 2 is patched again; b's patch
// lands but c's meets a conflict (c still carries the rollback record from
// before the retry). The status is then lost. The status rebuilt from the
// records keeps the retry: c's old rollback record is history, the
// migration is not adopted as a rollback of wave 2, and b, just moved and
// never judged, is not restarted back to 1-25.
func TestALostStatusAfterARetryKeepsTheRetriedWave(t *testing.T) {
	s, _ := retried(t, map[string]string{"c": "conflict"})
	s.status = nil
	var back []string
	var phases []Phase
	for i := 0; i < 3; i++ {
		d := s.decide(s.gates())
		for _, m := range d.Moves {
			if m.Record.Rollback {
				back = append(back, m.Workload)
			}
		}
		phases = append(phases, s.status.Phase)
	}
	assert.Empty(t, back, "no gate failed; the status is adopted as a rollback of wave %d (phases %v) and rolls back %v; patches %v", s.status.Wave, phases, back, s.patches)
}

// The status a retry left while it waited for its turn (Pending, with
// retriedAt) is restored after the retry started its own migration. That
// migration is continued from its records, and the status it writes reads
// back: the Pending status's retriedAt, a time before the migration's own
// start, is one Validate refuses.
func TestAMigrationContinuedFromItsRecordsWritesAStatusThatReadsBack(t *testing.T) {
	s := batchedSim(t, "a", "b", "c")
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	s.rollOut("1-25", "a")
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	s.now = s.now.Add(time.Hour)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	s.decide(nil)
	require.Equal(t, PhasePending, s.status.Phase)
	require.NotNil(t, s.status.RetriedAt)
	waiting, err := s.status.Encode()
	require.NoError(t, err)
	s.snap.Peers = nil
	s.now = s.now.Add(time.Hour)
	s.decide(nil)
	require.Equal(t, 1, s.status.Wave)
	s.raw, s.status = &waiting, nil
	s.now = s.now.Add(time.Minute)
	s.decide(s.gates()) // fails inside when the status written does not read back
	require.Equal(t, 1, s.status.Wave)
}

// restoredPendingOverARollback plays a wave 2 that fails and is being
// rolled back, then puts back the Pending status the namespace had while
// it waited for its slot (a GitOps re-sync of an old manifest).
func restoredPendingOverARollback(t *testing.T, pausedBeforeTheStart bool) *sim {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	if pausedBeforeTheStart {
		s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	} else {
		s.snap.Peers = []Peer{{Name: "cart", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	}
	s.decide(nil)
	require.Equal(t, 0, s.status.Wave)
	waiting, err := s.status.Encode()
	require.NoError(t, err)
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.snap.Peers = nil
	s.decide(nil) // wave 1: a
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b, c
	s.decide(failRollout("b", "b did not roll out"))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	s.raw, s.status = &waiting, nil
	s.now = s.now.Add(time.Minute)
	return s
}

// A rollback on record continued after a resume says it went on from
// Pending, the phase the migration is continued from.
func TestARollbackOnRecordContinuedAfterAResumeNamesThePhaseItWentOnFrom(t *testing.T) {
	s := restoredPendingOverARollback(t, true)
	require.Equal(t, PhasePaused, func() Phase { st, _, _ := ParseStatus(map[string]string{AnnotationStatus: *s.raw}); return st.Phase }())
	d := s.decide(s.gates())
	require.NotNil(t, d.Status)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	why := "the status (Pending) does not know the rollback on record of migration 1-26@2026-11-29T12:00:00Z"
	assert.Equal(t, "adopted from the Deployments' move records: "+why, d.Status.Reason)
	assert.Equal(t, []Event{
		{Type: EventNormal, Reason: "Resumed", Message: "meshwave.io/paused was removed; resuming at wave 0"},
		{Type: EventWarning, Reason: "StatusAdopted", Message: why + "; continuing migration 1-26@2026-11-29T12:00:00Z at wave 2 (rollingback)"},
	}, d.Events)
}
