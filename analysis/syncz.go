package analysis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

// requiredTypes are the types every sidecar subscribes to. Any other type a
// proxy never subscribed to is reported NOT_SENT, which is normal.
var requiredTypes = []string{TypeCDS, TypeLDS, TypeEDS, TypeRDS}

// ProxySync is one proxy as an istiod replica reports it.
type ProxySync struct {
	// ID is <pod>.<namespace>.
	ID string
	// Status is the sync status per type URL.
	Status map[string]statusv3.ConfigStatus
}

// SyncSource asks one istiod replica for the sync status of the proxies
// connected to it, in namespace (or every namespace when empty, where the
// source supports filtering).
type SyncSource interface {
	Syncz(ctx context.Context, ip, namespace string) ([]ProxySync, error)
}

// GRPCSyncz asks istiod the way istioctl proxy-status does: an xDS
// DiscoveryRequest for istio.io/debug/syncz, over TLS on 15012 (or
// plaintext on 15010), with a service-account token of audience istio-ca.
type GRPCSyncz struct {
	Port int
	// Plaintext dials without TLS, for port 15010.
	Plaintext bool
	// TokenFile holds the bearer token; it is read on every call, because a
	// projected token rotates.
	TokenFile string
	// CAFile verifies istiod's certificate; empty skips the verification,
	// as istioctl does.
	CAFile string
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

// Syncz implements SyncSource.
func (g GRPCSyncz) Syncz(ctx context.Context, ip, _ string) ([]ProxySync, error) {
	token, err := readToken(g.TokenFile)
	if err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	if g.Plaintext {
		creds = insecure.NewCredentials()
	} else {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if g.CAFile != "" {
			pem, err := os.ReadFile(g.CAFile)
			if err != nil {
				return nil, fmt.Errorf("read CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificate in %s", g.CAFile)
			}
			cfg.RootCAs = pool
			cfg.ServerName = "istiod.istio-system.svc"
		} else {
			cfg.InsecureSkipVerify = true //nolint:gosec // istioctl proxy-status does not verify istiod either
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(net.JoinHostPort(ip, strconv.Itoa(g.Port)),
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearer{token: token, secure: !g.Plaintext}))
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
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeDebugSyncz, Node: &corev3.Node{Id: "meshwave"}}); err != nil {
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
		}
		out = append(out, p)
	}
	return out, nil
}

// HTTPSyncz reads istiod's GET /debug/syncz on its monitoring port: nonces
// sent and acknowledged per type, from which the status follows.
type HTTPSyncz struct {
	Port      int
	TokenFile string
	Client    *http.Client
}

type httpSyncStatus struct {
	Proxy                string `json:"proxy"`
	ClusterSent          string `json:"cluster_sent"`
	ClusterAcked         string `json:"cluster_acked"`
	ListenerSent         string `json:"listener_sent"`
	ListenerAcked        string `json:"listener_acked"`
	RouteSent            string `json:"route_sent"`
	RouteAcked           string `json:"route_acked"`
	EndpointSent         string `json:"endpoint_sent"`
	EndpointAcked        string `json:"endpoint_acked"`
	ExtensionConfigSent  string `json:"extensionconfig_sent"`
	ExtensionConfigAcked string `json:"extensionconfig_acked"`
}

// nonceStatus is istiod's rule: nothing sent is NOT_SENT, an acknowledged
// last nonce is SYNCED, anything else STALE.
func nonceStatus(sent, acked string) statusv3.ConfigStatus {
	switch {
	case sent == "":
		return statusv3.ConfigStatus_NOT_SENT
	case sent == acked:
		return statusv3.ConfigStatus_SYNCED
	default:
		return statusv3.ConfigStatus_STALE
	}
}

// Syncz implements SyncSource.
func (h HTTPSyncz) Syncz(ctx context.Context, ip, namespace string) ([]ProxySync, error) {
	token, err := readToken(h.TokenFile)
	if err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(ip, strconv.Itoa(h.Port)), Path: "/debug/syncz"}
	if namespace != "" {
		u.RawQuery = url.Values{"namespace": {namespace}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := h.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u.String(), resp.Status)
	}
	var rows []httpSyncStatus
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return nil, fmt.Errorf("decode syncz: %w", err)
	}
	out := make([]ProxySync, 0, len(rows))
	for _, r := range rows {
		out = append(out, ProxySync{ID: r.Proxy, Status: map[string]statusv3.ConfigStatus{
			TypeCDS:  nonceStatus(r.ClusterSent, r.ClusterAcked),
			TypeLDS:  nonceStatus(r.ListenerSent, r.ListenerAcked),
			TypeRDS:  nonceStatus(r.RouteSent, r.RouteAcked),
			TypeEDS:  nonceStatus(r.EndpointSent, r.EndpointAcked),
			TypeECDS: nonceStatus(r.ExtensionConfigSent, r.ExtensionConfigAcked),
		}})
	}
	return out, nil
}
