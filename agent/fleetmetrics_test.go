package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/stretchr/testify/require"
)

// syncedInformer is an informer whose store holds what it was given and
// that reads as synced.
type syncedInformer struct{ cache.SharedIndexInformer }

func (syncedInformer) HasSynced() bool { return true }

// Each other cluster of the rings is reported readable or not, by the
// rule the decisions read it with; the cluster's own name is never a peer.
func TestEachPeerClusterIsReportedReadableOrNot(t *testing.T) {
	fc := newFleetClusters(nil, "istio-system", FleetConfig{Cluster: "prod-eu", Rings: []RingConfig{
		{Name: "staging", Clusters: []string{"staging"}},
		{Name: "prod", Clusters: []string{"prod-eu", "prod-us", "prod-ap"}},
	}}, nil)
	broken := &transportHealth{}
	broken.failed(errors.New("connection refused"))
	fc.remotes["staging"] = &remoteCluster{source: "Secret istio-system/meshwave-remote-staging", health: &transportHealth{},
		informer: syncedInformer{cache.NewSharedIndexInformer(nil, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})}}
	fc.remotes["prod-us"] = &remoteCluster{source: "Secret istio-system/meshwave-remote-prod-us", health: broken,
		informer: syncedInformer{cache.NewSharedIndexInformer(nil, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})}}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(fc))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP meshwave_fleet_peer_readable 1 while another cluster of the fleet's rings can be read (its kubeconfig Secret, its apiserver answering, its namespaces synced); 0 while it cannot, and the later rings wait on it.
# TYPE meshwave_fleet_peer_readable gauge
meshwave_fleet_peer_readable{peer="prod-ap"} 0
meshwave_fleet_peer_readable{peer="prod-us"} 0
meshwave_fleet_peer_readable{peer="staging"} 1
`), "meshwave_fleet_peer_readable"))
}
