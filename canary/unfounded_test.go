package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forgedCompleted is a Completed status for shop's move to 1-26, as a
// person would write it over a namespace that never moved.
const forgedCompleted = `{"phase":"Completed","target":"1-26","targetRevision":"1-26","sourceLabel":"1-25","sourceRevision":"1-25","wave":2,"totalWaves":2,"counts":{"total":2,"moved":2},"startedAt":"2025-12-31T00:00:00Z","completedAt":"2026-01-01T00:00:00Z"}`

// A Completed status over a namespace whose label, move records and pods
// show no move is not believed: a StatusRejected Event names what
// contradicts it, and the migration runs from where the workloads are,
// moving each once.
func TestACompletedStatusNothingInTheNamespaceShowsIsRejected(t *testing.T) {
	s := batchedSim(t, "a", "b")
	raw := forgedCompleted
	s.raw, s.optedIn = &raw, true
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, "1-25", d.Status.SourceRevision)
	assert.Equal(t, "1-26", d.Label)
	var rejected []string
	for _, e := range s.events {
		if e.Reason == "StatusRejected" {
			rejected = append(rejected, e.Message)
		}
	}
	assert.Equal(t, []string{"the status says migration 1-26@2025-12-31T00:00:00Z completed 2 waves, but the namespace is not labelled istio.io/rev=1-26, no workload carries a move record of it and no pod runs 1-26, while deployment a, deployment b still run elsewhere; the migration starts over from where the workloads run"}, rejected)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

// What founds a completion: the label on the target, a move record of the
// migration, a pod on the target, or nothing left elsewhere but what the
// migration left out.
func TestACompletedStatusIsBelievedWhenAnythingShowsTheMove(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s *sim)
	}{
		{"the label on the target", func(s *sim) { s.snap.Namespace.Labels[LabelRev] = "1-26" }},
		{"a pod on the target", func(s *sim) { s.rollOut("1-26", "a") }},
		{"nothing but a gateway elsewhere", func(s *sim) {
			s.snap.Workloads = []Workload{deploy("gw", label("istio", "ingressgateway"))}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := batchedSim(t, "a", "b")
			raw := forgedCompleted
			s.raw, s.optedIn = &raw, true
			tc.edit(s)
			s.now = s.now.Add(time.Minute)
			s.decide(nil)
			assert.NotContains(t, s.reasons(), "StatusRejected")
			assert.Empty(t, s.patches)
		})
	}
}

// completedThenLabelHeld plays shop (a, b) to Completed on 1-26, then lets
// a GitOps tool switch the namespace's label back to 1-25 three times:
// meshwave puts it back twice, then leaves it (labelHeld) rather than fight.
func completedThenLabelHeld(t *testing.T) *sim {
	s := batchedSim(t, "a", "b")
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	s.playUntil(PhaseCompleted)
	for n := 1; n <= 3; n++ {
		s.now = s.now.Add(time.Minute)
		s.snap.Namespace.Labels[LabelRev] = "1-25" // self-heal
		s.decide(nil)
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
	require.True(t, s.status.labelHeld(), "meshwave gave the label up: %+v", s.status.Reverts)
	require.Equal(t, "1-25", s.snap.Namespace.Labels[LabelRev])
	return s
}

// A completed migration whose label meshwave gave up to a GitOps tool
// (labelHeld) and whose Deployments the same tool then replaced whole
// (the move records gone, the pods on the label's revision) stands: the
// status records the label given up. Rejected, a fresh migration would
// switch the label again and restart every workload, the fight the
// revert limit exists to stop.
func TestACompletionWhoseLabelWasGivenUpStands(t *testing.T) {
	s := completedThenLabelHeld(t)
	patched := map[string]int{"a": s.patches["a"], "b": s.patches["b"]}

	// Argo CD replaces the Deployments from git: no move record, pods on
	// the label's revision.
	s.snap.Workloads = []Workload{deploy("a"), deploy("b")}
	s.events = nil
	for i := 0; i < 6; i++ {
		s.now = s.now.Add(time.Minute)
		for _, w := range s.snap.Workloads {
			s.rollOutRecord(w)
		}
		s.decide(s.gates())
	}
	assert.NotContains(t, s.reasons(), "StatusRejected", "a completion the status shows was given up to GitOps is rejected")
	assert.Equal(t, "1-25", s.snap.Namespace.Labels[LabelRev], "the given-up label is switched again")
	assert.Equal(t, patched, map[string]int{"a": s.patches["a"], "b": s.patches["b"]}, "workloads restarted again")
}

// playForged plays a forged status over shop (a, b on 1-25, label
// 1-25) and reports what the agent made of it.
func playForged(t *testing.T, raw string, edit func(s *sim)) *sim {
	s := batchedSim(t, "a", "b")
	if edit != nil {
		edit(s)
	}
	s.raw, s.optedIn = &raw, true
	for i := 0; i < 3; i++ {
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	return s
}

// A Completed status of no wave (the shape of a completion with nothing to
// move) over pods that all run the source is rejected: believed, the
// agent would switch the label over pods that never moved, after which
// the label would found it for good and a fleet's later rings would read
// the namespace as done.
func TestACompletedStatusOfNoWaveOverPodsThatNeverMovedIsRejected(t *testing.T) {
	forged := `{"phase":"Completed","target":"1-26","targetRevision":"1-26","wave":0,"totalWaves":0,"counts":{"total":2},"completedAt":"2026-01-01T00:00:00Z"}`
	st, _, err := ParseStatus(map[string]string{AnnotationStatus: forged})
	require.NoError(t, err, "the forgery reads back as a valid status")
	require.Equal(t, PhaseCompleted, st.Phase)

	s := playForged(t, forged, nil)
	assert.Contains(t, s.reasons(), "StatusRejected", "a Completed status over pods that all run 1-25")
	assert.NotEqual(t, PhaseCompleted, s.status.Phase, "stands Completed over workloads that never moved (label now %s)", s.snap.Namespace.Labels[LabelRev])
	assert.Equal(t, map[string]int{"a": 1}, s.patches, "the migration runs: its canary moved")
}

// A Completed move to ambient that says it enrolled the namespace is
// founded by the namespace's istio.io/dataplane-mode=ambient, not by its
// own word: over a namespace never enrolled, every pod a 1-25 sidecar, it
// is rejected and the workloads move.
func TestACompletedEnrolmentTheNamespaceDoesNotShowIsRejected(t *testing.T) {
	forged := `{"phase":"Completed","target":"1-26","targetRevision":"1-26","mode":"ambient","namespaceEnrolled":true,"sourceLabel":"1-25","sourceRevision":"1-25","wave":2,"totalWaves":2,"counts":{"total":2,"moved":2},"startedAt":"2025-12-31T00:00:00Z","completedAt":"2026-01-01T00:00:00Z"}`
	st, _, err := ParseStatus(map[string]string{AnnotationStatus: forged})
	require.NoError(t, err, "the forgery reads back as a valid status")
	require.True(t, st.NamespaceEnrolled)

	s := playForged(t, forged, func(s *sim) { s.snap.Namespace.Annotations[AnnotationTargetMode] = "ambient" })
	assert.Contains(t, s.reasons(), "StatusRejected", "an enrolled completion over a namespace not enrolled, its pods all 1-25 sidecars")
	assert.Empty(t, s.snap.Namespace.Labels[LabelDataplaneMode])
	assert.NotEqual(t, PhaseCompleted, s.status.Phase, "stands Completed over workloads that never moved")
}

// What a migration left out is the plan's to say from the workloads
// (meshwave.io/skip, paused, partition), not the status under test's: a
// Completed status that lists every workload as skipped, none of them
// carrying meshwave.io/skip, is rejected.
func TestACompletedStatusThatSkipsWorkloadsThePlanWouldMoveIsRejected(t *testing.T) {
	forged := `{"phase":"Completed","target":"1-26","targetRevision":"1-26","sourceLabel":"1-25","sourceRevision":"1-25","wave":2,"totalWaves":2,"counts":{"total":2,"skipped":2},"skipped":[{"workload":"a","reason":"x"},{"workload":"b","reason":"x"}],"startedAt":"2025-12-31T00:00:00Z","completedAt":"2026-01-01T00:00:00Z"}`
	_, _, err := ParseStatus(map[string]string{AnnotationStatus: forged})
	require.NoError(t, err, "the forgery reads back as a valid status")

	s := playForged(t, forged, nil)
	assert.Contains(t, s.reasons(), "StatusRejected", "no workload is skipped: neither carries meshwave.io/skip")
	assert.NotEqual(t, PhaseCompleted, s.status.Phase, "stands Completed over workloads that never moved (label now %s)", s.snap.Namespace.Labels[LabelRev])
	assert.Equal(t, map[string]int{"a": 1}, s.patches, "the migration runs: its canary moved")
}

// The status's own record of a label given up to GitOps (reverts of the
// namespace, seen labelRevertLimit times) is the status's word, which a
// person writes as easily as the rest: a Completed status that adds it
// over a namespace whose label, records and pods show no move is rejected
// like any other.
func TestACompletedStatusThatSaysItsLabelWasGivenUpIsRejectedWhenNothingShowsTheMove(t *testing.T) {
	forged := `{"phase":"Completed","target":"1-26","targetRevision":"1-26","sourceLabel":"1-25","sourceRevision":"1-25","wave":2,"totalWaves":2,"counts":{"total":2,"moved":2},"startedAt":"2025-12-31T00:00:00Z","completedAt":"2026-01-01T00:00:00Z","reverts":[{"object":"Namespace/shop","count":3,"at":"2026-01-01T00:00:00Z"}]}`
	st, _, err := ParseStatus(map[string]string{AnnotationStatus: forged})
	require.NoError(t, err, "the forgery reads back as a valid status")
	require.True(t, st.labelHeld())

	s := playForged(t, forged, nil)
	assert.Contains(t, s.reasons(), "StatusRejected", "a Completed status over pods that all run 1-25, label 1-25, no move record")
	assert.NotEqual(t, PhaseCompleted, s.status.Phase, "stands Completed over workloads that never moved")
}

// A completion of no wave (every injected workload already ran the
// target) leaves no move record: once a person has switched the label to
// another revision and restarted the workloads there, nothing in the
// namespace shows it. The namespace is moved back to its target in gated
// waves, the canary first, rather than by a label put back under pods
// that would take it at their next restart, unjudged.
func TestACompletionOfNoWaveNothingShowsAnyMoreMovesBackInWaves(t *testing.T) {
	s := batchedSim(t, "a", "b")
	s.install("1-27")
	s.rollOut("1-26", "a", "b")
	s.playUntil(PhaseCompleted)
	require.Equal(t, 0, s.status.Wave)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	// A person moves the namespace on by hand.
	s.snap.Namespace.Labels[LabelRev] = "1-27"
	s.rollOut("1-27", "a", "b")
	s.events = nil
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	assert.Equal(t, []string{
		"StatusRejected: the status says every injected workload already ran 1-26, but the namespace is not labelled istio.io/rev=1-26, no workload carries a move record of it and no pod runs 1-26, while deployment a, deployment b still run elsewhere; the migration starts over from where the workloads run",
		"MigrationStarted: moving 2 workloads from 1-27 to 1-26 in 2 waves",
		"WaveStarted: wave 1/2 (canary) started: a",
		"Restarted: moving to 1-26 in wave 1",
	}, s.reasonsWithMessages())
	assert.Equal(t, map[string]int{"a": 1}, s.patches, "the canary alone")
}
