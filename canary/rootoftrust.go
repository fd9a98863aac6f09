package canary

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A multi-primary mesh has one root of trust: a cluster whose target
// revision signs its workloads' certificates under another root breaks
// mTLS with every other cluster. Before a ring starts, each namespace of
// a fleet publishes in its status the roots its target revision
// distributes (the caBundle istiod writes into its own injector webhook,
// as fingerprints), and compares them with what the clusters before it
// published for the same revision: the rings before its own, or, in the
// first ring, the other clusters of that ring. Peers can read only
// namespaces, so the status is where a root is published.

// maxRoots bounds the roots a status publishes: a bundle mid-rotation
// holds two or three.
const maxRoots = 8

var rootFingerprint = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// publishRoots records in the status, before the first wave, the roots
// this cluster's target revision distributes; only in a fleet.
func publishRoots(m *machine) {
	if m.cfg.Fleet.Cluster == "" || m.st.Wave > 0 {
		return
	}
	roots := m.snap().Mesh.Revisions[m.st.TargetRevision].Roots
	if len(roots) > maxRoots {
		roots = roots[:maxRoots]
	}
	m.st.Roots = slices.Clone(roots)
}

// rootOfTrustProblem says why the target's root of trust blocks the first
// wave, or "": it cannot be read here, or it shares no root with what a
// cluster before this one published for the same revision.
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
	rings := f.Rings[:r]
	if r == 0 {
		rings = f.Rings[:1]
	}
	peers := m.snap().Clusters
	for _, ring := range rings {
		for _, c := range ring.Clusters {
			p, ok := peers[c]
			if c == f.Cluster || !ok || p.Err != "" {
				// One that cannot be read holds the ring (fleetWait).
				continue
			}
			for _, name := range m.fleetNamespaces(p) {
				st := p.Namespaces[name].Status
				if st == nil || st.TargetRevision != rev || len(st.Roots) == 0 {
					continue
				}
				if !shareARoot(own, st.Roots) {
					return fmt.Sprintf("the root of trust of revision %s here (%s) is not the one namespace %s in cluster %s (ring %s) published for it (%s): workloads under two roots fail mTLS across clusters; plug the fleet's CA into this revision (Istio's cacerts) and its istiods will distribute it",
						rev, describeRoots(own), name, c, ring.Name, describeRoots(st.Roots))
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
