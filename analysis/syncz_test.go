package analysis

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
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
	"google.golang.org/protobuf/types/known/anypb"
)

// jwt builds an unsigned token with the given payload; the client never
// verifies signatures, istiod does.
func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("sig"))
}

func TestIdentityOfReadsTheServiceAccountFromTheTokenSubject(t *testing.T) {
	tests := []struct {
		name  string
		token string
		want  tokenIdentity
		err   string
	}{
		{"a projected token", jwt(`{"aud":["istio-ca"],"sub":"system:serviceaccount:istio-system:meshwave"}`), tokenIdentity{"istio-system", "meshwave"}, ""},
		{"a padded payload", "h." + base64.URLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:ops:agent"}`)) + ".s", tokenIdentity{"ops", "agent"}, ""},
		{"a user token", jwt(`{"sub":"admin"}`), tokenIdentity{}, `the token's subject "admin" is not a service account (system:serviceaccount:<namespace>:<name>)`},
		{"an empty namespace", jwt(`{"sub":"system:serviceaccount::agent"}`), tokenIdentity{}, `the token's subject "system:serviceaccount::agent" is not a service account (system:serviceaccount:<namespace>:<name>)`},
		{"not a JWT", "opaque-token", tokenIdentity{}, "the token is not a JWT (want header.payload.signature)"},
		{"a payload that is not JSON", "a." + base64.RawURLEncoding.EncodeToString([]byte("x")) + ".c", tokenIdentity{}, "the token's payload is not JSON: invalid character 'x' looking for beginning of value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := identityOf(tt.token)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestServerNameIsTheRevisionsService(t *testing.T) {
	assert.Equal(t, "istiod-1-26.istio-system.svc", ServerName("1-26", ""))
	assert.Equal(t, "istiod-canary.mesh.svc", ServerName("canary", "mesh"))
	assert.Equal(t, "istiod.istio-system.svc", ServerName("default", "istio-system"))
	assert.Equal(t, "istiod.istio-system.svc", ServerName("", "istio-system"))
}

// recordingADS answers one syncz request with one proxy and remembers what
// it was sent.
type recordingADS struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	got  chan *discoveryv3.DiscoveryRequest
	auth chan []string
}

func (r *recordingADS) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	req, err := s.Recv()
	if err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(s.Context())
	r.got <- req
	r.auth <- md.Get("authorization")
	cc, err := anypb.New(&statusv3.ClientConfig{
		Node: &corev3.Node{Id: "cart-1.shop"},
		GenericXdsConfigs: []*statusv3.ClientConfig_GenericXdsConfig{
			{TypeUrl: TypeLDS, ConfigStatus: statusv3.ConfigStatus_SYNCED},
			{TypeUrl: TypeRDS, ConfigStatus: statusv3.ConfigStatus_ERROR},
		},
	})
	if err != nil {
		return err
	}
	return s.Send(&discoveryv3.DiscoveryResponse{TypeUrl: TypeDebugSyncz, Resources: []*anypb.Any{cc}})
}

// serveADS starts a TLS ADS server whose certificate names dnsName, and
// returns its address and the PEM of the CA that signed it.
func serveADS(t *testing.T, dnsName string) (*recordingADS, string, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &key.PublicKey, caKey)
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key})))
	ads := &recordingADS{got: make(chan *discoveryv3.DiscoveryRequest, 4), auth: make(chan []string, 4)}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, ads)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return ads, lis.Addr().String(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func TestTheGRPCClientNamesItselfAfterItsToken(t *testing.T) {
	ads, addr, caPEM := serveADS(t, "istiod-1-26.istio-system.svc")
	dir := t.TempDir()
	token := jwt(`{"aud":["istio-ca"],"sub":"system:serviceaccount:istio-system:meshwave"}`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o600))
	host, port, _ := net.SplitHostPort(addr)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)

	client := GRPCSyncz{Port: p, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.pem"),
		PodName: "meshwave-7c9f-x2", PodIP: "10.1.2.3", Timeout: 5 * time.Second}
	got, err := client.Syncz(context.Background(), Istiod{Pod: "istiod-1-26-a", IP: host, Revision: "1-26"}, "")
	require.NoError(t, err)
	assert.Equal(t, []ProxySync{{ID: "cart-1.shop", Status: map[string]statusv3.ConfigStatus{
		TypeLDS: statusv3.ConfigStatus_SYNCED, TypeRDS: statusv3.ConfigStatus_ERROR,
	}}}, got)

	req := <-ads.got
	assert.Equal(t, TypeDebugSyncz, req.GetTypeUrl())
	assert.Equal(t, "sidecar~10.1.2.3~meshwave-7c9f-x2.istio-system~istio-system.svc.cluster.local", req.GetNode().GetId())
	assert.Equal(t, map[string]any{"NAMESPACE": "istio-system", "SERVICE_ACCOUNT": "meshwave"}, req.GetNode().GetMetadata().AsMap())
	assert.Equal(t, []string{"Bearer " + token}, <-ads.auth)

	// Another revision's name is not on this certificate: verification
	// fails rather than talk to the wrong istiod.
	_, err = client.Syncz(context.Background(), Istiod{Pod: "istiod-1-25-a", IP: host, Revision: "1-25"}, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "istiod-1-25.istio-system.svc")
}

func TestTheGRPCClientRefusesATokenItCannotNameItselfWith(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("opaque"), 0o600))
	_, err := GRPCSyncz{Port: 1, TokenFile: filepath.Join(dir, "token")}.Syncz(context.Background(), Istiod{IP: "127.0.0.1"}, "")
	require.EqualError(t, err, "token "+filepath.Join(dir, "token")+": the token is not a JWT (want header.payload.signature)")
}
