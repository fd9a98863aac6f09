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
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
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
	assert.Equal(t, "istiod-1-26.istio-system.svc", ServerName("1-26", "istio-system"))
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
			{TypeUrl: TypeRDS, ConfigStatus: statusv3.ConfigStatus_ERROR, ErrorState: &adminv3.UpdateFailureState{Details: "duplicate virtual host"}},
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

	client := GRPCSyncz{Port: p, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.pem"), RootNamespace: "istio-system",
		PodName: "meshwave-7c9f-x2", PodIP: "10.1.2.3", Timeout: 5 * time.Second}
	got, err := client.Syncz(context.Background(), Istiod{Pod: "istiod-1-26-a", IP: host, Revision: "1-26"}, "")
	require.NoError(t, err)
	assert.Equal(t, []ProxySync{{ID: "cart-1.shop", Status: map[string]statusv3.ConfigStatus{
		TypeLDS: statusv3.ConfigStatus_SYNCED, TypeRDS: statusv3.ConfigStatus_ERROR,
	}, Errors: map[string]string{TypeRDS: "duplicate virtual host"}}}, got)
	ns, err := client.CallerNamespace()
	require.NoError(t, err)
	assert.Equal(t, "istio-system", ns)

	req := <-ads.got
	assert.Equal(t, TypeDebugSyncz, req.GetTypeUrl())
	assert.Equal(t, "sidecar~10.1.2.3~meshwave-7c9f-x2.istio-system~istio-system.svc.cluster.local", req.GetNode().GetId())
	assert.Equal(t, map[string]any{"NAMESPACE": "istio-system", "SERVICE_ACCOUNT": "meshwave"}, req.GetNode().GetMetadata().AsMap())
	assert.Equal(t, []string{"Bearer " + token}, <-ads.auth)

	// Another revision's name is not on this certificate: verification
	// fails rather than talk to the wrong istiod.
	_, err = client.Syncz(context.Background(), Istiod{Pod: "istiod-1-25-a", IP: host, Revision: "1-25"}, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "x509: certificate is valid for istiod-1-26.istio-system.svc, not istiod-1-25.istio-system.svc")

	// Another CA did not sign it: verification fails too.
	_, _, otherCA := serveADS(t, "istiod-1-26.istio-system.svc")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other-ca.pem"), otherCA, 0o600))
	client.CAFile = filepath.Join(dir, "other-ca.pem")
	_, err = client.Syncz(context.Background(), Istiod{Pod: "istiod-1-26-a", IP: host, Revision: "1-26"}, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "x509: certificate signed by unknown authority")
	assert.Len(t, ads.got, 0, "nothing was sent to an istiod that failed verification")
}

func TestTheGRPCClientRefusesATokenItCannotNameItselfWith(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("opaque"), 0o600))
	_, err := GRPCSyncz{Port: 1, TokenFile: filepath.Join(dir, "token")}.Syncz(context.Background(), Istiod{IP: "127.0.0.1"}, "")
	require.EqualError(t, err, "token "+filepath.Join(dir, "token")+": the token is not a JWT (want header.payload.signature)")
}

func TestTheHTTPClientReadsEachTypesNoncesAndNACKs(t *testing.T) {
	// Rows as istiod's /debug/syncz writes them (pilot/pkg/xds/debug.go):
	// a sidecar that NACKed RDS and has nothing sent on EDS yet, one that
	// never asked for routes, a debug client (istiod lists every
	// connection), and a row of an istiod without the resources map.
	const body = `[
	 {"cluster_id":"Kubernetes","proxy":"cart-1.shop","proxy_type":"sidecar","istio_version":"1.31-dev",
	  "cluster_sent":"c1","cluster_acked":"c1","listener_sent":"l1","listener_acked":"l1","route_sent":"r2","route_acked":"r1","endpoint_sent":"",
	  "resources":{
	   "type.googleapis.com/envoy.config.cluster.v3.Cluster":{"sent":"c1","acked":"c1","sentTime":"2026-11-30T07:00:00Z"},
	   "type.googleapis.com/envoy.config.listener.v3.Listener":{"sent":"l1","acked":"l1"},
	   "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":{"sent":"r2","acked":"r1","lastError":"duplicate virtual host"},
	   "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment":{}}},
	 {"proxy":"cart-2.shop","proxy_type":"sidecar","cluster_sent":"c1","cluster_acked":"c1","listener_sent":"l1","listener_acked":"l0",
	  "resources":{
	   "type.googleapis.com/envoy.config.cluster.v3.Cluster":{"sent":"c1","acked":"c1"},
	   "type.googleapis.com/envoy.config.listener.v3.Listener":{"sent":"l1","acked":"l0"}}},
	 {"proxy":"meshwave-6d4f9.istio-system","proxy_type":"sidecar"},
	 {"proxy":"old-1.shop","cluster_sent":"c1","cluster_acked":"c1","listener_sent":"l1","listener_acked":"l1","route_sent":"r2","route_acked":"r1"}
	]`
	var gotAuth, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotQuery = r.Header.Get("Authorization"), r.URL.RawQuery
		if r.URL.Path != "/debug/syncz" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	host, port := splitHostPort(t, srv.Listener.Addr().String())
	dir := t.TempDir()
	token := jwt(`{"sub":"system:serviceaccount:istio-system:meshwave"}`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600))

	// The token crosses plain HTTP only when the configuration says so.
	_, err := HTTPSyncz{Port: port, TokenFile: filepath.Join(dir, "token")}.Syncz(context.Background(), Istiod{IP: host}, "shop")
	require.NoError(t, err)
	assert.Empty(t, gotAuth, "no token in cleartext by default")
	got, err := HTTPSyncz{Port: port, TokenFile: filepath.Join(dir, "token"), SendTokenInCleartext: true}.Syncz(context.Background(), Istiod{IP: host}, "shop")
	require.NoError(t, err)
	assert.Equal(t, "Bearer "+token, gotAuth)
	assert.Equal(t, "namespace=shop", gotQuery)
	assert.Equal(t, []ProxySync{
		{ID: "cart-1.shop", Status: map[string]statusv3.ConfigStatus{
			TypeCDS: statusv3.ConfigStatus_SYNCED, TypeLDS: statusv3.ConfigStatus_SYNCED,
			TypeRDS: statusv3.ConfigStatus_ERROR, TypeEDS: statusv3.ConfigStatus_NOT_SENT,
		}, Errors: map[string]string{TypeRDS: "duplicate virtual host"}},
		{ID: "cart-2.shop", Status: map[string]statusv3.ConfigStatus{TypeCDS: statusv3.ConfigStatus_SYNCED, TypeLDS: statusv3.ConfigStatus_STALE}},
		{ID: "meshwave-6d4f9.istio-system", Status: map[string]statusv3.ConfigStatus{}},
		// Without the resources map a NACK looks STALE.
		{ID: "old-1.shop", Status: map[string]statusv3.ConfigStatus{
			TypeCDS: statusv3.ConfigStatus_SYNCED, TypeLDS: statusv3.ConfigStatus_SYNCED, TypeRDS: statusv3.ConfigStatus_STALE,
		}},
	}, got)
	assert.Equal(t, `NOT_SENT on EDS, ERROR (NACK) on RDS ("duplicate virtual host")`, syncProblem(got[0], alwaysSubscribed))
	assert.Equal(t, "STALE on LDS", syncProblem(got[1], alwaysSubscribed))
}

func TestTheHTTPClientSaysWhyIstiodRefused(t *testing.T) {
	code := http.StatusForbidden
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
	t.Cleanup(srv.Close)
	host, port := splitHostPort(t, srv.Listener.Addr().String())
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte(jwt(`{"sub":"system:serviceaccount:ops:meshwave"}`)), 0o600))
	client := HTTPSyncz{Port: port, TokenFile: filepath.Join(dir, "token"), SendTokenInCleartext: true}
	url := "http://" + srv.Listener.Addr().String() + "/debug/syncz"

	_, err := client.Syncz(context.Background(), Istiod{IP: host}, "")
	require.EqualError(t, err, "GET "+url+": 403 Forbidden: istiod answers /debug/syncz only to its root namespace and the namespaces DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists")
	code = http.StatusUnauthorized
	_, err = client.Syncz(context.Background(), Istiod{IP: host}, "")
	require.EqualError(t, err, "GET "+url+": 401 Unauthorized: istiod did not accept the token (it wants a service-account token with audience istio-ca)")
	client.SendTokenInCleartext = false
	_, err = client.Syncz(context.Background(), Istiod{IP: host}, "")
	require.EqualError(t, err, "GET "+url+": 401 Unauthorized: istiod wants a token, which meshwave sends over plain HTTP only with gates.sync.sendTokenInCleartext: true (or use mode grpc over TLS)")
	ns, err := client.CallerNamespace()
	require.NoError(t, err)
	assert.Equal(t, "ops", ns)
}

func splitHostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return host, p
}
