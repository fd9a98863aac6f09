package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Completed migration 1-25 -> 1-26 (everything on 1-26, label 1-26) is
// Blocked by an invalid annotation: Blocked with blockedPhase Completed at
// wave 2. A person then retargets it to 1-27 while the block is still
// there. freshStatus's "unfinished" test is !terminal(prev.Phase), and
// Blocked is not terminal: the ended migration's source 1-25 is written
// into the fresh wave-0 status (new in a421080), read back into
// d.inherited, and the migration that starts once the annotation is fixed
// has source 1-25, a revision no workload has run since the last
// migration. Its rollback sends everything to 1-25; with 1-25 uninstalled
// (natural once 1-26 is done), precheck blocks the namespace forever on
// "its source revision 1-25 is not installed" although its real source
// 1-26 is installed. Before a421080 the wait dropped the source and it was
// read from the label and pods (1-26).
func TestAttack4ABlockedCompletedMigrationPassesNoSourceToTheNext(t *testing.T) {
	for _, how := range []string{"source", "1-25 uninstalled"} {
		t.Run(how, func(t *testing.T) {
			s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
			s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
			s.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
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
			if how == "1-25 uninstalled" {
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

// A wave-0 status is now read for its source (run() fills d.inherited from
// st.SourceRevision). A person (or a restored backup) sets sourceLabel
// 1-25 and sourceRevision 9-99, which no injector serves, on a namespace
// paused before its first wave. precheck resolves only the source label,
// never checks that it names the source revision, and the migration
// starts with sourceRevision 9-99: every move record says From 9-99, and a
// rollback's restarts expect pods on 9-99 (label 1-25 injects 1-25), so
// its gates never pass. Before a421080 a wave-0 status's source was
// recomputed at the start.
func TestAttack4AnEditedSourceRevisionOnAWaitingStatusIsNotTrusted(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)
	require.Equal(t, 0, s.status.Wave)
	s.editStatus(func(m map[string]any) {
		m["sourceLabel"], m["sourceRevision"] = "1-25", "9-99"
	})
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	if s.status.Wave == 0 {
		assert.Equal(t, PhaseBlocked, s.status.Phase, "refused, or started with the real source")
		return
	}
	assert.Equal(t, "1-25", s.status.SourceRevision, "started from an uninstalled source revision")
	for _, m := range d.Moves {
		assert.Equal(t, "1-25", m.Record.From, m.Workload)
	}
}
