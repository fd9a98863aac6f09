package canary

import (
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
