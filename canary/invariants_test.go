package canary

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The invariants against damaged, stale or hostile state, scenario by
// scenario: each test names the invariant and the scenario that broke it
// before its fix.

// Invariant 6 (nothing spins / every state settles) and the rollback
// request contract ("a rollback request is consumed once acted on").
//
// Scenario: wave 2 (b, c) fails and is being rolled back (scope wave). The
// operator escalates with meshwave.io/rollback=all while the rollback is in
// flight. RollingBack never looks at the annotation, and WaveToVerify runs
// no gate while the annotation is present, so the rollback is never judged:
// the namespace stays RollingBack forever, requeued every 10s, the request
// is never consumed, and a (moved in wave 1) is never returned.
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
	assert.NotEqual(t, PhaseRollingBack, s.status.Phase, "after 5 rounds (5 minutes) with every pod back on 1-25 the rollback is still in progress; requeues %v", requeues)
	assert.Equal(t, 2, s.patches["a"], "rollback=all must return a too; patches %v", s.patches)
}

// Invariant 1/2 (a status from an older write never sends a rolled-back
// wave forward again).
//
// Scenario: the namespace first waited for its slot, so meshwave wrote a
// Pending status (no startedAt). It then ran wave 1 (a) and wave 2 (b, c);
// wave 2 failed and is being rolled back. The namespace's status is then
// put back to that first Pending write (a backup restore, a GitOps re-sync
// of a namespace manifest captured while it waited). recordConflict skips
// any status without a migration ID, so pending() calls continueOnRecord,
// which treats the rollback in flight as the history of a retry
// (retriedAt = now) and moves b and c forward again. Nobody asked for a
// retry, and the rollback is never judged.
func TestAPendingStatusFromBeforeTheStartContinuesTheRollback(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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

// Invariant 8 (never more namespaces migrating than concurrency).
//
// Scenario: concurrency 1. Namespace shop is half-way (wave 2 patched) when
// its meshwave.io/status is removed. PeerOf only holds a slot for an
// unreadable status, not a missing one, so blog is admitted and starts its
// canary. shop's next reconcile adopts its migration from the move records
// without asking Admit (adoption never does), so both migrate at once.
func TestAMissingStatusOverMoveRecordsHoldsTheSlot(t *testing.T) {
	shop := toWave2(t)
	shop.status = nil // the annotation was removed
	shopPeer := shopPeer(t, shop)

	blog := newSim(t, deploy("x"))
	blog.snap.Namespace.Name = "blog"
	blog.snap.Peers = []Peer{shopPeer}
	blog.decide(nil)

	blogRaw, err := blog.status.Encode()
	require.NoError(t, err)
	blogPeer, _ := PeerOf("blog", map[string]string{AnnotationTargetRevision: "1-26", AnnotationStatus: blogRaw}, nil, nil)
	shop.snap.Peers = []Peer{blogPeer}
	shop.decide(nil)

	var holding []string
	if blog.status.HoldsSlot() {
		holding = append(holding, "blog")
	}
	if shop.status.HoldsSlot() {
		holding = append(holding, "shop")
	}
	assert.LessOrEqual(t, len(holding), 1, "concurrency 1, but %v migrate at once (shop %s wave %d, blog %s wave %d)",
		holding, shop.status.Phase, shop.status.Wave, blog.status.Phase, blog.status.Wave)
}

// Invariant 2 (no workload counts as moved unless its wave passed).
//
// Scenario: a namespace owner (or a manifest copied from a Deployment that
// was moved) puts a meshwave.io/move record of wave 3 of the current
// migration on d while wave 2 (b, c) is still rolling out. The records
// "outrank" the status: the status is adopted at wave 3, and adoption
// counts every earlier wave as passed. b and c never rolled out (their
// pods still run 1-25) and were never judged, yet they count as moved and
// the migration completes once d's gates pass.
func TestARecordOfALaterWaveDoesNotLetTheWaveInFlightSkipJudgment(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("d"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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

// Invariant 2 (no workload counts as moved unless its wave passed) under
// a status rebuilt from the records.
//
// Scenario (policy Continue, maxFailedPercent 40): the canary a fails and
// is tolerated (pastFailed 1); wave 2 (b, c) starts. The status is then
// lost. Adoption counts every earlier wave as moved, and a's move record
// does not say it failed, so a is counted as moved and pastFailed is gone:
// the migration completes with "moved 3 workloads ... " and no failure.
func TestAToleratedFailureSurvivesALostStatus(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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

// Rollback contract ("rollback=all returns every workload this migration
// moved") under invariant-4's "the records outrank the status".
//
// Scenario: a completed two-wave migration (a in wave 1, b in wave 2) is
// asked rollback=all. The namespace write lands (RollingBack, all) and
// b's rollback patch lands, but a's patch hits a conflict. Before the next
// reconcile the status goes back to the Completed write (a deposed
// leader's view, a restore). Adoption sees only b's rollback record, at
// the last wave, and rebuilds the rollback with scope "wave": a is never
// returned, and the namespace ends RolledBack with a still on the target.
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

// Invariant 2 (a status from an older write never lets a patched wave
// skip judgment).
//
// Scenario: after a rollback of wave 2, the target is removed and added
// again (a retry); wave 1 passes again and wave 2 (b, c) is patched again.
// The status then goes back to the RolledBack write from before the retry
// (a restore, a GitOps re-sync). recordConflict only looks for records of
// a later wave or of a rollback the status does not know; forward moves
// newer than the status's own end are not a conflict. RolledBack is
// final: b and c, just restarted onto 1-26, are never judged, the label
// is switched back to 1-25, and the counts call all three moved.
func TestAStatusFromBeforeARetryIsAdoptedFromTheRetry(t *testing.T) {
	s, rolledBack := retried(t, nil)
	s.raw, s.status = &rolledBack, nil
	d := s.decide(nil)
	require.NotNil(t, s.status)
	assert.NotEqual(t, PhaseRolledBack, s.status.Phase, "b and c were moved again after this status was written, and are never judged (label set to %q, counts %+v)", d.Label, s.status.Counts)
}

// Invariant 1/2 (a lost status never restarts a workload its gates did not
// send back).
//
// Scenario: in a retry after a rollback of wave 2, wave 2 is patched again;
// b's patch lands but c's meets a conflict (it still carries the rollback
// record from before the retry). The status is then lost. Adoption
// rebuilds the status from the records without retriedAt, so c's old
// rollback record looks current: the migration is adopted as a rollback of
// wave 2, and b, just moved and never judged, is restarted back to 1-25.
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

// shopPeer reads s's namespace as a peer named shop, as the agent does:
// its annotations, and its workloads when those do not settle it.
func shopPeer(t *testing.T, s *sim) Peer {
	t.Helper()
	annotations := maps.Clone(s.snap.Namespace.Annotations)
	if s.raw != nil {
		annotations[AnnotationStatus] = *s.raw
	} else if s.status != nil {
		raw, err := s.status.Encode()
		require.NoError(t, err)
		annotations[AnnotationStatus] = raw
	}
	p, ok := PeerOf("shop", annotations, s.snap.Mesh.Resolve, func() ([]Workload, error) { return s.snap.Workloads, nil })
	require.True(t, ok)
	return p
}

// Invariant 8 (never more namespaces migrating than concurrency).
//
// Scenario: concurrency 1. Namespace shop is half-way (wave 2 patched)
// when its meshwave.io/status is replaced by an old copy of a migration to
// the same target that ended (a GitOps re-sync of a stale manifest). Read
// from its annotations alone, shop has ended and holds no slot, so blog is
// admitted; shop's next reconcile adopts its migration from the newer move
// records without asking Admit, as adoption never does, and both migrate.
// The peer must hold the slot while the records contradict the status,
// exactly as the namespace's own decision reads them.
func TestAnEndedStatusOverNewerMoveRecordsHoldsTheSlot(t *testing.T) {
	for _, phase := range []Phase{PhaseCompleted, PhaseRolledBack} {
		t.Run(string(phase), func(t *testing.T) {
			shop := toWave2(t)
			started := *shop.status.StartedAt
			shop.editStatus(func(m map[string]any) {
				m["phase"], m["reason"] = string(phase), "an old copy"
				m["startedAt"] = started.Add(-24 * time.Hour).Format(time.RFC3339)
			})
			peer := shopPeer(t, shop)
			assert.Equal(t, Peer{Name: "shop", Priority: DefaultPriority, Phase: phase, HoldsSlot: true}, peer)

			blog := newSim(t, deploy("x"))
			blog.snap.Namespace.Name = "blog"
			blog.snap.Peers = []Peer{peer}
			d := blog.decide(nil)
			assert.Equal(t, PhasePending, d.Status.Phase)
			assert.Equal(t, "waiting for a free slot: 1 of 1 in use by shop", d.Status.Reason)
			assert.Empty(t, d.Moves)

			d = shop.decide(nil)
			require.True(t, hasEvent(d, "StatusAdopted"), "events %v", d.Events)
			assert.True(t, d.Status.HoldsSlot(), "shop adopted its migration: %s at wave %d", d.Status.Phase, d.Status.Wave)
			assert.Equal(t, started, *d.Status.StartedAt)
		})
	}
}

// A migration that ended as its records say holds no slot: the records
// are read only to find a contradiction, and agreeing ones free it.
func TestAnEndedStatusItsRecordsAgreeWithHoldsNoSlot(t *testing.T) {
	s := toWave2(t)
	s.rollOut("1-26", "b", "c")
	s.decide(s.gates())
	require.Equal(t, PhaseCompleted, s.status.Phase)
	assert.Equal(t, Peer{Name: "shop", Priority: DefaultPriority, Phase: PhaseCompleted}, shopPeer(t, s))

	r := newSim(t, deploy("a"), deploy("b"))
	r.decide(nil)
	r.decide(failRollout("a", "a did not roll out"))
	r.rollOut("1-25", "a")
	r.decide(r.gates())
	require.Equal(t, PhaseRolledBack, r.status.Phase)
	assert.Equal(t, Peer{Name: "shop", Priority: DefaultPriority, Phase: PhaseRolledBack}, shopPeer(t, r))
}

// A namespace whose workloads cannot be read may be half-way: it holds its
// slot, the careful answer.
func TestAPeerWhoseWorkloadsCannotBeReadHoldsItsSlot(t *testing.T) {
	s := toWave2(t)
	s.rollOut("1-26", "b", "c")
	s.decide(s.gates())
	raw, err := s.status.Encode()
	require.NoError(t, err)
	for _, annotations := range []map[string]string{
		{AnnotationTargetRevision: "1-26", AnnotationStatus: raw},
		{AnnotationTargetRevision: "1-26"},
	} {
		p, ok := PeerOf("shop", annotations, s.snap.Mesh.Resolve, func() ([]Workload, error) { return nil, errors.New("not synced") })
		require.True(t, ok)
		assert.True(t, p.HoldsSlot, "status %q", annotations[AnnotationStatus])
	}
}
