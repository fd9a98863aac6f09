package analysis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// xDS type URLs, and the short names istioctl shows.
const (
	TypeCDS  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	TypeLDS  = "type.googleapis.com/envoy.config.listener.v3.Listener"
	TypeEDS  = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	TypeRDS  = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	TypeECDS = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"

	// TypeDebugSyncz is the debug type istioctl proxy-status asks istiod for.
	TypeDebugSyncz = "istio.io/debug/syncz"
)

var shortType = map[string]string{TypeCDS: "CDS", TypeLDS: "LDS", TypeEDS: "EDS", TypeRDS: "RDS", TypeECDS: "ECDS"}

// ProxySync is one proxy as an istiod replica reports it.
type ProxySync struct {
	// ID is <pod>.<namespace>.
	ID string
	// Status is the sync status of each type the proxy subscribed to; a
	// type it never subscribed to is absent.
	Status map[string]statusv3.ConfigStatus
	// Errors holds, per type, the message of the proxy's last NACK when
	// istiod reports one.
	Errors map[string]string
}

// SyncSource asks one istiod replica for the sync status of the proxies
// connected to it, in namespace (or every namespace when empty, where the
// source supports filtering).
type SyncSource interface {
	Syncz(ctx context.Context, istiod Istiod, namespace string) ([]ProxySync, error)
	// CallerNamespace is the namespace of the identity the source asks
	// with: istiod shows a caller outside its root namespace only the
	// proxies of that namespace, unless it is allow-listed.
	CallerNamespace() (string, error)
}

// GRPCSyncz asks istiod the way istioctl proxy-status does: an xDS
// DiscoveryRequest for istio.io/debug/syncz, over TLS on 15012 (or
// plaintext on 15010), with a service-account token of audience istio-ca.
//
// istiod parses the requester's node like any proxy's, and refuses the
// request unless:
//   - the node ID has the form type~ip~id~domain with a type it knows
//     (sidecar, router, waypoint, ztunnel): "InvalidArgument: missing parts
//     in the service node" otherwise;
//   - the node metadata's NAMESPACE, and SERVICE_ACCOUNT when present, match
//     the identity the token proves: "PermissionDenied: authorization
//     failed: no identities matched" otherwise.
//
// So the client names itself from its own token: the namespace and service
// account in the token's claims go into the node ID and metadata. It sends
// no PROXY_CONFIG, so istiod does not list it among the proxies.
type GRPCSyncz struct {
	Port int
	// Plaintext dials without TLS, for port 15010. istiod answers debug
	// requests there only when it runs with XDS_AUTH_PLAINTEXT=true, and
	// then still wants the token, which is sent only when
	// SendTokenInCleartext says so: anyone on the path could replay it.
	Plaintext bool
	// SendTokenInCleartext allows the token over a plaintext connection.
	SendTokenInCleartext bool
	// TokenFile holds the bearer token; it is read on every call, because a
	// projected token rotates.
	TokenFile string
	// CAFile verifies istiod's certificate against the revision's service
	// name, istiod-<rev>.<RootNamespace>.svc; empty skips the verification,
	// as istioctl does.
	CAFile string
	// RootNamespace is where istiod runs (the agent's rootNamespace).
	RootNamespace string
	// PodName and PodIP name the requester in its node ID (the agent's own
	// pod); defaults "meshwave" and 127.0.0.1. istiod only checks that the
	// IP is one.
	PodName, PodIP string
	// Timeout bounds one call.
	Timeout time.Duration
}

type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

func readToken(path string) (string, error) {
	if path == "" {
		return "", errors.New("no token file configured")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

// tokenIdentity is the service account a Kubernetes token was issued to.
type tokenIdentity struct {
	Namespace, ServiceAccount string
}

// identityOf reads, without verifying it (istiod does that), the service
// account a Kubernetes service-account JWT names in its subject,
// system:serviceaccount:<namespace>:<name>.
func identityOf(token string) (tokenIdentity, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return tokenIdentity{}, errors.New("the token is not a JWT (want header.payload.signature)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return tokenIdentity{}, fmt.Errorf("the token's payload is not base64url: %w", err)
	}
	var claims struct {
		Subject string `json:"sub"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		return tokenIdentity{}, fmt.Errorf("the token's payload is not JSON: %w", err)
	}
	f := strings.Split(claims.Subject, ":")
	if len(f) != 4 || f[0] != "system" || f[1] != "serviceaccount" || f[2] == "" || f[3] == "" {
		return tokenIdentity{}, fmt.Errorf("the token's subject %q is not a service account (system:serviceaccount:<namespace>:<name>)", claims.Subject)
	}
	return tokenIdentity{Namespace: f[2], ServiceAccount: f[3]}, nil
}

// node is how the requester presents itself to istiod: a sidecar-shaped
// node ID in the token's namespace, and metadata naming that namespace and
// service account.
func (g GRPCSyncz) node(id tokenIdentity) (*corev3.Node, error) {
	name, ip := g.PodName, g.PodIP
	if name == "" {
		name = "meshwave"
	}
	if ip == "" {
		ip = "127.0.0.1"
	}
	if net.ParseIP(ip) == nil {
		return nil, fmt.Errorf("pod IP %q is not an IP address", ip)
	}
	meta, err := structpb.NewStruct(map[string]any{
		"NAMESPACE":       id.Namespace,
		"SERVICE_ACCOUNT": id.ServiceAccount,
	})
	if err != nil {
		return nil, err
	}
	return &corev3.Node{
		Id:       fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", ip, name, id.Namespace, id.Namespace),
		Metadata: meta,
	}, nil
}

// ServerName is the name istiod's serving certificate carries for a
// revision: istiod-<rev>.<root>.svc, or istiod.<root>.svc for the default
// revision.
func ServerName(revision, rootNamespace string) string {
	if revision == "" || revision == "default" {
		return "istiod." + rootNamespace + ".svc"
	}
	return "istiod-" + revision + "." + rootNamespace + ".svc"
}

func (g GRPCSyncz) transport(revision string) (credentials.TransportCredentials, error) {
	if g.Plaintext {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.CAFile == "" {
		cfg.InsecureSkipVerify = true //nolint:gosec // istioctl proxy-status does not verify istiod either
		return credentials.NewTLS(cfg), nil
	}
	pem, err := os.ReadFile(g.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", g.CAFile)
	}
	cfg.RootCAs = pool
	cfg.ServerName = ServerName(revision, g.RootNamespace)
	return credentials.NewTLS(cfg), nil
}

// CallerNamespace implements SyncSource: the namespace of the token.
func (g GRPCSyncz) CallerNamespace() (string, error) {
	return tokenNamespace(g.TokenFile)
}

func tokenNamespace(path string) (string, error) {
	token, err := readToken(path)
	if err != nil {
		return "", err
	}
	id, err := identityOf(token)
	if err != nil {
		return "", fmt.Errorf("token %s: %w", path, err)
	}
	return id.Namespace, nil
}

// Syncz implements SyncSource. It opens one connection, sends one request
// and reads one answer.
func (g GRPCSyncz) Syncz(ctx context.Context, istiod Istiod, _ string) ([]ProxySync, error) {
	token, err := readToken(g.TokenFile)
	if err != nil {
		return nil, err
	}
	id, err := identityOf(token)
	if err != nil {
		return nil, fmt.Errorf("token %s: %w", g.TokenFile, err)
	}
	node, err := g.node(id)
	if err != nil {
		return nil, err
	}
	creds, err := g.transport(istiod.Revision)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if !g.Plaintext || g.SendTokenInCleartext {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: token, secure: !g.Plaintext}))
	}
	conn, err := grpc.NewClient(net.JoinHostPort(istiod.IP, strconv.Itoa(g.Port)), opts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if g.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.Timeout)
		defer cancel()
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeDebugSyncz, Node: node}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	out := make([]ProxySync, 0, len(resp.GetResources()))
	for _, res := range resp.GetResources() {
		var cc statusv3.ClientConfig
		if err := res.UnmarshalTo(&cc); err != nil {
			return nil, fmt.Errorf("decode ClientConfig: %w", err)
		}
		p := ProxySync{ID: cc.GetNode().GetId(), Status: map[string]statusv3.ConfigStatus{}}
		for _, x := range cc.GetGenericXdsConfigs() {
			p.Status[x.GetTypeUrl()] = x.GetConfigStatus()
			if d := x.GetErrorState().GetDetails(); d != "" {
				if p.Errors == nil {
					p.Errors = map[string]string{}
				}
				p.Errors[x.GetTypeUrl()] = d
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// HTTPSyncz reads istiod's GET /debug/syncz on its monitoring port (15014).
//
// Each row carries a "resources" map with, per type the proxy subscribed
// to, the nonce istiod last sent, the nonce the proxy last ACKed and the
// message of its last NACK ("lastError"), from which the status follows as
// syncz over gRPC gives it. An istiod whose rows lack that map gives only
// the nonces per type: then a NACK cannot be told from STALE, nor a type
// never subscribed to from one with nothing sent yet (both are left out).
//
// The rows list every xDS connection of the replica, debug clients such as
// istioctl included; the gate looks only for the wave's proxies. istiod
// answers callers outside its root namespace 403, unless
// DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists theirs, and callers from
// 127.0.0.0/8 without asking for a token at all.
//
// HTTP here is plaintext: the istio-ca token is sent only when
// SendTokenInCleartext says so, since anyone on the path could replay it.
// Without it, istiod answers only callers it does not authenticate
// (loopback ones) and refuses the others with 401.
type HTTPSyncz struct {
	Port                 int
	TokenFile            string
	SendTokenInCleartext bool
	Client               *http.Client
}

// httpSyncStatus is one row of GET /debug/syncz (istio
// pilot/pkg/xds/debug.go, SyncStatus).
type httpSyncStatus struct {
	Proxy                string                        `json:"proxy"`
	ClusterSent          string                        `json:"cluster_sent"`
	ClusterAcked         string                        `json:"cluster_acked"`
	ListenerSent         string                        `json:"listener_sent"`
	ListenerAcked        string                        `json:"listener_acked"`
	RouteSent            string                        `json:"route_sent"`
	RouteAcked           string                        `json:"route_acked"`
	EndpointSent         string                        `json:"endpoint_sent"`
	EndpointAcked        string                        `json:"endpoint_acked"`
	ExtensionConfigSent  string                        `json:"extensionconfig_sent"`
	ExtensionConfigAcked string                        `json:"extensionconfig_acked"`
	Resources            map[string]httpResourceStatus `json:"resources"`
}

type httpResourceStatus struct {
	Sent      string `json:"sent"`
	Acked     string `json:"acked"`
	LastError string `json:"lastError"`
}

// nonceStatus is istiod's rule (statusgen.go, debugSyncStatus): a NACK is
// ERROR, nothing sent is NOT_SENT, an acknowledged last nonce is SYNCED,
// anything else STALE.
func nonceStatus(r httpResourceStatus) statusv3.ConfigStatus {
	switch {
	case r.LastError != "":
		return statusv3.ConfigStatus_ERROR
	case r.Sent == "":
		return statusv3.ConfigStatus_NOT_SENT
	case r.Sent == r.Acked:
		return statusv3.ConfigStatus_SYNCED
	default:
		return statusv3.ConfigStatus_STALE
	}
}

// proxySync reads a row.
func (r httpSyncStatus) proxySync() ProxySync {
	p := ProxySync{ID: r.Proxy, Status: map[string]statusv3.ConfigStatus{}}
	if r.Resources != nil {
		for t, res := range r.Resources {
			p.Status[t] = nonceStatus(res)
			if res.LastError != "" {
				if p.Errors == nil {
					p.Errors = map[string]string{}
				}
				p.Errors[t] = res.LastError
			}
		}
		return p
	}
	for t, n := range map[string][2]string{
		TypeCDS: {r.ClusterSent, r.ClusterAcked}, TypeLDS: {r.ListenerSent, r.ListenerAcked},
		TypeRDS: {r.RouteSent, r.RouteAcked}, TypeEDS: {r.EndpointSent, r.EndpointAcked},
		TypeECDS: {r.ExtensionConfigSent, r.ExtensionConfigAcked},
	} {
		if n[0] != "" {
			p.Status[t] = nonceStatus(httpResourceStatus{Sent: n[0], Acked: n[1]})
		}
	}
	return p
}

// CallerNamespace implements SyncSource: the namespace of the token.
func (h HTTPSyncz) CallerNamespace() (string, error) {
	return tokenNamespace(h.TokenFile)
}

// Syncz implements SyncSource.
func (h HTTPSyncz) Syncz(ctx context.Context, istiod Istiod, namespace string) ([]ProxySync, error) {
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(istiod.IP, strconv.Itoa(h.Port)), Path: "/debug/syncz"}
	if namespace != "" {
		u.RawQuery = url.Values{"namespace": {namespace}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if h.SendTokenInCleartext {
		token, err := readToken(h.TokenFile)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := h.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		if !h.SendTokenInCleartext {
			return nil, fmt.Errorf("GET %s: %s: istiod wants a token, which meshwave sends over plain HTTP only with gates.sync.sendTokenInCleartext: true (or use mode grpc over TLS)", u.String(), resp.Status)
		}
		return nil, fmt.Errorf("GET %s: %s: istiod did not accept the token (it wants a service-account token with audience istio-ca)", u.String(), resp.Status)
	case http.StatusForbidden:
		return nil, fmt.Errorf("GET %s: %s: istiod answers /debug/syncz only to its root namespace and the namespaces DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists", u.String(), resp.Status)
	default:
		return nil, fmt.Errorf("GET %s: %s", u.String(), resp.Status)
	}
	var rows []httpSyncStatus
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return nil, fmt.Errorf("decode syncz: %w", err)
	}
	out := make([]ProxySync, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.proxySync())
	}
	return out, nil
}
