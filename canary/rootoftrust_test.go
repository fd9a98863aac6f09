package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	rootA = "sha256:" + strings.Repeat("a", 64)
	rootB = "sha256:" + strings.Repeat("b", 64)
	rootC = "sha256:" + strings.Repeat("c", 64)
)

// completedWithRoots is staging's shop, completed to 1-26 an hour ago
// under the given roots.
func completedWithRoots(roots ...string) PeerCluster {
	n := peerStatus(PhaseCompleted, "1-26", t0.Add(-time.Hour))
	n.Status.Roots = roots
	return staged(map[string]PeerNamespace{"shop": n})
}

func (s *sim) setRoots(rev string, roots ...string) {
	r := s.snap.Mesh.Revisions[rev]
	r.Roots = roots
	s.snap.Mesh.Revisions[rev] = r
}

// A later ring's target whose root is not the one the ring before
// published for the same revision is blocked, naming both roots and the
// cluster; nothing moves. Once its revision distributes the fleet's root,
// the migration starts.
func TestATargetUnderAnotherRootThanTheRingBeforeIsBlocked(t *testing.T) {
	s := fleetSim(t, completedWithRoots(rootA))
	s.setRoots("1-26", rootB)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, BlockedPrecheck, d.Status.BlockedKind)
	assert.Equal(t, "precheck failed: the root of trust of revision 1-26 here (sha256:bbbbbbbbbbbbbbbb…) is not the one namespace shop in cluster staging (ring staging) published for it (sha256:aaaaaaaaaaaaaaaa…): workloads under two roots fail mTLS across clusters; plug the fleet's CA into this revision (Istio's cacerts) and its istiods will distribute it", d.Status.Reason)
	assert.Equal(t, []string{rootB}, d.Status.Roots, "its own root is published for the others to see")
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)

	s.setRoots("1-26", rootA)
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, []string{rootA}, d.Status.Roots)
	require.Len(t, d.Moves, 1)
}

// A bundle mid-rotation holds the old root and the new: one in common is
// one root of trust.
func TestATargetSharingOneRootOfABundleIsNotBlocked(t *testing.T) {
	s := fleetSim(t, completedWithRoots(rootA, rootC))
	s.setRoots("1-26", rootB, rootC)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

// Only what the rings before published is the reference: a cluster of the
// same later ring under another root blocks itself, not its neighbours.
// What another revision published says nothing of this one.
func TestOnlyTheRingsBeforeAndTheSameRevisionAreTheReference(t *testing.T) {
	s := fleetSim(t, completedWithRoots(rootA))
	other := peerStatus(PhasePending, "1-26", t0)
	other.Status.Roots = []string{rootB}
	s.snap.Clusters["prod-us"] = staged(map[string]PeerNamespace{"shop": other})
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)

	shop, blog := peerStatus(PhaseCompleted, "1-26", t0.Add(-time.Hour)), peerStatus(PhaseCompleted, "1-27", t0.Add(-time.Hour))
	shop.Status.Roots, blog.Status.Roots = []string{rootA}, []string{rootB}
	s = fleetSim(t, staged(map[string]PeerNamespace{"shop": shop, "blog": blog}))
	s.cfg.Fleet.WholeRing = true
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "the first wave of 2 waits: waiting for namespace blog in cluster staging (ring staging) to complete the move to 1-26: its migration to 1-27 is Completed", d.Status.Reason,
		"1-27's root is no reference for 1-26: the ring waits for blog, it does not block")
}

// In the first ring, its clusters are each other's reference.
func TestTheFirstRingsClustersAreEachOthersReference(t *testing.T) {
	s := fleetSim(t, PeerCluster{})
	s.cfg.Fleet = Fleet{Cluster: "eu", Rings: []Ring{{Name: "first", Clusters: []string{"eu", "us"}}}}
	us := peerStatus(PhasePending, "1-26", t0)
	us.Status.Roots = []string{rootB}
	s.snap.Clusters = map[string]PeerCluster{"us": staged(map[string]PeerNamespace{"shop": us})}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, "is not the one namespace shop in cluster us (ring first) published for it")
}

// A root that cannot be read here blocks until it can: nothing is compared
// on missing data.
func TestATargetWhoseRootCannotBeReadIsBlocked(t *testing.T) {
	s := fleetSim(t, completedWithRoots(rootA))
	s.setRoots("1-26")
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "precheck failed: the root of trust of revision 1-26 cannot be read: its injector webhook configuration istio-sidecar-injector-1-26 carries no caBundle, and a fleet compares roots before a ring starts", d.Status.Reason)
	assert.Empty(t, d.Moves)
}

// A cluster alone publishes nothing and compares nothing.
func TestAClusterAloneNeitherPublishesNorComparesRoots(t *testing.T) {
	s := fleetSim(t, PeerCluster{})
	s.cfg.Fleet = Fleet{}
	s.setRoots("1-26")
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Empty(t, d.Status.Roots)
}

func TestAStatusWithAMalformedRootIsRefused(t *testing.T) {
	_, _, err := ParseStatus(map[string]string{AnnotationStatus: `{"phase":"Pending","target":"1-26","wave":0,"totalWaves":0,"counts":{},"roots":["sha256:xyz"]}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `roots[0]`)
}

// A namespace of the ring before that moved under the same revision but
// publishes no roots (its agent predates the comparison) holds the
// comparison rather than pass it.
func TestAReferenceThatPublishesNoRootsHoldsTheComparison(t *testing.T) {
	s := fleetSim(t, completedWithRoots())
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, "precheck failed: the root of trust of revision 1-26 cannot be compared with namespace shop in cluster staging (ring staging): its status publishes no roots (its agent predates the comparison)", d.Status.Reason)
	assert.Empty(t, d.Moves)
}
