package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// The types a ztunnel subscribes to (ztunnel's src/xds/types.rs): the
// workloads and services it may reach, and the authorization policies it
// enforces. It does not ask for istio.workload.Workload.
const (
	TypeAddress       = "type.googleapis.com/istio.workload.Address"
	TypeAuthorization = "type.googleapis.com/istio.security.Authorization"
)

// ZtunnelServiceAccount is the service account a ztunnel runs as, in the
// root namespace, as Istio's ztunnel chart names it.
const ZtunnelServiceAccount = "ztunnel"

// Ztunnel simulates the ztunnel of one node, as a real one talks to istiod:
// a delta ADS stream over TLS on 15012 to its revision's istiod, with a
// token of the root namespace's ztunnel service account (audience
// istio-ca), the node ID ztunnel~<ip>~<pod>.<root>~<root>.svc.cluster.local
// and the metadata ztunnel sends, and one wildcard subscription to each of
// Address and Authorization. It ACKs every response, so istiod's syncz
// lists it SYNCED; SetStatus makes it stall (STALE) or NACK (ERROR) a type,
// at the protocol level. The revision's istiod must run with
// PILOT_ENABLE_AMBIENT=true, without which it refuses a ztunnel.
type Ztunnel struct {
	d       *realIstiod
	name    string // the ztunnel pod's name
	node    string
	ip      string
	cancel  context.CancelFunc
	done    chan struct{}
	restart chan struct{}

	mu        sync.Mutex
	streaming bool
	status    map[string]statusv3.ConfigStatus
	resources map[string]map[string]bool // type -> names held
	workloads map[string]ZtunnelWorkload // by uid
	admin     *http.Server
	nacked    map[string]int
	lastErr   error
	// forget is a namespace whose workloads it ACKs but does not keep.
	forget string
}

// StartZtunnel starts the simulated ztunnel of node (its pod named name,
// at ip) against revision rev's real istiod, and keeps it connected until
// Stop.
func (m *Mesh) StartZtunnel(ctx context.Context, rev, name, node, ip string) (*Ztunnel, error) {
	d, ok := m.Istiod(rev).(*realIstiod)
	if !ok {
		return nil, fmt.Errorf("revision %s does not run the real istiod", rev)
	}
	if err := m.ensureServiceAccount(ctx, m.opts.RootNamespace, ZtunnelServiceAccount); err != nil {
		return nil, err
	}
	zctx, cancel := context.WithCancel(context.Background())
	z := &Ztunnel{d: d, name: name, node: node, ip: ip, cancel: cancel, done: make(chan struct{}), restart: make(chan struct{}, 1),
		status: map[string]statusv3.ConfigStatus{}, resources: map[string]map[string]bool{}, nacked: map[string]int{},
		workloads: map[string]ZtunnelWorkload{}}
	if err := z.serveAdmin(); err != nil {
		cancel()
		return nil, err
	}
	go z.run(zctx)
	return z, nil
}

func (m *Mesh) ensureServiceAccount(ctx context.Context, namespace, name string) error {
	_, err := m.client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service account %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Stop closes the stream and waits for it to end.
func (z *Ztunnel) Stop() {
	z.cancel()
	<-z.done
	if z.admin != nil {
		_ = z.admin.Close()
	}
}

// Addr is where its admin answers, host:port; "" without one.
func (z *Ztunnel) Addr() string {
	if z.admin == nil {
		return ""
	}
	return net.JoinHostPort(z.ip, fmt.Sprint(ZtunnelAdminPort))
}

// ID is the proxy ID istiod's syncz lists it by: <pod>.<namespace>.
func (z *Ztunnel) ID() string { return z.name + "." + z.d.m.opts.RootNamespace }

// Connected reports whether its stream is open.
func (z *Ztunnel) Connected() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.streaming
}

// Err is why its last stream ended, if one did.
func (z *Ztunnel) Err() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.lastErr
}

// Resources are the names of the resources of typeURL it holds, sorted:
// for Address, a workload's uid (<cluster>//Pod/<namespace>/<pod>) or a
// service's <namespace>/<hostname>.
func (z *Ztunnel) Resources(typeURL string) []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	var out []string
	for n := range z.resources[typeURL] {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Protocol is the tunnel protocol istiod gave the workload of uid, as
// ztunnel-config workloads shows it: HBONE or TCP; "" when it holds no
// such workload.
func (z *Ztunnel) Protocol(uid string) string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.workloads[uid].Protocol
}

// ZtunnelWorkload is a workload as ztunnel's config dump lists it (its
// src/state/workload.rs, in camelCase), with the fields the world reads.
type ZtunnelWorkload struct {
	UID       string `json:"uid"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Node      string `json:"node,omitempty"`
	Protocol  string `json:"protocol"`
	Status    string `json:"status"`
}

// workloadOf reads the Workload of an istio.workload.Address, by the field
// numbers of Istio's pkg/workloadapi/workload.proto (Address.workload 1;
// Workload.name 1, namespace 2, tunnel_protocol 5 with HBONE 1, node 9,
// status 17 with UNHEALTHY 1, uid 20): the e2e module does not build
// Istio's generated types.
func workloadOf(address []byte) (ZtunnelWorkload, bool) {
	b, found := protoField(address, 1)
	if !found {
		return ZtunnelWorkload{}, false
	}
	w := ZtunnelWorkload{Protocol: "TCP", Status: "Healthy"}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ZtunnelWorkload{}, false
		}
		b = b[n:]
		var m int
		switch {
		case typ == protowire.BytesType && (num == 1 || num == 2 || num == 9 || num == 20):
			var v []byte
			v, m = protowire.ConsumeBytes(b)
			switch num {
			case 1:
				w.Name = string(v)
			case 2:
				w.Namespace = string(v)
			case 9:
				w.Node = string(v)
			case 20:
				w.UID = string(v)
			}
		case typ == protowire.VarintType && (num == 5 || num == 17):
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			switch {
			case num == 5 && v == 1:
				w.Protocol = "HBONE"
			case num == 17 && v == 1:
				w.Status = "Unhealthy"
			}
		default:
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return ZtunnelWorkload{}, false
		}
		b = b[m:]
	}
	return w, w.UID != ""
}

// configDump answers GET /config_dump as ztunnel's admin does, with the
// workloads it holds sorted by uid, and the other top-level keys empty.
func (z *Ztunnel) configDump(w http.ResponseWriter, _ *http.Request) {
	z.mu.Lock()
	workloads := make([]ZtunnelWorkload, 0, len(z.workloads))
	for _, wl := range z.workloads {
		workloads = append(workloads, wl)
	}
	z.mu.Unlock()
	slices.SortFunc(workloads, func(a, b ZtunnelWorkload) int { return strings.Compare(a.UID, b.UID) })
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(map[string]any{
		"workloads": workloads, "services": []any{}, "policies": []any{}, "stagedServices": map[string]any{},
		"certificates": []any{}, "workloadState": map[string]any{},
		"version": map[string]any{"version": "simulated", "istioVersion": z.d.m.istio.Version},
	})
}

// ZtunnelAdminPort is where ztunnel's admin answers: localhost:15000; in
// the world, at the ztunnel pod's loopback IP, as a port-forward reaches it.
const ZtunnelAdminPort = 15000

// serveAdmin starts the admin server at the pod's IP, when it is one the
// world can listen on.
func (z *Ztunnel) serveAdmin() error {
	if ip := net.ParseIP(z.ip); ip == nil || !ip.IsLoopback() {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(z.ip, fmt.Sprint(ZtunnelAdminPort)))
	if err != nil {
		return fmt.Errorf("ztunnel %s admin: %w", z.name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config_dump", z.configDump)
	z.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = z.admin.Serve(l) }()
	return nil
}

// protoField is the bytes of the first field num of message b.
func protoField(b []byte, num protowire.Number) ([]byte, bool) {
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return nil, false
		}
		b = b[k:]
		if n == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			return v, m >= 0
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return nil, false
		}
		b = b[m:]
	}
	return nil, false
}

// Nacked is how many responses of typeURL it has refused.
func (z *Ztunnel) Nacked(typeURL string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.nacked[typeURL]
}

// Forget makes it drop every workload of namespace, those it holds and
// those istiod sends from now on, while it goes on ACKing every response:
// a ztunnel whose state lost what istiod's syncz calls SYNCED. Only its
// config dump tells. Forget("") keeps every workload again. The stream is
// opened again, and istiod sends the whole state anew.
func (z *Ztunnel) Forget(namespace string) {
	z.mu.Lock()
	z.forget = namespace
	z.mu.Unlock()
	select {
	case z.restart <- struct{}{}:
	default:
	}
}

// SetStatus makes it answer typeURL's responses as status says from now
// on: SYNCED ACKs them, STALE never answers, ERROR NACKs them. The stream
// is opened again, so that the change applies from the first response.
func (z *Ztunnel) SetStatus(typeURL string, status statusv3.ConfigStatus) {
	z.mu.Lock()
	z.status[typeURL] = status
	z.mu.Unlock()
	select {
	case z.restart <- struct{}{}:
	default:
	}
}

func (z *Ztunnel) run(ctx context.Context) {
	defer close(z.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := z.stream(ctx)
		z.mu.Lock()
		z.streaming, z.lastErr = false, err
		z.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-z.restart:
			backoff = 100 * time.Millisecond
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

func (z *Ztunnel) stream(ctx context.Context) error {
	root := z.d.m.opts.RootNamespace
	token, err := z.token(ctx)
	if err != nil {
		return err
	}
	conn, err := z.d.dial(ctx, root, token)
	if err != nil {
		return err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sctx.Done():
		case <-z.restart:
			select {
			case z.restart <- struct{}{}:
			default:
			}
			cancel()
		}
	}()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		return err
	}
	node, err := z.nodeOf()
	if err != nil {
		return err
	}
	z.mu.Lock()
	z.resources, z.workloads = map[string]map[string]bool{}, map[string]ZtunnelWorkload{}
	z.mu.Unlock()
	for _, t := range []string{TypeAddress, TypeAuthorization} {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: t}); err != nil {
			return err
		}
	}
	z.mu.Lock()
	z.streaming = true
	z.mu.Unlock()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		z.mu.Lock()
		status := z.status[resp.TypeUrl]
		if status != statusv3.ConfigStatus_ERROR {
			held := z.resources[resp.TypeUrl]
			if held == nil {
				held = map[string]bool{}
				z.resources[resp.TypeUrl] = held
			}
			for _, r := range resp.Resources {
				held[r.Name] = true
				if resp.TypeUrl == TypeAddress && r.Resource != nil {
					if w, ok := workloadOf(r.Resource.Value); ok && (z.forget == "" || w.Namespace != z.forget) {
						z.workloads[w.UID] = w
					}
				}
			}
			for _, n := range resp.RemovedResources {
				delete(held, n)
				if resp.TypeUrl == TypeAddress {
					delete(z.workloads, n)
				}
			}
		} else {
			z.nacked[resp.TypeUrl]++
		}
		z.mu.Unlock()
		ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}
		switch status {
		case statusv3.ConfigStatus_STALE:
			continue
		case statusv3.ConfigStatus_ERROR:
			ack.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "simulated ztunnel refuses " + resp.TypeUrl}
		}
		if err := stream.Send(ack); err != nil {
			return err
		}
	}
}

// nodeOf is the node a ztunnel presents (ztunnel's src/xds/client.rs and
// its config): the ztunnel type, the root namespace, and no proxy config.
func (z *Ztunnel) nodeOf() (*corev3.Node, error) {
	root := z.d.m.opts.RootNamespace
	meta, err := structpb.NewStruct(map[string]any{
		"NAME":         z.name,
		"NAMESPACE":    root,
		"INSTANCE_IPS": z.ip,
		"NODE_NAME":    z.node,
		"CLUSTER_ID":   "Kubernetes",
	})
	if err != nil {
		return nil, err
	}
	return &corev3.Node{
		Id:       fmt.Sprintf("ztunnel~%s~%s.%s~%s.svc.cluster.local", z.ip, z.name, root, root),
		Metadata: meta,
	}, nil
}

// token is a token of the ztunnel service account, audience istio-ca.
func (z *Ztunnel) token(ctx context.Context) (string, error) {
	root := z.d.m.opts.RootNamespace
	tr, err := z.d.m.client.CoreV1().ServiceAccounts(root).CreateToken(ctx, ZtunnelServiceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{IstioCAAudience}, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", root, ZtunnelServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// InstallZtunnel renders Istio's ztunnel chart for revision rev and
// applies it: its service account and a DaemonSet whose pods (one a node,
// labelled app=ztunnel and istio.io/rev) the world's kubelet runs. Each of
// those pods, once running, is served by a simulated Ztunnel connected to
// its revision's istiod, which must run with PILOT_ENABLE_AMBIENT=true.
func (m *Mesh) InstallZtunnel(ctx context.Context, rev string) error {
	if m.istio == nil {
		return fmt.Errorf("ztunnel needs the real istiod")
	}
	objs, err := m.renderRootChart(ctx, "ztunnel", "revision="+rev)
	if err != nil {
		return err
	}
	// Loopback addresses, so that each simulated ztunnel's admin listens
	// at its pod's IP.
	m.opts.IPs.AssignIPs(m.opts.RootNamespace, labels.SelectorFromSet(map[string]string{"app": "ztunnel"}), m.allocateIP)
	return m.apply.apply(ctx, objs)
}

// InstallCNI renders Istio's istio-cni chart with ambient enabled and
// applies it: its node agent's DaemonSet, whose pods (one a node,
// labelled k8s-app=istio-cni-node) the world's kubelet runs. What the
// node agent does for ambient pods, the redirection annotation, is
// StartCNI's.
func (m *Mesh) InstallCNI(ctx context.Context) error {
	if m.istio == nil {
		return fmt.Errorf("istio-cni needs Istio's charts")
	}
	objs, err := m.renderRootChart(ctx, "istio-cni", "ambient.enabled=true")
	if err != nil {
		return err
	}
	return m.apply.apply(ctx, objs)
}

// renderRootChart renders one of Istio's charts for the root namespace,
// with this Istio's tag and the values given (key=value).
func (m *Mesh) renderRootChart(ctx context.Context, chart string, values ...string) ([]*unstructured.Unstructured, error) {
	args := []string{"template", chart, filepath.Join(m.istio.Charts, chart), "--namespace", m.opts.RootNamespace,
		"--set", "global.istioNamespace=" + m.opts.RootNamespace, "--set", "tag=" + m.istio.Version}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	cmd := exec.CommandContext(ctx, m.istio.Helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s %v: %w: %s", chart, values, err, stderr.String())
	}
	return decodeObjects(bytes.NewReader(out))
}

// Ztunnel is the simulated ztunnel of a ztunnel pod, or nil.
func (m *Mesh) Ztunnel(pod string) *Ztunnel {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ztunnels[pod]
}

// observeZtunnelPod runs a simulated Ztunnel for a running ztunnel pod,
// and stops it when the pod goes or changes address.
func (m *Mesh) observeZtunnelPod(pod *corev1.Pod, deleted bool) {
	running := !deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	m.mu.Lock()
	z := m.ztunnels[pod.Name]
	stale := z != nil && (!running || z.ip != pod.Status.PodIP)
	if stale {
		delete(m.ztunnels, pod.Name)
	}
	start := running && (z == nil || stale) && !m.ztunnelsStopped
	m.mu.Unlock()
	if stale {
		z.Stop()
	}
	if !start {
		return
	}
	rev, err := m.ztunnelRevision(pod)
	if err != nil {
		m.opts.Logf("ztunnel %s: %v", pod.Name, err)
		return
	}
	started, err := m.StartZtunnel(context.Background(), rev, pod.Name, pod.Spec.NodeName, pod.Status.PodIP)
	if err != nil {
		m.opts.Logf("ztunnel %s: %v", pod.Name, err)
		return
	}
	m.mu.Lock()
	if m.ztunnelsStopped || m.ztunnels[pod.Name] != nil {
		m.mu.Unlock()
		started.Stop()
		return
	}
	if m.ztunnels == nil {
		m.ztunnels = map[string]*Ztunnel{}
	}
	m.ztunnels[pod.Name] = started
	m.mu.Unlock()
}

// ztunnelRevision is the revision whose istiod a ztunnel pod connects to:
// the one its XDS_ADDRESS names (istiod-<rev>.<root>.svc:15012), as
// ztunnel reads it.
func (m *Mesh) ztunnelRevision(pod *corev1.Pod) (string, error) {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name != "XDS_ADDRESS" {
				continue
			}
			host, _, _ := strings.Cut(e.Value, ":")
			rev, ok := strings.CutSuffix(strings.TrimPrefix(host, "istiod-"), "."+m.opts.RootNamespace+".svc")
			if !ok || !strings.HasPrefix(host, "istiod-") {
				return "", fmt.Errorf("XDS_ADDRESS %q names no revision's istiod", e.Value)
			}
			return rev, nil
		}
	}
	return "", fmt.Errorf("no XDS_ADDRESS")
}

// stopZtunnels stops every simulated ztunnel.
func (m *Mesh) stopZtunnels() {
	m.mu.Lock()
	zs := m.ztunnels
	m.ztunnels, m.ztunnelsStopped = nil, true
	m.mu.Unlock()
	for _, z := range zs {
		z.Stop()
	}
}
