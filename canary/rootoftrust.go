package canary

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A multi-primary mesh has one root of trust: a cluster whose target
// revision signs its workloads' certificates under another root breaks
// mTLS with every other cluster. In a fleet, every status a namespace
// writes publishes the roots its target revision distributes here now (the
// caBundle istiod writes into its own injector webhook, as fingerprints):
// a status rebuilt or continued from the records, and one completed long
// ago whose revision's root was rotated since, publish what is true today.
// Peers can read only namespaces, so the status is where a root is
// published.
//
// Before its first wave, a namespace compares its target's roots with its
// references for the same revision: the namespaces of the rings before
// its own that moved under it (past their first wave), so that a stray
// cluster that was blocked before its first wave blames no one after it;
// in the first ring, which has nothing before it, the other clusters of
// that ring, whatever their phase. A reference that has opted out or
// stopped is none. A first-ring neighbour that cannot be read, or a
// reference that publishes no roots (an agent of an older version), holds
// the comparison: missing data never lets a ring start unchecked.

// maxRoots bounds the roots a status publishes: a bundle mid-rotation
// holds two or three.
const maxRoots = 16

var rootFingerprint = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// publishRoots writes in the status the roots its target revision
// distributes here; only in a fleet.
func publishRoots(m *machine) {
	st := m.st
	if m.cfg.Fleet.Cluster == "" || st.TargetRevision == "" {
		return
	}
	roots := m.snap().Mesh.Revisions[st.TargetRevision].Roots
	if len(roots) > maxRoots {
		roots = roots[:maxRoots]
	}
	st.Roots = slices.Clone(roots)
}

// rootOfTrustProblem says why the target's root of trust blocks the first
// wave, or "".
func rootOfTrustProblem(m *machine) string {
	f := m.cfg.Fleet
	r := f.ringOf(f.Cluster)
	if f.Cluster == "" || r < 0 {
		return ""
	}
	rev := m.st.TargetRevision
	own := m.snap().Mesh.Revisions[rev].Roots
	if len(own) == 0 {
		return fmt.Sprintf("the root of trust of revision %s cannot be read: its injector webhook configuration istio-sidecar-injector-%s carries no caBundle, and a fleet compares roots before a ring starts", rev, rev)
	}
	rings, firstRing := f.Rings[:r], r == 0
	if firstRing {
		rings = f.Rings[:1]
	}
	peers := m.snap().Clusters
	for _, ring := range rings {
		for _, c := range ring.Clusters {
			if c == f.Cluster {
				continue
			}
			p, ok := peers[c]
			if !firstRing && (!ok || p.Err != "") {
				continue // it holds the ring (fleetWait)
			}
			switch {
			case !ok:
				return fmt.Sprintf("the root of trust of revision %s cannot be compared with cluster %s of ring %s: no kubeconfig Secret names it", rev, c, ring.Name)
			case p.Err != "":
				return fmt.Sprintf("the root of trust of revision %s cannot be compared with cluster %s of ring %s: %s", rev, c, ring.Name, p.Err)
			}
			for _, name := range m.fleetNamespaces(p) {
				n := p.Namespaces[name]
				st := n.Status
				if !n.OptedIn || st == nil || st.TargetRevision != rev || st.unblockedPhase() == PhaseStopped || !firstRing && st.Wave == 0 {
					continue
				}
				where := fmt.Sprintf("namespace %s in cluster %s (ring %s)", name, c, ring.Name)
				if len(st.Roots) == 0 {
					return fmt.Sprintf("the root of trust of revision %s cannot be compared with %s: its status publishes no roots (its agent predates the comparison)", rev, where)
				}
				if !shareARoot(own, st.Roots) {
					return fmt.Sprintf("the root of trust of revision %s here (%s) is not the one %s published for it (%s): workloads under two roots fail mTLS across clusters; plug the fleet's CA into this revision (Istio's cacerts) and its istiods will distribute it",
						rev, describeRoots(own), where, describeRoots(st.Roots))
				}
			}
		}
	}
	return ""
}

func shareARoot(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// describeRoots names roots by the start of their fingerprints.
func describeRoots(roots []string) string {
	out := make([]string, len(roots))
	for i, r := range roots {
		if len(r) > len("sha256:")+16 {
			r = r[:len("sha256:")+16] + "…"
		}
		out[i] = r
	}
	return strings.Join(out, ", ")
}
