package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A namespace of auto that completed its move into ambient, enrolled and
// without istio.io/rev, stays Completed when the tag moves: its pods run
// no sidecar to move, and the new revision reaches them through ztunnel
// and the waypoint.
func TestAnEnrolledAmbientAutoNamespaceIsNotBlockedWhenTheTagMoves(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.install("1-27")
	s.snap.Mesh.Auto, s.snap.Mesh.AutoFrom = "1-26", "the tag default"
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = TargetAuto
	s.playUntil(PhaseCompleted)
	require.True(t, s.status.NamespaceEnrolled)
	require.NotContains(t, s.snap.Namespace.Labels, LabelRev)

	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Auto = "1-27"
	for range 3 {
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	assert.NotEqual(t, PhaseBlocked, s.status.Phase, s.status.Reason)
	assert.NotContains(t, s.status.Reason, "namespace has no istio.io/rev label")
}

// A Completed status of auto restored over the migration the target
// followed since (whose canary failed and was rolled back) is read as
// stale: the records of that migration are gone by, its rollback
// included, and the canary is not sent forward again.
func TestAStaleCompletedAutoStatusDoesNotSendARolledBackCanaryForwardAgain(t *testing.T) {
	for _, finished := range []bool{false, true} {
		name := "rollback in flight"
		if finished {
			name = "rolled back"
		}
		t.Run(name, func(t *testing.T) {
			s := autoSim(t)
			s.playUntil(PhaseCompleted)
			completed, err := s.status.Encode()
			require.NoError(t, err)
			s.now = s.now.Add(time.Hour)
			s.snap.Mesh.Auto = "1-27"
			s.decide(nil)
			s.now = s.now.Add(time.Minute)
			s.decide(failRollout("a", "a never came up"))
			require.Equal(t, PhaseRollingBack, s.status.Phase)
			if finished {
				s.playUntil(PhaseRolledBack)
			}
			patches := s.patches["a"] // to 1-26, to 1-27, back to 1-26

			s.raw, s.status = &completed, nil
			var played []Decision
			for range 4 {
				s.now = s.now.Add(time.Minute)
				for _, w := range s.snap.Workloads {
					s.rollOutRecord(w)
				}
				played = append(played, s.decide(s.gates()))
			}
			assert.Empty(t, forwardMovesTo(played, "1-27"), "the rolled-back migration was started again from a stale status: %v", s.reasons())
			assert.Equal(t, patches, s.patches["a"], "a, sent back, was moved forward again")
		})
	}
}

// With the target auto, the advice to a namespace a GitOps tool applies
// is to hand the label over, never to pin in git the revision auto names
// today: the next move of the tag would be switched back by every sync.
func TestTheGitOpsAdviceForAnAutoTargetDoesNotPinTodaysRevision(t *testing.T) {
	s := autoSim(t)
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	s.snap.Mesh.Auto = "1-27"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	var ns string
	for _, w := range d.Status.Warnings {
		if strings.HasPrefix(w, "namespace shop is applied by") {
			ns = w
		}
	}
	require.NotEmpty(t, ns)
	assert.NotContains(t, ns, "set istio.io/rev=1-27 in git", ns)
}

// A completed auto namespace that a person paused waits, paused before
// its first wave, when the tag moves: nothing restarts, the label stays,
// no slot is held; resumed, it completes the move.
func TestAPausedCompletedAutoNamespaceDoesNotFollowUntilResumed(t *testing.T) {
	s := autoSim(t)
	s.playUntil(PhaseCompleted)
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Auto = "1-27"
	var played []Decision
	for range 3 {
		played = append(played, s.decide(s.gates()))
		s.now = s.now.Add(time.Minute)
	}
	assert.Equal(t, PhasePaused, s.status.Phase, s.status.Reason)
	assert.Equal(t, 0, s.status.Wave)
	assert.False(t, s.status.HoldsSlot())
	assert.Empty(t, forwardMovesTo(played, "1-27"))
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, "1-27", s.status.TargetRevision)
	assert.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev])
}

// A rollback asked in the same edit as the tag moving back, while the
// followed migration is mid-way, rolls that migration back on the
// revision it went to, and the RolledBack status keeps its revision when
// the tag moves again.
func TestARollbackAskedAsTheTagMovesBackUndoesTheFollowedMigration(t *testing.T) {
	s := autoSim(t)
	s.playUntil(PhaseCompleted)
	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Auto = "1-27"
	s.decide(nil)
	s.rollOut("1-27", "a")
	s.now = s.now.Add(time.Minute)
	s.decide(s.gates())
	require.Equal(t, 1, s.status.Wave)

	s.snap.Mesh.Auto = "1-26"
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, "1-27", d.Status.TargetRevision)
	assert.NotContains(t, s.reasons(), "TargetChanged")
	s.playUntil(PhaseRolledBack)
	for _, w := range s.snap.Workloads {
		assert.Equal(t, "1-26", w.Pods[0].Revision, w.Name)
	}
	s.snap.Mesh.Auto = "1-27"
	s.now = s.now.Add(time.Hour)
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, PhaseRolledBack, s.status.Phase)
}

// After the tag moved, meshwave holders says a completed auto namespace
// moves each workload again in its next migration's waves, and its peers
// read it as Pending, holding no slot.
func TestHoldersAndPeersOfACompletedAutoNamespaceAfterTheTagMoved(t *testing.T) {
	s := autoSim(t)
	s.playUntil(PhaseCompleted)
	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Auto = "1-27"
	hs := holdersIn("1-26", s.snap, s.status)
	require.Len(t, hs.Holders, 3)
	for _, h := range hs.Holders {
		assert.Equal(t, HolderWillMove, h.State, "%s: %s", h.Name, h.Reason)
		assert.Contains(t, h.Reason, "to 1-27")
	}
	p := peerOf(Input{Snapshot: s.snap, Status: s.status})
	assert.Equal(t, PhasePending, p.Phase)
	assert.False(t, p.HoldsSlot)
}

// A namespace that waits for the ring before its own (after the tag
// moved, every completed auto namespace of a later ring does) takes no
// turn from a namespace of its cluster that may start now.
func TestANamespaceWaitingForItsRingAfterTheTagMovedDoesNotHoldUpAdmission(t *testing.T) {
	staging := staged(map[string]PeerNamespace{"blog": peerStatus(PhaseCompleted, "1-26", t0.Add(-time.Hour))})
	blog := fleetSim(t, staging)
	blog.snap.Namespace.Name = "blog"
	blog.install("1-27")
	blog.setRoots("1-27", rootA)
	blog.snap.Mesh.Auto, blog.snap.Mesh.AutoFrom = "1-26", "the tag default"
	blog.snap.Namespace.Annotations[AnnotationTargetRevision] = TargetAuto
	blog.playUntil(PhaseCompleted)
	blog.snap.Mesh.Auto = "1-27"
	blog.now = blog.now.Add(time.Hour)
	d := blog.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhasePending, d.Status.Phase)
	require.Contains(t, d.Status.Reason, "waiting for namespace blog in cluster staging (ring staging) to complete the move to 1-27")
	peer := peerOf(Input{Snapshot: blog.snap, Status: blog.status})

	s := fleetSim(t, completedWithRoots(rootA))
	s.snap.Peers = []Peer{peer}
	s.now = blog.now
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}
