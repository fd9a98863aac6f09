package mesh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// envoyBehaviour is what the staged faults ask of one proxy.
type envoyBehaviour struct {
	disconnected bool
	// status per type: STALE never ACKs it, ERROR NACKs it, NOT_SENT never
	// subscribes to it.
	status   map[string]statusv3.ConfigStatus
	ackDelay time.Duration
}

// envoy simulates the istio-proxy of one injected pod: an xDS client that
// connects to its revision's istiod as a sidecar does, over TLS on 15012
// with the pod's service-account token (audience istio-ca), verifying
// istiod against the root certificate istiod publishes in the pod's
// namespace. Its node ID and metadata are those istio-proxy sends. It
// subscribes to CDS and LDS, then to EDS for the EDS clusters and RDS for
// the routes its listeners name, and ACKs every response: istiod's own
// syncz then reports it SYNCED. Faults change that at the protocol level.
type envoy struct {
	d *realIstiod

	mu        sync.Mutex
	pod       *corev1.Pod
	cancel    context.CancelFunc
	restartCh chan struct{}
	streaming bool
	done      chan struct{}
	token     string
	tokenExp  time.Time
}

func newEnvoy(d *realIstiod, pod *corev1.Pod) *envoy {
	return &envoy{d: d, pod: pod.DeepCopy(), restartCh: make(chan struct{}, 1), done: make(chan struct{})}
}

func (e *envoy) setPod(pod *corev1.Pod) {
	e.mu.Lock()
	e.pod = pod.DeepCopy()
	e.mu.Unlock()
}

func (e *envoy) currentPod() *corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pod
}

func (e *envoy) connected() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.streaming
}

func (e *envoy) start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	e.cancel = cancel
	e.mu.Unlock()
	go e.run(ctx)
}

func (e *envoy) stop() {
	e.mu.Lock()
	cancel := e.cancel
	e.mu.Unlock()
	if cancel != nil {
		cancel()
		<-e.done
	}
}

// restart ends the current stream; run opens a new one with the faults as
// they are now.
func (e *envoy) restart() {
	select {
	case e.restartCh <- struct{}{}:
	default:
	}
}

func (e *envoy) run(ctx context.Context) {
	defer close(e.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		b := e.d.behaviour(e.currentPod())
		if b.disconnected {
			select {
			case <-ctx.Done():
				return
			case <-e.restartCh:
			}
			continue
		}
		start := time.Now()
		err := e.stream(ctx, b)
		if ctx.Err() != nil {
			return
		}
		if err != nil && time.Since(start) > 5*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-e.restartCh:
			backoff = 100 * time.Millisecond
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// stream holds one ADS stream until it breaks, ctx ends or a restart is
// asked for.
func (e *envoy) stream(ctx context.Context, b envoyBehaviour) error {
	pod := e.currentPod()
	token, err := e.podToken(ctx, pod)
	if err != nil {
		return err
	}
	conn, err := e.d.dial(ctx, pod.Namespace, token)
	if err != nil {
		return err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sctx.Done():
		case <-e.restartCh:
			// Hand the restart to run, which opens the next stream.
			e.restart()
			cancel()
		}
	}()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return err
	}
	node, err := proxyNode(pod, e.d.rev, e.d.m.opts.RootNamespace)
	if err != nil {
		return err
	}
	x := &xdsState{stream: stream, node: node, b: b, names: map[string][]string{}, version: map[string]string{}, nonce: map[string]string{}}
	for _, t := range []string{TypeCDS, TypeLDS} {
		if err := x.subscribe(t, nil); err != nil {
			return err
		}
	}
	e.setStreaming(true)
	defer e.setStreaming(false)
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := x.handle(sctx, resp); err != nil {
			return err
		}
	}
}

func (e *envoy) setStreaming(v bool) {
	e.mu.Lock()
	e.streaming = v
	e.mu.Unlock()
}

// xdsState is one stream's subscriptions.
type xdsState struct {
	stream  discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node    *corev3.Node
	b       envoyBehaviour
	sentAny bool
	names   map[string][]string
	version map[string]string // last accepted version per type
	nonce   map[string]string // last nonce seen per type
}

// subscribe asks for a type, or changes its resource names. A type the
// faults say is NOT_SENT is never asked for.
func (x *xdsState) subscribe(typeURL string, names []string) error {
	if x.b.status[typeURL] == statusv3.ConfigStatus_NOT_SENT {
		return nil
	}
	x.names[typeURL] = names
	return x.send(&discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names,
		VersionInfo: x.version[typeURL], ResponseNonce: x.nonce[typeURL]})
}

func (x *xdsState) send(req *discoveryv3.DiscoveryRequest) error {
	if !x.sentAny {
		// Only the first request of a stream carries the node, as Envoy
		// sends it.
		req.Node = x.node
		x.sentAny = true
	}
	return x.stream.Send(req)
}

// handle ACKs (or, under a fault, NACKs or ignores) a response, and follows
// CDS with EDS and LDS with RDS subscriptions as Envoy does.
func (x *xdsState) handle(ctx context.Context, resp *discoveryv3.DiscoveryResponse) error {
	t := resp.GetTypeUrl()
	x.nonce[t] = resp.GetNonce()
	switch x.b.status[t] {
	case statusv3.ConfigStatus_STALE:
		return nil // never ACKed: istiod keeps the nonce unacknowledged
	case statusv3.ConfigStatus_ERROR:
		return x.send(&discoveryv3.DiscoveryRequest{TypeUrl: t, ResourceNames: x.names[t],
			VersionInfo: x.version[t], ResponseNonce: resp.GetNonce(),
			ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: simulatedNACK}})
	}
	if x.b.ackDelay > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(x.b.ackDelay):
		}
	}
	x.version[t] = resp.GetVersionInfo()
	if err := x.send(&discoveryv3.DiscoveryRequest{TypeUrl: t, ResourceNames: x.names[t],
		VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
		return err
	}
	var follow string
	var names []string
	switch t {
	case TypeCDS:
		follow, names = TypeEDS, edsClusters(resp)
	case TypeLDS:
		follow, names = TypeRDS, rdsRoutes(resp)
	default:
		return nil
	}
	if len(names) == 0 || slices.Equal(names, x.names[follow]) {
		return nil
	}
	return x.subscribe(follow, names)
}

// edsClusters are the clusters of a CDS response whose endpoints come from
// EDS, sorted.
func edsClusters(resp *discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, r := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := r.UnmarshalTo(&c); err != nil {
			continue
		}
		if c.GetType() == clusterv3.Cluster_EDS {
			name := c.GetName()
			if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
				name = n
			}
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// rdsRoutes are the route configurations the HTTP connection managers of
// an LDS response ask for over RDS, sorted.
func rdsRoutes(resp *discoveryv3.DiscoveryResponse) []string {
	var out []string
	for _, r := range resp.GetResources() {
		var l listenerv3.Listener
		if err := r.UnmarshalTo(&l); err != nil {
			continue
		}
		chains := append([]*listenerv3.FilterChain{l.GetDefaultFilterChain()}, l.GetFilterChains()...)
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig() == nil || f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				if name := hcm.GetRds().GetRouteConfigName(); name != "" {
					out = append(out, name)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// proxyNode is the node a sidecar's istio-proxy presents: its ID
// sidecar~<pod IP>~<pod>.<namespace>~<namespace>.svc.cluster.local (a
// waypoint's begins waypoint~, as "proxy waypoint" sets it) and the
// metadata istiod reads, PROXY_CONFIG included (istiod lists only nodes
// that carry it in syncz).
func proxyNode(pod *corev1.Pod, rev Revision, root string) (*corev3.Node, error) {
	labelsAny := map[string]any{}
	for k, v := range pod.Labels {
		labelsAny[k] = v
	}
	owner := ""
	if len(pod.OwnerReferences) > 0 {
		o := pod.OwnerReferences[0]
		owner = fmt.Sprintf("kubernetes://apis/%s/namespaces/%s/%ss/%s", o.APIVersion, pod.Namespace, strings.ToLower(o.Kind), o.Name)
	}
	version := rev.Version
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == ProxyContainer {
			if i := strings.LastIndex(c.Image, ":"); i >= 0 {
				version = c.Image[i+1:]
			}
		}
	}
	meta, err := structpb.NewStruct(map[string]any{
		"NAMESPACE":       pod.Namespace,
		"SERVICE_ACCOUNT": pod.Spec.ServiceAccountName,
		"NAME":            pod.Name,
		"INSTANCE_IPS":    pod.Status.PodIP,
		"LABELS":          labelsAny,
		"WORKLOAD_NAME":   workloadName(pod),
		"OWNER":           owner,
		"CLUSTER_ID":      "Kubernetes",
		"MESH_ID":         "cluster.local",
		"ISTIO_VERSION":   version,
		"PROXY_CONFIG": map[string]any{
			"discoveryAddress": "istiod-" + rev.Name + "." + root + ".svc:15012",
			"proxyMetadata":    map[string]any{},
		},
	})
	if err != nil {
		return nil, err
	}
	kind := "sidecar"
	if _, ok := waypointRevision(pod); ok {
		kind = "waypoint" // pilot-agent's "proxy waypoint"
	}
	return &corev3.Node{
		Id:            fmt.Sprintf("%s~%s~%s.%s~%s.svc.cluster.local", kind, pod.Status.PodIP, pod.Name, pod.Namespace, pod.Namespace),
		Metadata:      meta,
		UserAgentName: "envoy",
	}, nil
}

// podToken is a token of the pod's service account, audience istio-ca,
// bound to the pod, as the projected istio-token volume holds.
func (e *envoy) podToken(ctx context.Context, pod *corev1.Pod) (string, error) {
	e.mu.Lock()
	if e.token != "" && time.Now().Before(e.tokenExp) {
		defer e.mu.Unlock()
		return e.token, nil
	}
	e.mu.Unlock()
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		return "", fmt.Errorf("pod %s/%s has no service account", pod.Namespace, pod.Name)
	}
	tr, err := e.d.m.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{
			Audiences:         []string{IstioCAAudience},
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", pod.Namespace, sa, err)
	}
	e.mu.Lock()
	e.token, e.tokenExp = tr.Status.Token, time.Now().Add(50*time.Minute)
	e.mu.Unlock()
	return tr.Status.Token, nil
}

// dial opens a connection to the revision's istiod on 15012 as a proxy of
// namespace does: TLS verified against the root certificate istiod
// publishes there and the revision's service name, with token sent on
// every call.
func (d *realIstiod) dial(ctx context.Context, namespace, token string) (*grpc.ClientConn, error) {
	cm, err := d.m.client.CoreV1().ConfigMaps(namespace).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("istio-ca-root-cert in %s: %w", namespace, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["root-cert.pem"])) {
		return nil, fmt.Errorf("istio-ca-root-cert in %s holds no certificate", namespace)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "istiod-" + d.rev.Name + "." + d.m.opts.RootNamespace + ".svc", MinVersion: tls.VersionTLS12})
	return grpc.NewClient(d.serviceIP+":15012", grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(tokenCreds(token)))
}

// tokenCreds sends a bearer token with every call.
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }
