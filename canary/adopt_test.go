package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The status a retry left while it waited for its turn (Pending, with
// retriedAt) is restored after the retry started its own migration. That
// migration is continued from its records, and the status it writes reads
// back: the Pending status's retriedAt, a time before the migration's own
// start, is one Validate refuses.
func TestAMigrationContinuedFromItsRecordsWritesAStatusThatReadsBack(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
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
