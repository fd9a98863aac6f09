package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stagingSim is namespace shop (a, b, c) of cluster staging, alone in the
// first ring of fleetSim's fleet, its 1-26 under rootA: it compares with
// no one and publishes its root for the later ring.
func stagingSim(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c")
	s.cfg.Fleet = Fleet{Cluster: "staging", Rings: []Ring{
		{Name: "staging", Clusters: []string{"staging"}, Soak: 10 * time.Minute},
		{Name: "prod", Clusters: []string{"prod-eu", "prod-us"}},
	}}
	s.setRoots("1-26", rootA)
	return s
}

// A status rebuilt from the records (lost mid-migration) publishes the
// roots of its target revision, and a later ring's cluster under another
// root is blocked by it.
func TestAStatusRebuiltFromTheRecordsStillPublishesItsRoots(t *testing.T) {
	st := stagingSim(t)
	st.decide(nil)
	require.Equal(t, []string{rootA}, st.status.Roots)
	st.rollOut("1-26", "a")
	st.now = st.now.Add(time.Minute)
	st.decide(st.gates())
	st.now = st.now.Add(time.Minute)
	d := st.decide(nil)
	require.Equal(t, 2, d.Status.Wave)

	st.status = nil // lost
	st.decide(nil)
	require.Contains(t, st.reasons(), "StatusAdopted")
	st.playUntil(PhaseCompleted)
	assert.Equal(t, []string{rootA}, st.status.Roots, "the adopted status no longer publishes the root of trust")

	// prod-eu, under another root, reads staging's completed status.
	peer := peerStatus(PhaseCompleted, "1-26", *st.status.CompletedAt) // labelled istio.io/rev=1-26, as staging's shop is
	peer.Status = st.status
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": peer}))
	s.now = st.now.Add(time.Hour)
	s.setRoots("1-26", rootB)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase, "a cluster under another root started the ring: %s", d.Status.Reason)
	assert.Equal(t, 0, len(d.Moves))
}

// A migration continued from its records (the target removed and set
// again) publishes its roots.
func TestAMigrationContinuedFromItsRecordsStillPublishesItsRoots(t *testing.T) {
	st := stagingSim(t)
	st.decide(nil)
	st.rollOut("1-26", "a")
	st.now = st.now.Add(time.Minute)
	st.decide(st.gates())
	require.Equal(t, WavePassed, st.status.WaveState)
	delete(st.snap.Namespace.Annotations, AnnotationTargetRevision)
	st.decide(nil)
	require.Equal(t, PhaseStopped, st.status.Phase)
	st.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	st.now = st.now.Add(time.Minute)
	st.decide(nil)
	require.Contains(t, st.reasons(), "MigrationResumed")
	st.playUntil(PhaseCompleted)
	assert.Equal(t, []string{rootA}, st.status.Roots, "the continued status no longer publishes the root of trust")
}

// A first-ring neighbour's namespace that opted out (Stopped) is no
// reference, whatever roots its old status carries.
func TestAFirstRingNamespaceThatOptedOutIsNoReference(t *testing.T) {
	s := fleetSim(t, PeerCluster{})
	s.cfg.Fleet = Fleet{Cluster: "eu", Rings: []Ring{{Name: "first", Clusters: []string{"eu", "us"}}}}
	us := PeerNamespace{OptedIn: false, Status: &Status{
		Phase: PhaseStopped, Target: "1-26", TargetRevision: "1-26", Roots: []string{rootB},
		Reason: "meshwave.io/target-revision was removed before the first wave; nothing was changed"}}
	s.snap.Clusters = map[string]PeerCluster{"us": staged(map[string]PeerNamespace{"shop": us})}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

// A cluster of a middle ring under a stray root, blocked before its first
// wave, is no reference for the last ring: that ring waits for it (the
// fleet's wait), and is not told to plug another CA into its own
// revision.
func TestALaterRingIsNotBlamedForAStrayClusterOfTheRingBefore(t *testing.T) {
	s := fleetSim(t, completedWithRoots(rootA))
	s.cfg.Fleet = Fleet{Cluster: "last", Rings: []Ring{
		{Name: "staging", Clusters: []string{"staging"}, Soak: 10 * time.Minute},
		{Name: "prod", Clusters: []string{"prod-us"}},
		{Name: "last", Clusters: []string{"last"}},
	}}
	stray := PeerNamespace{OptedIn: true, Status: &Status{
		Phase: PhaseBlocked, BlockedPhase: PhasePending, BlockedKind: BlockedPrecheck, Target: "1-26", TargetRevision: "1-26", Roots: []string{rootB},
		Reason: "precheck failed: the root of trust of revision 1-26 here (sha256:bbbbbbbbbbbbbbbb…) is not the one namespace shop in cluster staging (ring staging) published for it (sha256:aaaaaaaaaaaaaaaa…)"}}
	s.snap.Clusters["prod-us"] = staged(map[string]PeerNamespace{"shop": stray})
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.NotEqual(t, PhaseBlocked, d.Status.Phase, d.Status.Reason)
	assert.Contains(t, d.Status.Reason, "waiting for namespace shop in cluster prod-us (ring prod)")
}

// A completed namespace's published roots follow its revision's bundle:
// after the fleet's root was rotated, the later rings under the new root
// start.
func TestACompletedNamespaceRepublishesItsRootsAfterARotation(t *testing.T) {
	st := stagingSim(t)
	st.playUntil(PhaseCompleted)
	require.Equal(t, []string{rootA}, st.status.Roots)
	st.setRoots("1-26", rootA, rootB) // mid-rotation
	st.now = st.now.Add(time.Hour)
	st.decide(nil)
	st.setRoots("1-26", rootB) // rotated
	st.now = st.now.Add(time.Hour)
	st.decide(nil)
	assert.Equal(t, []string{rootB}, st.status.Roots, "the completed status publishes a root its revision no longer distributes")

	// prod-eu, whose 1-26 distributes the fleet's rotated root, is blocked
	// by the stale one.
	peer := peerStatus(PhaseCompleted, "1-26", *st.status.CompletedAt) // labelled istio.io/rev=1-26, as staging's shop is
	peer.Status = st.status
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": peer}))
	s.now = st.now
	s.setRoots("1-26", rootB)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

// In the first ring, a neighbour that cannot be read holds the root
// comparison: a cluster does not start under a root nobody checked.
func TestAFirstRingNeighbourThatCannotBeReadHoldsTheRootComparison(t *testing.T) {
	s := fleetSim(t, PeerCluster{})
	s.cfg.Fleet = Fleet{Cluster: "eu", Rings: []Ring{{Name: "first", Clusters: []string{"eu", "us"}}}}
	s.snap.Clusters = map[string]PeerCluster{"us": {Err: "dial tcp: connection refused"}}
	s.setRoots("1-26", rootB)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.NotEqual(t, PhaseMigrating, d.Status.Phase, "eu started under a root compared with nothing")
	assert.Equal(t, 0, len(d.Moves))
}
