package mesh

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// xDS type URLs istiod reports in syncz, in the order it reports them.
const (
	TypeLDS  = "type.googleapis.com/envoy.config.listener.v3.Listener"
	TypeRDS  = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	TypeEDS  = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	TypeCDS  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	TypeECDS = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"

	// TypeDebugSyncz is the debug type istioctl proxy-status asks for.
	TypeDebugSyncz = "istio.io/debug/syncz"
)

// syncTypes are the types a sidecar subscribes to, for which istiod reports
// a status. A type a proxy never subscribed to (ECDS, here) is left out of
// syncz, as the real istiod does.
var syncTypes = []string{TypeLDS, TypeRDS, TypeEDS, TypeCDS}

var subscribed = map[string]bool{TypeLDS: true, TypeRDS: true, TypeEDS: true, TypeCDS: true}

// Ports istiod serves on each replica's IP.
type Ports struct {
	GRPCPlain int // 15010: xDS without TLS
	GRPCTLS   int // 15012: xDS over TLS
	HTTP      int // 15014: monitoring and /debug
}

// DefaultPorts are istiod's.
var DefaultPorts = Ports{GRPCPlain: 15010, GRPCTLS: 15012, HTTP: 15014}

// proxyFault overrides the status istiod reports for matching proxies.
type proxyFault struct {
	id         int
	namespace  string
	selector   labels.Selector
	typeURL    string // "" means every subscribed type
	status     statusv3.ConfigStatus
	disconnect bool
}

func (f proxyFault) matches(p *proxy) bool {
	return (f.namespace == "" || f.namespace == p.namespace) && (f.selector == nil || f.selector.Matches(labels.Set(p.labels)))
}

// proxy is one sidecar connected to this istiod.
type proxy struct {
	pod         string
	namespace   string
	labels      map[string]string
	replica     string // the istiod pod holding the connection
	connectedAt time.Time
}

func (p *proxy) id() string { return p.pod + "." + p.namespace }

// replica serves one istiod pod's xDS and HTTP ports on that pod's IP.
type replica struct {
	pod      string
	ip       string
	grpcTLS  *grpc.Server
	grpcText *grpc.Server
	http     *http.Server
}

// SimIstiod simulates the istiod of one revision. Every pod injected by that
// revision is connected to one of its replicas from the moment the pod runs
// until it is deleted, and each replica reports only its own connections,
// as in Istio.
type SimIstiod struct {
	rev           Revision
	rootNamespace string
	ports         Ports
	auth          *tokenAuthenticator
	cert          *servingCert
	logf          func(string, ...any)

	mu          sync.Mutex
	replicas    map[string]*replica // by istiod pod name
	replicaIPs  map[string]string   // istiod pod name -> IP, whether serving or not
	proxies     map[string]*proxy   // by proxy id
	faults      []proxyFault
	nextFault   int
	unreachable bool
	syncDelay   time.Duration
	requests    map[string]int // syncz requests served, by replica
}

func newIstiod(rev Revision, rootNamespace string, ports Ports, auth *tokenAuthenticator, cert *servingCert, logf func(string, ...any)) *SimIstiod {
	return &SimIstiod{
		rev: rev, rootNamespace: rootNamespace, ports: ports, auth: auth, cert: cert, logf: logf,
		replicas: map[string]*replica{}, replicaIPs: map[string]string{}, proxies: map[string]*proxy{}, requests: map[string]int{},
	}
}

// Revision is the revision this istiod serves.
func (d *SimIstiod) Revision() Revision { return d.rev }

// SetProxyStatus makes the matching proxies report status on typeURL (every
// subscribed type when typeURL is empty), for example STALE on RDS. It
// returns a function that lifts the fault.
func (d *SimIstiod) SetProxyStatus(namespace string, sel labels.Selector, typeURL string, status statusv3.ConfigStatus) (clear func()) {
	return d.addFault(proxyFault{namespace: namespace, selector: sel, typeURL: typeURL, status: status})
}

// Disconnect drops the matching proxies from every replica's view, as if
// their xDS streams had closed, until the returned function is called.
func (d *SimIstiod) Disconnect(namespace string, sel labels.Selector) (clear func()) {
	return d.addFault(proxyFault{namespace: namespace, selector: sel, disconnect: true})
}

// SetSyncDelay makes newly connected proxies STALE for d before they report
// SYNCED, the time a real first push and ACK take.
func (d *SimIstiod) SetSyncDelay(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncDelay = delay
}

func (d *SimIstiod) addFault(f proxyFault) func() {
	d.mu.Lock()
	d.nextFault++
	f.id = d.nextFault
	d.faults = append(d.faults, f)
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i := range d.faults {
			if d.faults[i].id == f.id {
				d.faults = append(d.faults[:i], d.faults[i+1:]...)
				return
			}
		}
	}
}

// SetUnreachable closes (true) or reopens (false) every replica's ports.
func (d *SimIstiod) SetUnreachable(unreachable bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.unreachable == unreachable {
		return nil
	}
	d.unreachable = unreachable
	if unreachable {
		for name, r := range d.replicas {
			r.stop()
			delete(d.replicas, name)
		}
		return nil
	}
	for pod, ip := range d.replicaIPs {
		if err := d.startReplicaLocked(pod, ip); err != nil {
			return err
		}
	}
	return nil
}

// ReplicaAddrs returns the IPs of the serving replicas, sorted.
func (d *SimIstiod) ReplicaAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ips []string
	for _, r := range d.replicas {
		ips = append(ips, r.ip)
	}
	sort.Strings(ips)
	return ips
}

// SynczRequests returns how many syncz requests the replicas have answered.
func (d *SimIstiod) SynczRequests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.requests {
		n += c
	}
	return n
}

// ConnectedProxies returns the ids (pod.namespace) of the connected proxies,
// sorted, faults included.
func (d *SimIstiod) ConnectedProxies() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id, p := range d.proxies {
		if !d.disconnectedLocked(p) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// observeIstiodPod starts or stops the replica behind an istiod pod.
func (d *SimIstiod) observeIstiodPod(pod *corev1.Pod, deleted bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	running := !deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	if !running {
		delete(d.replicaIPs, pod.Name)
		if r, ok := d.replicas[pod.Name]; ok {
			r.stop()
			delete(d.replicas, pod.Name)
		}
		return
	}
	d.replicaIPs[pod.Name] = pod.Status.PodIP
	if _, ok := d.replicas[pod.Name]; ok || d.unreachable {
		return
	}
	if err := d.startReplicaLocked(pod.Name, pod.Status.PodIP); err != nil {
		d.logf("istiod %s: replica %s: %v", d.rev.Name, pod.Name, err)
	}
}

// observeProxyPod connects or disconnects the sidecar of an application pod.
func (d *SimIstiod) observeProxyPod(pod *corev1.Pod, connected bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := pod.Name + "." + pod.Namespace
	if !connected {
		delete(d.proxies, id)
		return
	}
	if p, ok := d.proxies[id]; ok {
		p.labels = pod.Labels
		return
	}
	d.proxies[id] = &proxy{pod: pod.Name, namespace: pod.Namespace, labels: pod.Labels, connectedAt: time.Now()}
}

func (d *SimIstiod) startReplicaLocked(pod, ip string) error {
	r := &replica{pod: pod, ip: ip}
	listen := func(port int) (net.Listener, error) {
		return net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	}
	lTLS, err := listen(d.ports.GRPCTLS)
	if err != nil {
		return err
	}
	lText, err := listen(d.ports.GRPCPlain)
	if err != nil {
		lTLS.Close()
		return err
	}
	lHTTP, err := listen(d.ports.HTTP)
	if err != nil {
		lTLS.Close()
		lText.Close()
		return err
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{d.cert.tls}, MinVersion: tls.VersionTLS12})
	r.grpcTLS = grpc.NewServer(grpc.Creds(creds))
	r.grpcText = grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(r.grpcTLS, &adsServer{istiod: d, replica: pod})
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(r.grpcText, &adsServer{istiod: d, replica: pod, plaintext: true})
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/syncz", d.serveHTTPSyncz(pod))
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	r.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.grpcTLS.Serve(lTLS) }()
	go func() { _ = r.grpcText.Serve(lText) }()
	go func() { _ = r.http.Serve(lHTTP) }()
	d.replicas[pod] = r
	return nil
}

func (r *replica) stop() {
	r.grpcTLS.Stop()
	r.grpcText.Stop()
	_ = r.http.Close()
}

func (d *SimIstiod) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, r := range d.replicas {
		r.stop()
		delete(d.replicas, name)
	}
}

func (d *SimIstiod) disconnectedLocked(p *proxy) bool {
	for _, f := range d.faults {
		if f.disconnect && f.matches(p) {
			return true
		}
	}
	return false
}

// proxiesOfLocked returns the proxies whose stream the given replica holds,
// visible to the caller. A proxy whose replica is gone reconnects to the
// least loaded serving one, as Envoy does through the istiod Service.
func (d *SimIstiod) proxiesOfLocked(replicaPod string, visible func(*proxy) bool) []*proxy {
	load := map[string]int{}
	for _, p := range d.proxies {
		if _, ok := d.replicas[p.replica]; ok {
			load[p.replica]++
		}
	}
	ids := make([]string, 0, len(d.proxies))
	for id := range d.proxies {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []*proxy
	for _, id := range ids {
		p := d.proxies[id]
		if _, ok := d.replicas[p.replica]; !ok {
			p.replica = leastLoaded(d.replicas, load)
			load[p.replica]++
		}
		if p.replica == replicaPod && !d.disconnectedLocked(p) && visible(p) {
			out = append(out, p)
		}
	}
	return out
}

func leastLoaded(replicas map[string]*replica, load map[string]int) string {
	best, bestLoad := "", -1
	names := make([]string, 0, len(replicas))
	for n := range replicas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if bestLoad < 0 || load[n] < bestLoad {
			best, bestLoad = n, load[n]
		}
	}
	return best
}

// typeState is what istiod tracks per proxy and type: whether the proxy
// subscribed to it, the nonce it sent, the nonce the proxy acknowledged,
// and the proxy's last NACK.
type typeState struct {
	subscribed  bool
	sent, acked string
	lastError   string
}

func (t typeState) status() statusv3.ConfigStatus {
	switch {
	case t.lastError != "":
		return statusv3.ConfigStatus_ERROR
	case t.sent == "":
		return statusv3.ConfigStatus_NOT_SENT
	case t.acked == t.sent:
		return statusv3.ConfigStatus_SYNCED
	default:
		return statusv3.ConfigStatus_STALE
	}
}

// simulatedNACK is the message the simulated proxies NACK with, as the
// real istiod's proxies (envoy.go) do.
const simulatedNACK = "simulated NACK: the proxy rejected this configuration"

// stateLocked derives the state istiod would hold for p and typeURL from
// the staged faults, so that both the gRPC and the HTTP answers agree. A
// NOT_SENT fault is a type the proxy never subscribed to, which istiod
// leaves out, as for the real istiod's proxies.
func (d *SimIstiod) stateLocked(p *proxy, typeURL string, now time.Time) typeState {
	want := statusv3.ConfigStatus_SYNCED
	if !subscribed[typeURL] {
		want = statusv3.ConfigStatus_NOT_SENT
	} else if now.Sub(p.connectedAt) < d.syncDelay {
		want = statusv3.ConfigStatus_STALE
	}
	for _, f := range d.faults {
		if !f.disconnect && f.matches(p) && (f.typeURL == typeURL || (f.typeURL == "" && subscribed[typeURL])) {
			want = f.status
		}
	}
	nonce := strconv.FormatInt(p.connectedAt.UnixNano(), 36)
	switch want {
	case statusv3.ConfigStatus_NOT_SENT:
		return typeState{}
	case statusv3.ConfigStatus_STALE:
		return typeState{subscribed: true, sent: nonce + "-2", acked: nonce + "-1"}
	case statusv3.ConfigStatus_ERROR:
		return typeState{subscribed: true, sent: nonce + "-2", acked: nonce + "-1", lastError: simulatedNACK}
	default:
		return typeState{subscribed: true, sent: nonce + "-1", acked: nonce + "-1"}
	}
}

// allowed reports whether istiod shows a caller everything: it is in the
// root namespace or listed in DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES (split
// at commas, as istiod does).
func (d *SimIstiod) allowed(c caller) bool {
	return c.Namespace == d.rootNamespace || slices.Contains(strings.Split(d.rev.Env["DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES"], ","), c.Namespace)
}

// visibleTo applies the access rule of Istio 1.28.7 and later: a caller
// that is not allowed sees only the proxies of its own namespace.
func (d *SimIstiod) visibleTo(c caller) func(*proxy) bool {
	if d.allowed(c) {
		return func(*proxy) bool { return true }
	}
	return func(p *proxy) bool { return p.namespace == c.Namespace }
}

// identifier is the ControlPlane.Identifier istiod puts in its responses.
func (d *SimIstiod) identifier(replicaPod string) string {
	raw, _ := json.Marshal(map[string]any{
		"Component": "istiod",
		"ID":        replicaPod,
		"Info":      map[string]string{"version": d.rev.Version, "revision": "f0e1d2c3b4a5968778695a4b3c2d1e0f00112233", "status": "Clean", "tag": d.rev.Version},
	})
	return string(raw)
}

// httpSyncStatus is one element of GET /debug/syncz.
type httpSyncStatus struct {
	ClusterID            string `json:"cluster_id,omitempty"`
	ProxyID              string `json:"proxy,omitempty"`
	ProxyType            string `json:"proxy_type,omitempty"`
	IstioVersion         string `json:"istio_version,omitempty"`
	ClusterSent          string `json:"cluster_sent,omitempty"`
	ClusterAcked         string `json:"cluster_acked,omitempty"`
	ListenerSent         string `json:"listener_sent,omitempty"`
	ListenerAcked        string `json:"listener_acked,omitempty"`
	RouteSent            string `json:"route_sent,omitempty"`
	RouteAcked           string `json:"route_acked,omitempty"`
	EndpointSent         string `json:"endpoint_sent,omitempty"`
	EndpointAcked        string `json:"endpoint_acked,omitempty"`
	ExtensionConfigSent  string `json:"extensionconfig_sent,omitempty"`
	ExtensionConfigAcked string `json:"extensionconfig_acked,omitempty"`
	// Resources holds, per type the proxy subscribed to, its nonces and
	// last NACK.
	Resources map[string]httpResourceStatus `json:"resources,omitempty"`
}

type httpResourceStatus struct {
	Sent      string `json:"sent,omitempty"`
	Acked     string `json:"acked,omitempty"`
	LastError string `json:"lastError,omitempty"`
}

func (d *SimIstiod) serveHTTPSyncz(replicaPod string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := d.auth.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		// Since 1.27.6 the HTTP debug endpoints refuse callers that are
		// not allowed outright (istiod's allowAuthenticatedOrLocalhost,
		// for a caller that is not on loopback: the simulator takes every
		// caller as remote).
		if !d.allowed(c) {
			http.Error(w, fmt.Sprintf("namespace %s is not allowed to use debug endpoints", c.Namespace), http.StatusForbidden)
			return
		}
		filter := r.URL.Query().Get("namespace")
		now := time.Now()
		d.mu.Lock()
		d.requests[replicaPod]++
		out := []httpSyncStatus{}
		for _, p := range d.proxiesOfLocked(replicaPod, d.visibleTo(c)) {
			if filter != "" && p.namespace != filter {
				continue
			}
			s := httpSyncStatus{ClusterID: "Kubernetes", ProxyID: p.id(), ProxyType: "sidecar", IstioVersion: d.rev.Version}
			st := func(t string) typeState { return d.stateLocked(p, t, now) }
			s.ListenerSent, s.ListenerAcked = st(TypeLDS).sent, st(TypeLDS).acked
			s.RouteSent, s.RouteAcked = st(TypeRDS).sent, st(TypeRDS).acked
			s.EndpointSent, s.EndpointAcked = st(TypeEDS).sent, st(TypeEDS).acked
			s.ClusterSent, s.ClusterAcked = st(TypeCDS).sent, st(TypeCDS).acked
			s.ExtensionConfigSent, s.ExtensionConfigAcked = st(TypeECDS).sent, st(TypeECDS).acked
			s.Resources = map[string]httpResourceStatus{}
			for _, t := range append(syncTypes, TypeECDS) {
				if ts := st(t); ts.subscribed {
					s.Resources[t] = httpResourceStatus{Sent: ts.sent, Acked: ts.acked, LastError: ts.lastError}
				}
			}
			out = append(out, s)
		}
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
}
