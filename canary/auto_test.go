package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// autoSim is namespace shop (a, b, c) with the target auto, the default
// tag on 1-26 and 1-27 installed: canary 1, batches of 2.
func autoSim(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c")
	s.install("1-27")
	s.snap.Mesh.Auto, s.snap.Mesh.AutoFrom = "1-26", "the tag default"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = TargetAuto
	return s
}

// The namespace is labelled with the revision auto resolved to, never
// with "auto" (no webhook selects it) nor with the default tag (the tag
// moving would inject the next pods before their wave).
func TestAnAutoTargetLabelsTheNamespaceWithTheRevisionItResolvedTo(t *testing.T) {
	s := autoSim(t)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "1-26", d.Label)
	assert.Equal(t, TargetAuto, d.Status.Target)
	assert.Equal(t, "1-26", d.Status.TargetRevision)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
}

// The mesh's default moving after a completed migration starts the next
// one, from the revision the last one went to, with an Event that says
// why; every workload moves once more, and the label follows.
func TestMovingTheDefaultStartsTheNextMigrationOfACompletedAutoTarget(t *testing.T) {
	s := autoSim(t)
	s.playUntil(PhaseCompleted)
	for _, w := range []string{"a", "b", "c"} {
		require.Equal(t, 1, s.patches[w])
	}
	s.now = s.now.Add(time.Hour)
	s.events = nil
	s.snap.Mesh.Auto = "1-27"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "1-27", d.Status.TargetRevision)
	assert.Equal(t, "1-26", d.Status.SourceRevision)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, "1-27", d.Label)
	var followed []string
	for _, e := range s.events {
		if e.Reason == "TargetFollowed" {
			followed = append(followed, e.Message)
		}
	}
	assert.Equal(t, []string{"auto now resolves to 1-27 (the tag default); the migration to 1-26 completed, so a new one to 1-27 starts"}, followed)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, "1-27", s.status.TargetRevision)
	for _, w := range []string{"a", "b", "c"} {
		assert.Equal(t, 2, s.patches[w], "%s moved once per migration", w)
	}
}

// A migration rolled back keeps its revision whatever the default names
// then: the failure waits for a person, as one to a named tag does.
func TestMovingTheDefaultStartsNothingAfterARollback(t *testing.T) {
	s := autoSim(t)
	s.decide(nil)
	s.now = s.now.Add(time.Minute)
	s.decide(failRollout("a", "a never came up"))
	s.playUntil(PhaseRolledBack)
	patches := s.patches["a"]
	s.snap.Mesh.Auto = "1-27"
	var played []Decision
	for range 4 {
		s.now = s.now.Add(2 * time.Minute)
		played = append(played, s.decide(s.gates()))
	}
	assert.Equal(t, PhaseRolledBack, s.status.Phase, s.status.Reason)
	assert.Equal(t, "1-26", s.status.TargetRevision)
	assert.Empty(t, forwardMovesTo(played, "1-27"), "a rolled-back migration moved on unasked: %v", s.reasons())
	assert.Equal(t, patches, s.patches["a"])
}

// auto with neither a default tag nor Sail's active revision blocks with
// the key, the value and what would resolve it, and writes no label.
func TestAnAutoTargetThatResolvesToNothingBlocksWithTheReason(t *testing.T) {
	s := autoSim(t)
	s.snap.Mesh.Auto = ""
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, `invalid input: meshwave.io/target-revision on namespace shop: "auto" is not a target that names a revision: auto follows a Sail Operator Istio resource's status.activeRevisionName, else the tag default (MutatingWebhookConfiguration istio-revision-tag-default), and neither exists`, d.Status.Reason)
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Moves)
}
