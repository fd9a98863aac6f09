package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// simPeer reads s's namespace as its peers do.
func simPeer(s *sim) Peer {
	return peerOf(Input{Snapshot: s.snap, Status: s.status})
}

func TestATargetThatIsNotANameBlocksWithAStatusThatReadsBack(t *testing.T) {
	for _, c := range []struct{ value, quoted string }{
		{"", `""`},
		{"not a name!", `"not a name!"`},
	} {
		t.Run(c.quoted, func(t *testing.T) {
			s := newSim(t, deploy("a"))
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = c.value
			d := s.decide(nil) // the sim fails the test unless the status reads back
			require.NotNil(t, d.Status)
			want := "meshwave.io/target-revision on namespace shop: " + c.quoted + " is not a revision or tag name (a non-empty label value)"
			assert.Equal(t, PhaseBlocked, d.Status.Phase)
			assert.Equal(t, BlockedInvalidInput, d.Status.BlockedKind)
			assert.Equal(t, "invalid input: "+want, d.Status.Reason)
			assert.Empty(t, d.Status.Target, "an unusable target is not written")
			assert.Equal(t, []Event{{Type: EventWarning, Reason: "InvalidAnnotation", Message: want}}, d.Events)
			assert.Empty(t, d.Moves)
			assert.Empty(t, d.Label)

			assert.Equal(t, Peer{Name: "shop", Priority: 100, Phase: PhaseBlocked}, simPeer(s), "it holds no slot")
			ok, why := Admit(Peer{Name: "blog", Priority: 100}, []Peer{simPeer(s)}, 1)
			assert.True(t, ok, why)

			d = s.decide(nil)
			assert.Nil(t, d.Status, "nothing more is written")
			assert.Empty(t, d.Events)
		})
	}
}

func TestATargetThatIsNotANameBlocksAMigrationWhereItIs(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	require.Equal(t, 1, s.status.Wave)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = ""
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, PhaseMigrating, d.Status.BlockedPhase)
	assert.Equal(t, "1-26", d.Status.Target, "the migration under way keeps its target")
	assert.Equal(t, 1, d.Status.Wave)
	assert.Empty(t, d.Moves)
	assert.True(t, simPeer(s).HoldsSlot, "half-way, it keeps its slot")

	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.rollOut("1-26", "a")
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, "fixed, it goes on where it stopped")
	assert.Equal(t, 1, d.Status.Wave)
	s.decide(s.gates())
	assert.Equal(t, WavePassed, s.status.WaveState)
	assert.Equal(t, map[string]int{"a": 1}, s.patches, "nothing is restarted again")
}

func TestAStatusNamesNoTargetOnlyWhenBlockedBeforeTheFirstWave(t *testing.T) {
	st := &Status{Phase: PhaseBlocked, BlockedKind: BlockedInvalidInput}
	require.NoError(t, st.Validate())
	st.BlockedKind = BlockedPrecheck
	assert.ErrorContains(t, st.Validate(), `target "" is not a revision or tag name`)
	st = &Status{Phase: PhasePending}
	assert.ErrorContains(t, st.Validate(), `target "" is not a revision or tag name`)
	st = &Status{Phase: PhaseBlocked, BlockedKind: BlockedInvalidInput, BlockedPhase: PhaseMigrating, Wave: 1, TotalWaves: 1, StartedAt: &t0, SourceRevision: "1-25"}
	assert.ErrorContains(t, st.Validate(), `target "" is not a revision or tag name`)
}
