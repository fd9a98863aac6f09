package canary

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slotTakenUnadmitted says why decision d, made from in after reading its
// peers reads times, starts a migration (TakesSlot) without admission; ""
// when it does not. The agent serialises only the decisions that read the
// peers (Snapshot.ReadPeers), so any other start escapes both the priority
// order and the concurrency limit. Two starts go without admission by
// design, and are let through:
//   - a rollback: it always runs (README, maintenance windows);
//   - the adoption of a migration from its move records, when the status
//     is missing, unreadable, or contradicted by the records (an ended
//     status restored over a newer migration's): only while its peers
//     already count it as holding its slot (PeerOf, read from in).
func slotTakenUnadmitted(in Input, d Decision, reads int) string {
	if d.Status == nil || !TakesSlot(in.Status, d.Status) || reads > 0 {
		return ""
	}
	if d.Status.Phase == PhaseRollingBack {
		return ""
	}
	if in.Status == nil || hasEvent(d, "StatusAdopted") {
		if peerOf(in).HoldsSlot {
			return ""
		}
		return fmt.Sprintf("%s at wave %d adopted over %s without admission, while its peers read it as holding no slot: %v", d.Status.Phase, d.Status.Wave, describeStatus(in.Status), d.Events)
	}
	return fmt.Sprintf("%s at wave %d (%s) took a slot over %s at wave %d (blocked phase %q) without reading its peers: %s",
		d.Status.Phase, d.Status.Wave, d.Status.WaveState, in.Status.Phase, in.Status.Wave, in.Status.BlockedPhase, d.Status.Reason)
}

// peerOf is the namespace of in as its peers read it: its annotations, the
// status as in holds it, and its workloads.
func peerOf(in Input) Peer {
	annotations := map[string]string{}
	for k, v := range in.Snapshot.Namespace.Annotations {
		annotations[k] = v
	}
	delete(annotations, AnnotationStatus)
	switch {
	case in.StatusErr != nil:
		annotations[AnnotationStatus] = "{unreadable"
	case in.Status != nil:
		raw, err := in.Status.Encode()
		if err != nil {
			panic(err)
		}
		annotations[AnnotationStatus] = raw
	}
	p, _ := PeerOf(in.Snapshot.Namespace.Name, annotations, in.Snapshot.Mesh.Resolve, func() ([]Workload, error) { return in.Snapshot.Workloads, nil })
	return p
}

func describeStatus(st *Status) string {
	if st == nil {
		return "no status"
	}
	return fmt.Sprintf("%s at wave %d", st.Phase, st.Wave)
}

// requireAdmitted fails t when a decision read its peers more than once,
// or started a migration without reading them (slotTakenUnadmitted).
func requireAdmitted(t testing.TB, in Input, d Decision, reads int) {
	t.Helper()
	require.LessOrEqual(t, reads, 1, "a decision reads its peers at most once")
	if why := slotTakenUnadmitted(in, d, reads); why != "" {
		t.Fatal(why)
	}
}

func hasEvent(d Decision, reason string) bool {
	for _, e := range d.Events {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

// A status that says Blocked before the first wave holds no slot,
// whatever phase it was blocked in. One edited by a person (or restored
// from a copy) to be blocked in Migrating or Analyzing at wave 0 is
// admitted before its first wave once unblocked: it does not start wave 1
// without reading its peers (the agent takes the admission lock only for
// a decision that reads them), beside the namespace holding the only
// slot.
func TestAStatusBlockedAtWaveZeroIsAdmittedBeforeItsFirstWave(t *testing.T) {
	for _, phase := range []string{"Migrating", "Analyzing"} {
		for _, state := range []string{"Passed", "Verifying"} {
			t.Run(phase+"/"+state, func(t *testing.T) {
				s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
				s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
				s.snap.Namespace.Annotations[AnnotationPriority] = "x" // blocks: invalid input
				s.decide(nil)
				require.Equal(t, PhaseBlocked, s.status.Phase)
				s.editStatus(func(m map[string]any) {
					m["blockedPhase"], m["waveState"] = phase, state
					m["gatesSince"] = t0.Format(time.RFC3339)
				})
				delete(s.snap.Namespace.Annotations, AnnotationPriority)
				s.now = s.now.Add(time.Minute)
				s.decide(s.gates())
				require.False(t, s.status.HoldsSlot(), "concurrency 1 and blog holds the slot, yet %s at wave %d", s.status.Phase, s.status.Wave)
			})
		}
	}
}

// Never more namespaces migrating than concurrency allows, over every
// status a person could leave that meshwave reads: each phase, blocked
// phase, wave state and rollback scope, at wave 0 and 1, decided with and
// without a pause or rollback request. None starts a migration without
// reading its peers (decideBothWays checks each; the statuses decided are
// not written back).
func TestNoReadableStatusStartsAMigrationWithoutReadingThePeers(t *testing.T) {
	decided := 0
	for _, phase := range Phases {
		for _, blocked := range append([]Phase{""}, Phases...) {
			for _, state := range waveStates {
				for _, scope := range []RollbackScope{RollbackNone, RollbackWave, RollbackAll} {
					for wave := 0; wave <= 1; wave++ {
						st := &Status{Phase: phase, BlockedPhase: blocked, WaveState: state, Rollback: scope, Target: "1-26", TargetRevision: "1-26",
							Wave: wave, TotalWaves: 2, GatesSince: &t0, SourceLabel: "1-25", SourceRevision: "1-25", StartedAt: &t0}
						if phase == PhaseBlocked {
							st.BlockedKind = BlockedInvalidInput
						}
						if st.Validate() != nil {
							continue
						}
						for _, ann := range []string{"", AnnotationPaused, AnnotationRollback} {
							s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
							s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
							switch ann {
							case AnnotationPaused:
								s.snap.Namespace.Annotations[ann] = "true"
							case AnnotationRollback:
								s.snap.Namespace.Annotations[ann] = "all"
							}
							s.status, s.now = st, t0.Add(time.Hour)
							decideBothWays(t, Input{Snapshot: s.snap, Status: st.DeepCopy(), Verdicts: s.gates(), Now: s.now, Config: s.cfg, WasOptedIn: true})
							decided++
						}
					}
				}
			}
		}
	}
	require.Greater(t, decided, 100)
}

func TestAdmit(t *testing.T) {
	self := Peer{Name: "media", Priority: 20}
	tests := []struct {
		name        string
		peers       []Peer
		concurrency int
		ok          bool
		why         string
	}{
		{"alone it starts", nil, 1, true, ""},
		{"a migrating namespace holds the only slot", []Peer{{Name: "shop", Priority: 10, Phase: PhaseMigrating, HoldsSlot: true}}, 1, false, "waiting for a free slot: 1 of 1 in use by shop"},
		{"a paused namespace holds its slot", []Peer{{Name: "shop", Priority: 30, Phase: PhasePaused, HoldsSlot: true}}, 1, false, "waiting for a free slot: 1 of 1 in use by shop"},
		{"a pending namespace of lower priority value goes first", []Peer{{Name: "shop", Priority: 10, Phase: PhasePending}}, 1, false, "waiting for its turn: shop (priority 10) go first"},
		{"equal priority goes by name", []Peer{{Name: "alpha", Priority: 20}}, 1, false, "waiting for its turn: alpha (priority 20) go first"},
		{"later namespaces do not hold it up", []Peer{{Name: "zoo", Priority: 20}, {Name: "web", Priority: 50}}, 1, true, ""},
		{"completed, blocked and rolled back namespaces hold no slot", []Peer{{Name: "a", Priority: 1, Phase: PhaseCompleted}, {Name: "b", Priority: 1, Phase: PhaseBlocked}, {Name: "c", Priority: 1, Phase: PhaseRolledBack}}, 1, true, ""},
		{"with two slots it starts beside one migration", []Peer{{Name: "shop", Priority: 10, Phase: PhaseMigrating, HoldsSlot: true}}, 2, true, ""},
		{"with two slots, one taken and one earlier pending, it waits", []Peer{{Name: "shop", Priority: 10, Phase: PhaseMigrating, HoldsSlot: true}, {Name: "blog", Priority: 5}}, 2, false, "waiting for its turn: blog (priority 5) go first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := Admit(self, tt.peers, tt.concurrency)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.why, why)
		})
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

func TestAnUnreadableStatusHoldsItsSlot(t *testing.T) {
	p, ok := PeerOf("shop", map[string]string{AnnotationTargetRevision: "1-26", AnnotationStatus: `{"phase":`}, nil, nil)
	require.True(t, ok)
	assert.True(t, p.HoldsSlot, "shop may be half-way through a migration")
	admitted, why := Admit(Peer{Name: "blog", Priority: 100}, []Peer{p}, 1)
	assert.False(t, admitted)
	assert.NotEmpty(t, why)
}

// Never more namespaces migrating than concurrency allows (1 here).
// Namespace shop is half-way (wave 2 patched) when its meshwave.io/status
// is removed. Its next reconcile adopts its migration from the move records
// without asking Admit, as adoption never does, so its peers read a missing
// status over move records as holding the slot: blog is not admitted
// beside it.
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

// Never more namespaces migrating than concurrency allows (1 here).
// Namespace shop is half-way (wave 2 patched) when its meshwave.io/status
// is replaced by an old copy of a migration to the same target that ended
// (a GitOps re-sync of a stale manifest). shop's next reconcile adopts its
// migration from the newer move records without asking Admit, as adoption
// never does: its peers read shop as holding the slot while the records
// contradict the status, exactly as shop's own decision reads them, so
// blog waits.
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

// Never more namespaces migrating than concurrency allows (1 here), when
// a tag is repointed over an ended namespace. An ended status is read with
// its target re-resolved, so once a tag is repointed, the records of an
// old, long-finished migration to the revision it names now may
// contradict a status that was never about them. shop targets the tag
// canary. canary named 1-27; shop migrated a, b and c to 1-27 (M0) and
// completed. a was then marked meshwave.io/skip, canary was repointed to
// 1-26, and shop was retried: M1 moved b and c to 1-26 and completed; a
// keeps its M0 record. blog has since been admitted and migrates. canary
// is repointed back to 1-27: nobody asked shop to move, and it takes no
// slot and restarts nothing beside blog.
func TestATagRepointedOverAnEndedNamespaceStartsNoMigrationBesideAnother(t *testing.T) {
	s := batchedSim(t, "a", "b", "c")
	s.install("1-27")
	s.snap.Mesh.Tags["canary"] = "1-27"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.playUntil(PhaseCompleted)
	m0 := s.status.MigrationID()
	require.Equal(t, "1-27", s.status.TargetRevision)

	// a is skipped from now on; canary names 1-26; shop is retried.
	s.snap.Workloads[0].Annotations[AnnotationSkip] = "true"
	s.snap.Mesh.Tags["canary"] = "1-26"
	s.now = s.now.Add(time.Hour)
	s.decide(nil)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)
	s.now = s.now.Add(time.Hour)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.playUntil(PhaseCompleted)
	require.Equal(t, "1-26", s.status.TargetRevision)
	require.NotEqual(t, m0, s.status.MigrationID())
	a, _ := ReadMoveRecord(s.snap.Workloads[0].Annotations)
	require.Equal(t, m0, a.Migration, "a, skipped, keeps its record of M0")

	// blog was admitted since and migrates.
	s.snap.Peers = []Peer{{Name: "blog", Priority: DefaultPriority, Phase: PhaseMigrating, HoldsSlot: true}}
	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Tags["canary"] = "1-27"
	before := s.status.DeepCopy()
	d := s.decide(nil)
	var events []string
	for _, e := range d.Events {
		events = append(events, e.Reason+": "+e.Message)
	}
	assert.False(t, TakesSlot(before, s.status),
		"a repointed tag started shop (%s at wave %d) beside blog with concurrency 1, unasked and unadmitted: %v", s.status.Phase, s.status.Wave, events)
	// Played on: a already runs 1-27, so its wave passes, and the next
	// wave restarts b and c.
	var moved []string
	for i := 0; i < 3; i++ {
		s.now = s.now.Add(2 * time.Minute)
		for _, m := range s.decide(s.gates()).Moves {
			if m.RecordOnly {
				continue // a's skip written on its record
			}
			moved = append(moved, m.Workload+"→"+m.Record.Revision)
		}
	}
	assert.Empty(t, moved, "restarted while blog holds the only slot")
}

// A peer's status written as holding a slot holds it until the namespace's
// own decision writes another: an opt-out or a new target undone before
// that decision would otherwise let another namespace start beside the
// migration it then continues.
func TestAPeerHoldsItsSlotUntilItsOwnDecisionReleasesIt(t *testing.T) {
	for _, c := range []struct {
		name     string
		edit     func(s *sim)
		released Phase
	}{
		{"opted out", func(s *sim) { delete(s.snap.Namespace.Annotations, AnnotationTargetRevision) }, PhaseStopped},
		{"a new target", func(s *sim) { s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27" }, PhasePending},
	} {
		t.Run(c.name, func(t *testing.T) {
			blog := newSim(t, deploy("p"), deploy("q"))
			blog.snap.Namespace.Name = "blog"
			blog.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
			blog.decide(nil)
			require.True(t, blog.status.HoldsSlot())
			c.edit(blog)
			p := simPeer(blog)
			assert.True(t, p.HoldsSlot, "held until blog's own decision")
			ok, why := Admit(Peer{Name: "shop", Priority: 100}, []Peer{p}, 1)
			assert.False(t, ok)
			assert.Equal(t, "waiting for a free slot: 1 of 1 in use by blog", why)

			blog.snap.Peers = []Peer{{Name: "media", Priority: 100, Phase: PhaseMigrating, HoldsSlot: true}}
			blog.decide(nil)
			require.Equal(t, c.released, blog.status.Phase)
			raw, err := blog.status.Encode()
			require.NoError(t, err)
			annotations := map[string]string{AnnotationStatus: raw}
			for k, v := range blog.snap.Namespace.Annotations {
				annotations[k] = v
			}
			p, _ = PeerOf("blog", annotations, blog.snap.Mesh.Resolve, func() ([]Workload, error) { return blog.snap.Workloads, nil })
			assert.False(t, p.HoldsSlot, "released once its decision wrote the %s status", c.released)
		})
	}
}
