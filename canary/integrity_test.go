package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The invariants hold whatever meshwave.io/status says: missing,
// unreadable, edited, or older than the moves.

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

func TestAStatusThatRegressedToAnEarlierWaveHasTheLaterWaveJudged(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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
	w, ok := WaveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.Equal(t, []string{"b", "c"}, []string{w.Workloads[0].Name, w.Workloads[1].Name})
	s.decide(s.gates())
	assert.Equal(t, ResultPending, s.gates()[0].Result, "b and c have not rolled out")
	assert.NotEqual(t, PhaseCompleted, s.status.Phase)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches, "nothing restarted twice")
}

func TestAnUnreadableStatusIsRebuiltOnceFromTheRecords(t *testing.T) {
	for _, raw := range []string{`{"phase":`, `{"phase":"Migrating","wave":2,"totalWaves":3,"target":"1-26","bogus":1}`} {
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
	}
}

func TestANamespacePausedBeforeItsFirstWaveHoldsNoSlot(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	d := s.decide(nil)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Empty(t, d.Moves)
	assert.False(t, d.Status.HoldsSlot())
	raw, _ := d.Status.Encode()
	peer, ok := PeerOf("shop", map[string]string{AnnotationTargetRevision: "1-26", AnnotationStatus: raw}, nil, nil)
	require.True(t, ok)
	ok, why := Admit(Peer{Name: "blog", Priority: 100}, []Peer{peer}, 1)
	assert.True(t, ok, why)
}

func TestABlockedMigrationKeepsItsSlotAndResumesWithoutAsking(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Workloads[1].Annotations[AnnotationWave] = "x"
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.True(t, d.Status.HoldsSlot(), "blocked half-way, it keeps its slot")
	// Another namespace took no slot meanwhile; unblocked, it goes on
	// even though a peer now waits with a higher priority.
	s.snap.Peers = []Peer{{Name: "aaa", Priority: 1, Phase: PhasePending}}
	delete(s.snap.Workloads[1].Annotations, AnnotationWave)
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
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

func TestASkipSetOnAFailedMemberIsHonouredOnResume(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.snap.Workloads[0].Annotations[AnnotationSkip] = "true"
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d := s.decide(nil)
	require.Len(t, d.Moves, 1, "no restart: only a's record is told it was skipped out of its wave")
	assert.True(t, d.Moves[0].RecordOnly)
	assert.Equal(t, OutcomeSkipped, d.Moves[0].Record.Outcome)
	assert.Equal(t, []WorkloadState{{Name: "a", State: StateSkipped, Reason: "meshwave.io/skip was set during wave 1: left where it is"}}, d.Status.Workloads[:1])
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, WavePassed, d.Status.WaveState, "nothing is left under test in wave 1, and a's record says why")
}

func TestAPausedDeploymentIsLeftOutAndPausingOneMidWaveFailsTheWave(t *testing.T) {
	paused := func(w *Workload) { w.Paused = true }
	p := PlanNamespace("shop", []Workload{deploy("a"), deploy("b", paused)}, "1-26", "", 0, WaveSizes{})
	assert.Equal(t, []Exclusion{{"b", "paused (spec.paused): a restart would not roll out"}}, p.Excluded)

	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Workloads[0].Paused = true
	d := s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
	assert.Equal(t, "rolled back 0 workloads to 1-25 (none of this migration's workloads is left to return): wave 1 failed: restart fail: a is paused (spec.paused): it does not roll out", d.Status.Reason)
	assert.Empty(t, d.Moves, "the paused workload is not patched again by the rollback")
	assert.Equal(t, 1, s.patches["a"])
}

func TestARefusedPatchFailsTheWaveWithTheAnswer(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.refused = map[string]string{"a": `admission webhook "policy.example" denied the request (403 Forbidden)`}
	s.decide(nil) // the patch is sent and refused
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRolledBack, d.Status.Phase, "the failure policy applies; a never moved, so nothing is restarted")
	assert.Equal(t, `rolled back 0 workloads to 1-25 (none of this migration's workloads is left to return): wave 1 failed: restart fail: the apiserver refused to restart a: admission webhook "policy.example" denied the request (403 Forbidden)`, d.Status.Reason)
	assert.Contains(t, s.events, Event{Workload: "a", Type: EventWarning, Reason: "WorkloadFailed",
		Message: `wave 1, restart: the apiserver refused to restart a: admission webhook "policy.example" denied the request (403 Forbidden)`})
	assert.Empty(t, d.Moves)
	assert.Zero(t, s.patches["a"])
}

func TestTheNamespaceKeepsItsRevisionLabelWhileMeshwaveOwnsIt(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.playUntil(PhaseCompleted)
	delete(s.snap.Namespace.Labels, LabelRev)
	d := s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "put back after completion")

	s = newSim(t, deploy("a"), deploy("b"))
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	d = s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "put back while paused")

	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	d = s.decide(nil)
	assert.Empty(t, d.Label, "once opted out, the label is the namespace's own")
}

func TestNothingMovesOntoARevisionWithoutAControlPlane(t *testing.T) {
	noIstiod := func(s *sim) { s.snap.Mesh.Revisions["1-26"] = Revision{Name: "1-26", Istiods: 1, ReadyIstiods: 0} }

	// Between waves: the next wave does not start.
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	noIstiod(s)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.True(t, d.SetPaused)
	assert.Equal(t, "wave 2 not started: revision 1-26 has no Ready istiod pod (1 pods): nothing moves onto a revision without a control plane", d.Status.Reason)

	// With the wave written and its restarts not sent yet (the agent
	// stopped in between): they are held.
	s = newSim(t, deploy("a"), deploy("b"))
	first := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	s.status = first.Status
	s.snap.Namespace.Labels[LabelRev] = "1-26"
	noIstiod(s)
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, PhasePaused, d.Status.Phase)
	assert.Equal(t, "wave 1 held before its restarts: revision 1-26 has no Ready istiod pod (1 pods): nothing moves onto a revision without a control plane", d.Status.Reason)
	assert.Zero(t, s.patches["a"])

	// Back, and resumed: the held restart goes out once.
	s.snap.Mesh.Revisions["1-26"] = Revision{Name: "1-26", Istiods: 1, ReadyIstiods: 1}
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	d = s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
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

func TestARetryAfterAWaveRollbackResumesAndKeepsGoing(t *testing.T) {
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

func TestAnOlderMigrationsRecordIsHistoryOnceTheStatusHasMovesOfItsOwn(t *testing.T) {
	s := toWave2(t)
	z := deploy("z")
	z.Annotations[AnnotationMove] = MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: t0.Add(-time.Hour), Migration: MigrationID("1-26", t0.Add(-time.Hour))}.Encode()
	s.snap.Workloads = append(s.snap.Workloads, z)
	id := s.status.MigrationID()
	for i := 0; i < 3; i++ {
		d := s.decide(nil)
		assert.NotContains(t, reasonsOf(d.Events), "StatusAdopted", "round %d", i)
		assert.Equal(t, id, s.status.MigrationID(), "round %d", i)
		assert.Empty(t, d.Moves, "round %d", i)
	}
}

func TestAWaveHoldsAtMost500Workloads(t *testing.T) {
	var ws []Workload
	for i := 0; i < 501; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i)))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1000, BatchSize: 1000}
	d := s.decide(nil)
	assert.Len(t, d.Moves, 500)
	assert.Len(t, d.Status.Workloads, 500)
	assert.Equal(t, 2, d.Status.TotalWaves)
}

func TestAnUnreadableStatusHoldsItsSlot(t *testing.T) {
	p, ok := PeerOf("shop", map[string]string{AnnotationTargetRevision: "1-26", AnnotationStatus: `{"phase":`}, nil, nil)
	require.True(t, ok)
	assert.True(t, p.HoldsSlot, "shop may be half-way through a migration")
	admitted, why := Admit(Peer{Name: "blog", Priority: 100}, []Peer{p}, 1)
	assert.False(t, admitted)
	assert.NotEmpty(t, why)
}
