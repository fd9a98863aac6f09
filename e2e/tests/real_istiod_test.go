package tests

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// rawSyncz sends one syncz request with the given node, the way meshwave's
// client did before it named itself, and returns istiod's error.
func rawSyncz(ctx context.Context, addr, token string, node *corev3.Node) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))) //nolint:gosec // the test reads istiod's refusal, not its identity
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 10*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: analysis.TypeDebugSyncz, Node: node}); err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// TestTheRealIstiodRefusesADebugRequestThatDoesNotNameItsRequester runs
// Istio's own istiod for the revisions of the world, injecting pods and
// answering their simulated proxies, and records what it says to syncz
// requests whose node does not name the requester the way it expects: the
// bare node ID meshwave's sync client sends today is refused.
func TestTheRealIstiodRefusesADebugRequestThatDoesNotNameItsRequester(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true, RealIstiod: true})
	const ns = "ident"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
		Deployment(ns, "app").RolledOut(ns).
		Then().PodsOnRevision(ns, "app", "1-26")
	token := f.IstioCAToken("meshwave")
	istiod := f.World.Mesh.Istiod("1-26")
	addr := fmt.Sprintf("%s:%d", istiod.ReplicaAddrs()[0], f.World.Mesh.Ports().GRPCTLS)
	meta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "default"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		node *corev3.Node
		want string
	}{
		{"a bare node ID", &corev3.Node{Id: "meshwave"}, `InvalidArgument desc = missing parts in the service node "meshwave"`},
		{"a node type istiod does not know", &corev3.Node{Id: "istioctl~127.0.0.1~meshwave.istio-system~istio-system.svc.cluster.local"}, "InvalidArgument desc = invalid node type"},
		{"metadata naming another namespace than the token", &corev3.Node{Id: "sidecar~127.0.0.1~meshwave.default~default.svc.cluster.local", Metadata: meta}, "PermissionDenied desc = authorization failed: no identities"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rawSyncz(f.Ctx, addr, token, tc.node)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
