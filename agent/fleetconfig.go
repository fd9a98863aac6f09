package agent

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshwave/meshwave/canary"
)

// FleetConfig places this cluster in a fleet that moves in rings: the same
// rings in every cluster's configuration, and each cluster's own name set
// per install (docs/fleet.md).
type FleetConfig struct {
	// Cluster is this cluster's name: in the rings, in the kubeconfig
	// Secrets the other clusters read it through, and on the metrics.
	Cluster string `json:"cluster"`
	// Rings are the fleet's order; empty: this cluster moves on its own.
	Rings []RingConfig `json:"rings"`
	// Await is what a namespace of a later ring waits for in the ring
	// before: "namespace", the namespace of its name, or "ring", every
	// namespace that opted in there.
	Await string `json:"await"`
	// IstioRemoteSecrets also reads Istio's own remote secrets (label
	// istio/multiCluster=true): their accounts can read far more than
	// namespaces, which meshwave's own never can.
	IstioRemoteSecrets bool `json:"istioRemoteSecrets"`
	// SoakAlerts makes each ring's soak one with no alert: an alert that
	// fires, in the fleet's Prometheus, for a namespace of the ring before
	// after it completed starts its soak again (fleetalerts.go).
	SoakAlerts bool `json:"soakAlerts"`
}

// RingConfig is one ring: its clusters, and how long they stay completed
// before the next ring starts.
type RingConfig struct {
	Name     string   `json:"name"`
	Clusters []string `json:"clusters"`
	Soak     Duration `json:"soak"`
}

// validate checks the fleet: names are DNS-1123 labels, each cluster in
// one ring, this cluster among them.
func (f FleetConfig) validate() []error {
	var errs []error
	bad := func(key string, value any, expected string) {
		errs = append(errs, fmt.Errorf("config key %s: %v is not %s", key, value, expected))
	}
	if f.Cluster != "" && len(validation.IsDNS1123Label(f.Cluster)) > 0 {
		bad("fleet.cluster", strconv.Quote(f.Cluster), "a cluster name (a DNS-1123 label)")
	}
	if f.Await != "namespace" && f.Await != "ring" {
		bad("fleet.await", strconv.Quote(f.Await), `"namespace" or "ring"`)
	}
	if len(f.Rings) == 0 {
		return errs
	}
	if f.Cluster == "" {
		bad("fleet.cluster", `""`, "set when fleet.rings are: each cluster's own name, set per install")
	}
	rings, clusters := map[string]bool{}, map[string]string{}
	for i, r := range f.Rings {
		key := fmt.Sprintf("fleet.rings[%d]", i)
		if len(validation.IsDNS1123Label(r.Name)) > 0 || rings[r.Name] {
			bad(key+".name", strconv.Quote(r.Name), "a ring name (a DNS-1123 label) no other ring has")
		}
		rings[r.Name] = true
		if len(r.Clusters) == 0 {
			bad(key+".clusters", "[]", "a list of one cluster or more")
		}
		for j, c := range r.Clusters {
			switch {
			case len(validation.IsDNS1123Label(c)) > 0:
				bad(fmt.Sprintf("%s.clusters[%d]", key, j), strconv.Quote(c), "a cluster name (a DNS-1123 label)")
			case clusters[c] != "":
				bad(fmt.Sprintf("%s.clusters[%d]", key, j), strconv.Quote(c), "in one ring only: it is in ring "+clusters[c])
			default:
				clusters[c] = r.Name
			}
		}
		if r.Soak < 0 {
			bad(key+".soak", r.Soak.D(), "a duration of zero or more")
		}
	}
	if f.Cluster != "" && clusters[f.Cluster] == "" {
		bad("fleet.cluster", strconv.Quote(f.Cluster), "a cluster of fleet.rings")
	}
	return errs
}

// decisions is the fleet as the phase machine reads it.
func (f FleetConfig) decisions() canary.Fleet {
	out := canary.Fleet{Cluster: f.Cluster, WholeRing: f.Await == "ring", SoakAlerts: f.SoakAlerts}
	for _, r := range f.Rings {
		out.Rings = append(out.Rings, canary.Ring{Name: r.Name, Clusters: r.Clusters, Soak: r.Soak.D()})
	}
	return out
}

// Others are the clusters of the rings other than this one.
func (f FleetConfig) Others() []string {
	var out []string
	for _, r := range f.Rings {
		for _, c := range r.Clusters {
			if c != f.Cluster {
				out = append(out, c)
			}
		}
	}
	return out
}
