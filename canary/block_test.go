package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInvalidAnnotationsBlockTheNamespaceAndWriteNothingElse(t *testing.T) {
	s := newSim(t, deploy("cart", waveAnn("abc")), deploy("web"))
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, `invalid input: meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`, d.Status.Reason)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
	assert.False(t, d.SetPaused)
	assert.Zero(t, d.RequeueAfter, "retrying invalid input does not help")
	assert.Equal(t, []Event{
		{Workload: "cart", Type: EventWarning, Reason: "InvalidAnnotation", Message: `meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`},
		{Type: EventWarning, Reason: "InvalidAnnotation", Message: `invalid input: meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`},
	}, d.Events)

	d = s.decide(nil)
	assert.Nil(t, d.Status, "the same problem is not written again")
	assert.Empty(t, d.Events, "nor reported again")

	delete(s.snap.Workloads[0].Annotations, AnnotationWave)
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, "fixing the value lets it start")
}

func TestInvalidInputMidWaveBlocksAndThenResumesWhereItWas(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.snap.Namespace.Annotations[AnnotationPriority] = "first"
	d := s.decide(s.gates())
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, PhaseMigrating, d.Status.BlockedPhase)
	assert.Empty(t, d.Moves)

	delete(s.snap.Namespace.Annotations, AnnotationPriority)
	s.rollOut("1-26", "a")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, WaveVerifying, d.Status.WaveState)
	assert.Empty(t, d.Moves, "the wave's workload is not restarted again")
	d = s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
}

func TestATargetThatNamesNothingBlocks(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-99"
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, `meshwave.io/target-revision on namespace shop: "1-99" is not an installed revision or tag`)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
}

// Bad input gets a clear error and changes nothing else, within the bound
// on the status's size. A Deployment carries a huge invalid
// meshwave.io/wave value (200 KB of control bytes, a paste gone wrong).
// Quoted in full with %q, each byte escaped as \x01, the Blocked status
// would be about 800 KB, over the apiserver's 256 KiB limit for an
// object's annotations: the namespace write would be refused with 422 on
// every retry and the reason would never reach anyone. The status and
// each Event stay under that limit.
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

// Bad input is reported once, and nothing repeats without a change. A
// chart typo sets meshwave.io/wave: "first" on all 60 Deployments of a
// namespace. The Blocked reason joins 60 errors, about 5.5 KB, and is cut
// to 4 KiB when written; it is compared with the next decision's as
// written, so later decisions, with nothing changed, emit none of the 61
// InvalidAnnotation Warning Events again.
func TestALongBlockedReasonIsReportedOnce(t *testing.T) {
	var ws []Workload
	for i := 0; i < 60; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i), waveAnn("first")))
	}
	s := newSim(t, ws...)
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	first := len(d.Events)
	var again []int
	for i := 0; i < 3; i++ {
		d = s.decide(nil)
		require.Nil(t, d.Status, "the status does not change")
		again = append(again, len(d.Events))
	}
	assert.Equal(t, []int{0, 0, 0}, again, "the first decision reported the %d errors in %d Events; each later one with nothing changed reports them again", len(ws), first)
}

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

// A target that is not a name keeps the status where it stands; one that
// is lost or cannot be read is rebuilt from the newest migration on
// record, so a namespace half-way (wave 2 restarted, its label on the
// target) is blocked where it stands, and holds its slot.
func TestAnInvalidTargetOnANamespaceWhoseStatusIsGoneMidWayKeepsItsSlot(t *testing.T) {
	for _, c := range []struct {
		name string
		lose func(s *sim)
	}{
		{"lost", func(s *sim) { s.status = nil }},
		{"unreadable", func(s *sim) {
			raw := "{"
			s.raw, s.status = &raw, nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := toWave2(t)
			c.lose(s)
			s.snap.Namespace.Annotations[AnnotationTargetRevision] = ""
			assert.True(t, shopPeer(t, s).HoldsSlot, "its peers read it as holding no slot")

			d := s.decide(nil)
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseBlocked, d.Status.Phase)
			assert.Equal(t, 2, d.Status.Wave, "blocked where it stands: wave 2 is on record")
			assert.True(t, d.Status.HoldsSlot(), "the status written holds no slot")
			assert.True(t, shopPeer(t, s).HoldsSlot, "once written, its peers read it as holding no slot")
		})
	}
}
