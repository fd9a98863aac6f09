package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Invariant 8 (never more namespaces migrating than concurrency).
//
// PeerOf counts an ended namespace whose records contradict its status as
// holding its slot because it "may be half-way through a migration its own
// next reconcile continues". That premise is not the only way a
// contradiction arises: an ended status is read with its target
// re-resolved (Decide keeps a terminal status and only rewrites its
// targetRevision), so when a tag is repointed, the records of an old,
// long-finished migration to the revision it names now contradict a status
// that was never about them.
//
// Scenario: concurrency 1. shop targets the tag canary. canary named 1-27;
// shop migrated a, b and c to 1-27 (M0) and completed. a was then marked
// meshwave.io/skip, canary was repointed to 1-26, and shop was retried:
// M1 moved b and c to 1-26 and completed; a keeps its M0 record. blog has
// since been admitted and migrates. canary is repointed back to 1-27:
// nobody asked shop to move, and without a's record shop would stay
// Completed. With it, the Completed status of 1-26@T1 reads as 1-27@T1,
// which "does not know" M0's moves: shop adopts M0 without admission and
// moves b and c to 1-27 beside blog. PeerOf does count shop as holding
// (the same recordConflict), but blog holds the only slot already.
func TestATagRepointedOverAnEndedNamespaceStartsNoMigrationBesideAnother(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
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
	if d.Status != nil {
		assert.False(t, TakesSlot(before, d.Status),
			"a repointed tag started shop (%s at wave %d) beside blog with concurrency 1, unasked and unadmitted: %v", d.Status.Phase, d.Status.Wave, events)
	}
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

// Invariant 8, the other way, against a hostile namespace owner: nothing
// spins, and a hold is explained.
//
// Scenario: shop completed. Its owner, who may edit its Deployments but
// not the namespace, puts on a a move record of a "newer migration" in
// the last wave a record may name (maxWaves). PeerOf reads shop as holding
// (the records contradict the status), and shop's decision adopts it:
// that wave, with a workload deployed since still to plan after it. The
// status adopted said totalWaves maxWaves+1 and did not read back: the
// next decision found it unreadable and adopted the same again, on every
// reconcile, and peers read an unreadable status as holding, so every
// other namespace waited for good with nothing said why. Now every status
// written reads back, and the migration, which cannot have a wave after
// the last, pauses half-way (holding its slot, as any migration paused
// half-way does) with a reason that names the records.
func TestAForgedMoveRecordOfTheLastWaveNeitherSpinsNorHoldsUnexplained(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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
	for round := 0; round < 8; round++ {
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
