package tests

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// rootCAFile writes the root certificate istiod publishes in the root
// namespace, for clients that verify istiod.
func rootCAFile(f *fixture.Fixture) string {
	f.T.Helper()
	var pem string
	f.Eventually("istio-ca-root-cert in the root namespace", func() (bool, string) {
		cm, err := f.Client.CoreV1().ConfigMaps(f.World.Mesh.RootNamespace()).Get(f.Ctx, "istio-ca-root-cert", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pem = cm.Data["root-cert.pem"]
		return pem != "", "empty"
	})
	path := filepath.Join(f.T.TempDir(), "root-cert.pem")
	require.NoError(f.T, os.WriteFile(path, []byte(pem), 0o600))
	return path
}

func tokenFile(f *fixture.Fixture, token string) string {
	f.T.Helper()
	path := filepath.Join(f.T.TempDir(), "istio-token")
	require.NoError(f.T, os.WriteFile(path, []byte(token), 0o600))
	return path
}

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

// TestTheSyncClientIsAnsweredByTheRealIstiod asks Istio's own istiod with
// meshwave's gRPC sync client, over TLS verified against istiod's root
// certificate and the revision's service name, with a token of the agent's
// service account in the root namespace. istiod lists every proxy of the
// revision SYNCED. The requests meshwave sent before it named itself are
// refused, each with istiod's own words.
func TestTheSyncClientIsAnsweredByTheRealIstiod(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "ident"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
		Deployment(ns, "app").Deployment(ns, "db", fixture.Replicas(1)).RolledOut(ns).
		Then().PodsOnRevision(ns, "app", "1-26")

	token := f.IstioCAToken("meshwave")
	client := analysis.GRPCSyncz{Port: f.World.Mesh.Ports().GRPCTLS, TokenFile: tokenFile(f, token), CAFile: rootCAFile(f),
		RootNamespace: f.World.Mesh.RootNamespace(), PodName: "meshwave-6d4f9-x2x7q", PodIP: "127.0.0.1", Timeout: 10 * time.Second}
	istiod := f.World.Mesh.Istiod("1-26")
	want := f.ProxyIDs(ns, "app", "db")
	f.Eventually("istiod 1-26 to report every proxy of "+ns+" SYNCED to meshwave's client", func() (bool, string) {
		var got []string
		for i, ip := range istiod.ReplicaAddrs() {
			proxies, err := client.Syncz(f.Ctx, analysis.Istiod{Pod: fmt.Sprint("replica-", i), IP: ip, Revision: "1-26"}, "")
			if err != nil {
				return false, err.Error()
			}
			for _, p := range proxies {
				if !strings.HasSuffix(p.ID, "."+ns) {
					continue
				}
				for _, typ := range []string{analysis.TypeCDS, analysis.TypeLDS} {
					if p.Status[typ] != statusv3.ConfigStatus_SYNCED {
						return false, fmt.Sprintf("%s: %v", p.ID, p.Status)
					}
				}
				for typ, s := range p.Status {
					if s != statusv3.ConfigStatus_SYNCED {
						return false, fmt.Sprintf("%s: %s is %s", p.ID, typ, s)
					}
				}
				// The real istiod leaves out the types a proxy never
				// subscribed to: a sidecar does not ask for ECDS.
				if _, ok := p.Status[analysis.TypeECDS]; ok {
					return false, p.ID + " has an ECDS entry"
				}
				got = append(got, p.ID)
			}
		}
		sort.Strings(got)
		return strings.Join(got, ",") == strings.Join(want, ","), fmt.Sprintf("listed %v, want %v", got, want)
	})

	// What the real istiod says to the requests meshwave's client no longer
	// sends.
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
	t.Run("HTTP syncz lists every connection, gRPC syncz only proxies", func(t *testing.T) {
		// A debug client that keeps its stream open, as the agent's does
		// while it waits for an answer.
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))) //nolint:gosec // the test reads istiod's lists, not its identity
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(f.Ctx, "authorization", "Bearer "+token))
		defer cancel()
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		require.NoError(t, err)
		rootMeta, err := structpb.NewStruct(map[string]any{"NAMESPACE": "istio-system"})
		require.NoError(t, err)
		require.NoError(t, stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: analysis.TypeDebugSyncz,
			Node: &corev3.Node{Id: "sidecar~127.0.0.1~debug-client.istio-system~istio-system.svc.cluster.local", Metadata: rootMeta}}))
		_, err = stream.Recv()
		require.NoError(t, err)

		rows, err := fixture.QueryHTTPSyncz(f.Ctx, istiod.ReplicaAddrs()[0], f.World.Mesh.Ports().HTTP, token)
		require.NoError(t, err)
		var listed []string
		for _, r := range rows {
			listed = append(listed, r.Proxy)
			if r.Proxy == "debug-client.istio-system" {
				assert.Empty(t, r.Resources, "a debug client subscribes to no xDS type")
			}
		}
		sort.Strings(listed)
		withClient := append([]string{"debug-client.istio-system"}, want...)
		sort.Strings(withClient)
		assert.Equal(t, withClient, listed)
		viaGRPC, err := client.Syncz(f.Ctx, analysis.Istiod{IP: istiod.ReplicaAddrs()[0], Revision: "1-26"}, "")
		require.NoError(t, err)
		var ids []string
		for _, p := range viaGRPC {
			ids = append(ids, p.ID)
		}
		sort.Strings(ids)
		assert.Equal(t, want, ids)
	})
	t.Run("plaintext 15010, which istiod does not authenticate without XDS_AUTH_PLAINTEXT", func(t *testing.T) {
		_, err := analysis.GRPCSyncz{Port: f.World.Mesh.Ports().GRPCPlain, Plaintext: true, TokenFile: tokenFile(f, token), Timeout: 10 * time.Second}.
			Syncz(f.Ctx, analysis.Istiod{IP: istiod.ReplicaAddrs()[0], Revision: "1-26"}, "")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "code = Unauthenticated desc = authentication required")
	})
	t.Run("a token without the istio-ca audience", func(t *testing.T) {
		_, err := analysis.GRPCSyncz{Port: f.World.Mesh.Ports().GRPCTLS, TokenFile: tokenFile(f, f.Token("meshwave")), Timeout: 10 * time.Second}.
			Syncz(f.Ctx, analysis.Istiod{IP: istiod.ReplicaAddrs()[0], Revision: "1-26"}, "")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "authentication failure")
	})
}
