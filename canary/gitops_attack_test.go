package canary

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// migrateAll runs the sim's migration to its end, rolling out each move.
func migrateAll(t *testing.T, s *sim) {
	t.Helper()
	for i := 0; i < 50 && s.status.Phase != PhaseCompleted; i++ {
		s.now = s.now.Add(time.Minute)
		d := s.decide(s.gates())
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
}

func TestMoreTemplatesRevertedThanTheStatusRemembersAreReportedOnceAndTheStatusSettles(t *testing.T) {
	var ws []Workload
	for i := 0; i < 12; i++ {
		ws = append(ws, deploy(fmt.Sprintf("w%02d", i), argoApp("shop")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 20}
	s.decide(nil)
	s.rollOut("1-26", "w00")
	migrateAll(t, s)

	// Argo CD's self-heal takes every template back from git.
	for i := range s.snap.Workloads {
		delete(s.snap.Workloads[i].TemplateAnnotations, AnnotationRestartedAt)
	}
	s.now = s.now.Add(time.Minute)
	s.events = nil
	d := s.decide(nil)
	assert.Len(t, d.Reverts, maxReverts, "each reverted template the status can remember is reported")
	assert.Len(t, s.status.Reverts, maxReverts)
	assert.Contains(t, s.status.Warnings, templatesUnlistedWarning, "the others together")
	assert.Equal(t, maxReverts+1, len(s.events))

	for i := 0; i < 5; i++ {
		s.now = s.now.Add(time.Second)
		s.events = nil
		d = s.decide(nil)
		assert.Empty(t, d.Reverts, "reported once, not again at decision %d", i)
		assert.Nil(t, d.Status, "nothing new to write at decision %d", i)
		assert.NotContains(t, s.reasons(), "TemplateReverted")
	}
}

func TestAnArgoCDTrackingIDOfAnyLengthKeepsTheStatusReadable(t *testing.T) {
	app := strings.Repeat("x", 100_000)
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationArgoTrackingID] = app + ":/Namespace:shop"
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	for n := 1; n <= 3; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-25"
		s.decide(nil) // sim.apply requires the status written to read back
	}
	assert.Equal(t, PhasePaused, s.status.Phase, "three reverts pause, whatever the owner's name")
	for _, r := range s.status.Reverts {
		assert.LessOrEqual(t, len(r.Owner), 512)
	}
	for _, r := range s.last.Reverts {
		assert.LessOrEqual(t, len(r.Owner), 512, "the metric's owner label is bounded")
	}
}

func TestALabelSwitchedBackWhileBlockedHalfWayIsNotFoughtForEver(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
	// An invalid annotation blocks the migration half-way.
	s.snap.Workloads[1].Annotations[AnnotationWave] = "abc"
	s.now = s.now.Add(time.Second)
	s.decide(nil)
	require.Equal(t, PhaseBlocked, s.status.Phase)

	putBack := 0
	for n := 0; n < 10; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-25" // self-heal
		if d := s.decide(nil); d.Label != "" {
			putBack++
		}
	}
	assert.Equal(t, labelRevertLimit-1, putBack, "put back twice, as outside a block")
	assert.Equal(t, PhaseBlocked, s.status.Phase)
	assert.Equal(t, PhasePaused, s.status.BlockedPhase, "the migration under the block is paused")
	assert.Equal(t, "true", s.snap.Namespace.Annotations[AnnotationPaused])

	// The annotation is fixed: the migration stays paused, the label where
	// the owner set it, until a person resumes.
	delete(s.snap.Workloads[1].Annotations, AnnotationWave)
	s.now = s.now.Add(time.Second)
	d := s.decide(nil)
	assert.Equal(t, PhasePaused, s.status.Phase)
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Moves)
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Second)
	d = s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "owned again once resumed")
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
}

func TestALabelSwitchedBackDuringARollbackIsPutBackTwiceThenLeftWithAPause(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.now = s.now.Add(time.Second)
	s.decide(nil)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	require.Equal(t, "1-25", s.snap.Namespace.Labels[LabelRev])

	putBack := 0
	for n := 0; n < 10; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-26" // self-heal
		if d := s.decide(nil); d.Label != "" {
			putBack++
		}
	}
	assert.Equal(t, labelRevertLimit-1, putBack)
	assert.Equal(t, PhasePaused, s.status.Phase, "a rollback whose label is left pauses, as a wave does")
	assert.Equal(t, WaveRollingBack, s.status.WaveState)
}

func TestASailGracePeriodTooLongForADurationIsLongEnough(t *testing.T) {
	huge := int64(math.MaxInt64)
	warnings := sailWarnings([]SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &huge}}, 3, "1-25", Config{})
	assert.Empty(t, warnings, "a grace period of %d s outlasts any migration", huge)
	tenYears := int64(10 * 365 * 24 * 3600)
	assert.Empty(t, sailWarnings([]SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &tenYears}}, 3, "1-25", Config{}))
	overflow := int64(math.MaxInt64/int64(time.Second)) + 1
	assert.Empty(t, sailWarnings([]SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &overflow}}, 3, "1-25", Config{}))
}

func TestWhatMeshwaveNeverRestartsIsBoundedWhateverItsPodsSay(t *testing.T) {
	s := snap(deploy("api"))
	revs := map[string]int{}
	for i := 0; i < 2000; i++ {
		revs[fmt.Sprintf("rev-%04d-%s", i, strings.Repeat("x", 50))] = 1
	}
	var ws []Unmovable
	for i := 0; i < maxSkipped; i++ {
		// A pod's owner reference may name any kind, and its sidecar
		// status any revision.
		ws = append(ws, Unmovable{ID: fmt.Sprintf("%s/p-%02d", strings.Repeat("K", 10_000), i), Revisions: revs})
	}
	s.Unmovable = ws
	d := Decide(Input{Snapshot: s, Now: t0, Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	assert.Less(t, len(raw), 16<<10, "the status stays small")
	for _, x := range d.Status.Unmovable {
		assert.LessOrEqual(t, len(x.Reason), maxItemReason)
	}
	_, _, err = ParseStatus(map[string]string{AnnotationStatus: raw})
	require.NoError(t, err)
}

func TestAnEditedStatusThatGaveTheLabelUpMidWaveDoesNotMoveOnWithoutIt(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	require.Equal(t, PhaseMigrating, s.status.Phase)
	// Someone edits the status: the label was given up three times, yet
	// the wave goes on; and switches the label.
	edited := s.status.DeepCopy()
	edited.Reverts = []Revert{{Object: "Namespace/shop", Count: labelRevertLimit, At: s.now}}
	raw, err := edited.Encode()
	require.NoError(t, err)
	s.raw = &raw
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	s.rollOut("1-26", "a")
	for i := 0; i < 5; i++ {
		s.now = s.now.Add(time.Minute)
		d := s.decide(s.gates())
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	if s.status.Phase != PhasePaused {
		assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev], "a wave that goes on has its label")
	}
}

func TestAWaveOfMoreMembersUndoneWholeThanTheRevertsListMovesAgainAfterOneResume(t *testing.T) {
	var ws []Workload
	for i := 0; i < 13; i++ {
		ws = append(ws, deploy(fmt.Sprintf("w%02d", i), argoApp("shop")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 20}
	s.decide(nil)
	s.rollOut("1-26", "w00")
	for i := 0; i < 5 && s.status.Wave < 2; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(s.gates())
	}
	require.Equal(t, 2, s.status.Wave)
	waveStart := *s.status.WaveStartedAt
	s.now = s.now.Add(5 * time.Second)
	for i := 1; i < 13; i++ { // replaced from git, record and stamp gone
		w := &s.snap.Workloads[i]
		delete(w.Annotations, AnnotationMove)
		delete(w.TemplateAnnotations, AnnotationRestartedAt)
		w.RolledOutRestart = waveStart
	}
	s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Len(t, d.Moves, 12, "every member undone is moved again once a person resumed")
	assert.NotEqual(t, PhasePaused, s.status.Phase, "one resume is enough")
}

// A member moved a second time after a resume, then undone whole again by
// the same self-heal, is reported again and waits for a person: a
// self-heal is never answered with one restart after another.
func TestAMemberUndoneWholeAgainAfterItsSecondMoveWaitsForAPersonAgain(t *testing.T) {
	var ws []Workload
	for i := 0; i < 3; i++ {
		ws = append(ws, deploy(fmt.Sprintf("w%02d", i), argoApp("shop")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 5}
	s.decide(nil)
	s.rollOut("1-26", "w00")
	for i := 0; i < 5 && s.status.Wave < 2; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(s.gates())
	}
	require.Equal(t, 2, s.status.Wave)
	undo := func(at time.Time) {
		for i := 1; i < 3; i++ {
			w := &s.snap.Workloads[i]
			delete(w.Annotations, AnnotationMove)
			delete(w.TemplateAnnotations, AnnotationRestartedAt)
			w.RolledOutRestart = at
		}
	}
	s.now = s.now.Add(5 * time.Second)
	undo(*s.status.WaveStartedAt)
	s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Len(t, d.Moves, 2, "moved a second time once a person resumed")
	second := s.now

	// The self-heal undoes the second moves too.
	s.now = s.now.Add(10 * time.Second)
	undo(second)
	d = s.decide(nil)
	assert.Empty(t, d.Moves, "no third restart on its own")
	assert.Equal(t, PhasePaused, s.status.Phase, "reported again, waiting for a person")
}
