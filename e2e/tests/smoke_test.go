package tests

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestLocalWorldSmoke proves the world behaves like a cluster with two Istio
// revisions: injection follows the namespace label, istiod's syncz lists
// exactly the proxies of its revision, a restart moves a workload, and
// Prometheus sees request rates for every workload.
func TestLocalWorldSmoke(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "smoke"
	apps := []string{"productpage", "reviews", "ratings"}
	token := f.IstioCAToken("syncz-reader")

	given := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
	for _, app := range apps {
		given.Deployment(ns, app)
	}
	given.RolledOut(ns).
		Then().
		PodsOnRevision(ns, "productpage", "1-25").
		PodsOnRevision(ns, "reviews", "1-25").
		PodsOnRevision(ns, "ratings", "1-25").
		SynczLists("1-25", token, f.ProxyIDs(ns, apps...)).
		SynczLists("1-26", token, nil).
		Do(func(f *fixture.Fixture) {
			// A sidecar never subscribes to ECDS here: istiod leaves the
			// type out of syncz, as the real one does.
			for id, p := range f.Syncz("1-25", token) {
				_, ok := p.Status[mesh.TypeECDS]
				require.False(t, ok, "ECDS of %s", id)
			}
		})

	oldReviews := f.ProxyIDs(ns, "reviews")
	f.When().
		LabelNamespace(ns, mesh.LabelRev, "1-26").
		RestartDeployment(ns, "reviews").
		WaitForRollout(ns, "reviews").
		Then().
		PodsOnRevision(ns, "reviews", "1-26").
		PodsOnRevision(ns, "productpage", "1-25").
		PodsOnRevision(ns, "ratings", "1-25").
		SynczLists("1-26", token, f.ProxyIDs(ns, "reviews")).
		SynczLists("1-25", token, f.ProxyIDs(ns, "productpage", "ratings")).
		Do(func(f *fixture.Fixture) {
			require.NotEqual(t, oldReviews, f.ProxyIDs(ns, "reviews"), "reviews has new pods")
			// The HTTP fallback agrees with gRPC: per type each proxy
			// subscribed to, the last nonce sent was ACKed, and no NACK.
			d := f.World.Mesh.Istiod("1-26")
			rows, err := fixture.QueryHTTPSyncz(f.Ctx, d.ReplicaAddrs()[0], f.World.Mesh.Ports().HTTP, token)
			require.NoError(t, err)
			var proxies []string
			for _, r := range rows {
				if !strings.HasSuffix(r.Proxy, "."+ns) {
					continue // istiod lists every connection, debug clients too
				}
				require.Contains(t, r.Resources, mesh.TypeCDS, r.Proxy)
				require.Contains(t, r.Resources, mesh.TypeLDS, r.Proxy)
				for typ, st := range r.Resources {
					require.NotEmpty(t, st.Sent, "%s %s", r.Proxy, typ)
					require.Equal(t, st.Sent, st.Acked, "%s %s", r.Proxy, typ)
					require.Empty(t, st.LastError, "%s %s", r.Proxy, typ)
				}
				require.Equal(t, r.Resources[mesh.TypeCDS].Sent, r.ClusterSent, "the top-level nonces are the same")
				proxies = append(proxies, r.Proxy)
			}
			sort.Strings(proxies)
			require.Equal(t, f.ProxyIDs(ns, "reviews"), proxies)
		})

	// Every workload has a non-zero per-workload request rate in PromQL.
	p := f.World.Prometheus
	q := fmt.Sprintf(`sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace=%q}[5s])) > 0`, ns)
	require.NoError(t, p.WaitForScrape(f.Ctx, world.MeshJob, time.Minute))
	require.NoError(t, p.WaitForQuery(f.Ctx, q, len(apps), time.Minute))
	vec, err := p.Query(f.Ctx, q)
	require.NoError(t, err)
	got := map[string]float64{}
	for _, s := range vec {
		got[string(s.Metric["destination_workload"])] = float64(s.Value)
	}
	for _, app := range apps {
		require.Greater(t, got[app], 0.0, "request rate of %s", app)
	}
}
