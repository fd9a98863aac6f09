package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/e2e/cluster"
)

// Injection policies of a revision's injector.
const (
	PolicyEnabled  = "enabled"
	PolicyDisabled = "disabled"
)

// Revision is one Istio control-plane revision.
type Revision struct {
	// Name is the revision, e.g. "1-26".
	Name string
	// Version is the Istio version it runs; by default derived from Name
	// ("1-26" runs 1.26.0).
	Version string
	// ImageTag is the tag Istio's chart renders the real istiod's and the
	// injected proxy's images with (global.tag), which the proxy reports as
	// its ISTIO_VERSION; default the built istiod's own version
	// (.istio-version, e.g. 1.31-dev).
	ImageTag string
	// Replicas is the number of istiod pods; default 1.
	Replicas int
	// InjectionPolicy is "enabled" (default) or "disabled", under which only
	// pods asking with sidecar.istio.io/inject: "true" are injected.
	InjectionPolicy string
	// Default also installs the istio-injection=enabled webhooks (the
	// real istiod's "default" revision tag).
	Default bool
	// CA is the root CA plugged into this revision's istiods; nil takes
	// the mesh's (Options.CA), and with neither istiod makes its own.
	CA *PluggedCA
	// Env is extra environment for istiod, for example
	// XDS_AUTH_PLAINTEXT=true, without which istiod answers no debug
	// request on its plaintext port, or DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES.
	// It goes through Istio's chart (its env values, as --set
	// pilot.env.NAME=VALUE), so the istiod Deployment carries it.
	Env map[string]string
}

// PodIPAssigner lets the mesh choose the IPs of its istiod pods and probe
// their readiness. The fake kubelet implements it.
type PodIPAssigner interface {
	AssignIPs(namespace string, sel labels.Selector, next func() (string, error))
	Probe(namespace string, sel labels.Selector, ready func(*corev1.Pod) bool)
}

// Options configure the mesh.
type Options struct {
	Client kubernetes.Interface
	// Config is the cluster's administrator configuration; the real istiod
	// needs it for the apiserver's address and certificate.
	Config *rest.Config
	IPs    PodIPAssigner
	// Istio runs Istio's real istiod and injector from these artifacts;
	// nil runs the simulator instead.
	Istio *IstioArtifacts
	// Dir holds the istiod processes' files; empty means a temporary
	// directory, removed on Stop.
	Dir string
	// Revisions to install.
	Revisions []Revision
	// Tags maps revision tags to the revision they point at.
	Tags map[string]string
	// CA is the root CA plugged into every revision's istiods, as the
	// clusters of one multi-primary mesh share theirs; nil lets istiod
	// make its own. Only the real istiod uses it.
	CA *PluggedCA
	// RootNamespace is where istiod runs; default istio-system.
	RootNamespace string
	// MeshV1 installs the Mesh v1 pod webhook.
	MeshV1 bool
	// RequestRate is the default requests per second per workload; default 20.
	RequestRate float64
	// Ports override istiod's ports.
	Ports Ports
	// Logf receives diagnostics; nil discards them.
	Logf func(string, ...any)
}

// Istiod is the istiod of one revision, real or simulated, with the faults
// scenarios stage on it.
type Istiod interface {
	// Revision is the revision it serves.
	Revision() Revision
	// ReplicaAddrs returns the IPs of the serving replicas, sorted.
	ReplicaAddrs() []string
	// SetProxyStatus makes the matching proxies report status on typeURL
	// (every type a sidecar subscribes to when empty). It returns a function
	// that lifts the fault.
	SetProxyStatus(namespace string, sel labels.Selector, typeURL string, status statusv3.ConfigStatus) (clear func())
	// Disconnect drops the matching proxies' streams until the returned
	// function is called.
	Disconnect(namespace string, sel labels.Selector) (clear func())
	// SetSyncDelay delays the proxies' acknowledgements by d.
	SetSyncDelay(d time.Duration)
	// SetUnreachable makes every replica stop (true) or resume (false)
	// answering.
	SetUnreachable(bool) error
	// ConnectedProxies returns the ids (pod.namespace) of the connected
	// proxies, sorted.
	ConnectedProxies() []string
}

// Mesh is the running mesh.
type Mesh struct {
	opts     Options
	client   kubernetes.Interface
	istio    *IstioArtifacts
	dir      string
	ownDir   bool
	apply    *applier
	host     string // loopback address for the webhook and exporter
	netPref  string // 127.a.b. prefix for istiod replicas
	injector *injector
	meshV1   *MeshV1
	traffic  *Traffic
	auth     *tokenAuthenticator
	cert     *servingCert
	factory  informers.SharedInformerFactory
	cancel   context.CancelFunc

	mu       sync.Mutex
	istiods  map[string]Istiod
	ztunnels map[string]*Ztunnel // by pod name
	// ztunnelsStopped is set once Stop began: no ztunnel starts after.
	ztunnelsStopped bool
	tags            map[string]string // tag -> revision, for the real chart's renders
	nextIP          int
}

// Start installs the mesh into the cluster behind opts.Client and returns
// when every istiod replica is serving.
func Start(ctx context.Context, opts Options) (_ *Mesh, err error) {
	if opts.RootNamespace == "" {
		opts.RootNamespace = "istio-system"
	}
	if opts.RequestRate == 0 {
		opts.RequestRate = 20
	}
	if opts.Ports == (Ports{}) {
		opts.Ports = DefaultPorts
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	// A /24 of its own inside 127.0.0.0/8, so that worlds in concurrent
	// test processes never collide on istiod's fixed ports.
	prefix := fmt.Sprintf("127.%d.%d.", 1+rand.IntN(250), rand.IntN(250))
	m := &Mesh{
		opts: opts, client: opts.Client, host: prefix + "1", netPref: prefix,
		meshV1: newMeshV1(), auth: newTokenAuthenticator(opts.Client),
		istiods: map[string]Istiod{}, tags: map[string]string{}, nextIP: 10,
		istio: opts.Istio, dir: opts.Dir,
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	defer func() {
		if err != nil {
			m.Stop()
		}
	}()

	if m.istio != nil {
		if m.dir == "" {
			if m.dir, err = os.MkdirTemp("", "meshwave-istio-"); err != nil {
				return nil, err
			}
			m.ownDir = true
		}
		if m.apply, err = newApplier(opts.Config); err != nil {
			return nil, err
		}
	}
	m.cert, err = newServingCert(net.ParseIP(prefix + "0"))
	if err != nil {
		return nil, err
	}
	if m.injector, err = startInjector(m.client, m.host, m.meshV1); err != nil {
		return nil, err
	}

	m.factory = informers.NewSharedInformerFactoryWithOptions(m.client, 0, informers.WithTransform(func(obj any) (any, error) {
		return keepPod(obj, opts.RootNamespace)
	}))
	pods := m.factory.Core().V1().Pods()
	namespaces := m.factory.Core().V1().Namespaces()
	namespaces.Informer() // started with the factory: the exporter reads each namespace's waypoint
	m.traffic = newTraffic(pods.Lister(), opts.RequestRate)
	m.traffic.namespaces, m.traffic.root = namespaces.Lister(), opts.RootNamespace
	if err := m.traffic.start(m.host); err != nil {
		return nil, err
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.observePod(obj, false) },
		UpdateFunc: func(_, obj any) { m.observePod(obj, false) },
		DeleteFunc: func(obj any) { m.observePod(obj, true) },
	}); err != nil {
		return nil, err
	}
	m.factory.Start(runCtx.Done())
	m.factory.WaitForCacheSync(runCtx.Done())

	if err := m.ensureNamespace(ctx, opts.RootNamespace, nil); err != nil {
		return nil, err
	}
	if opts.MeshV1 {
		if err := m.meshV1.register(ctx, m.client, m.injector.url, m.injector.caBundle); err != nil {
			return nil, err
		}
	}
	if m.istio == nil {
		for _, rev := range opts.Revisions {
			if err := m.InstallRevision(ctx, rev); err != nil {
				return nil, err
			}
		}
	} else if err := m.installReal(ctx, opts.Revisions); err != nil {
		return nil, err
	}
	for tag, rev := range opts.Tags {
		if err := m.SetTag(ctx, tag, rev); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// installReal installs Istio's CRDs and the revisions at once: each
// istiod takes seconds to start, and the apiserver as long to establish
// the CRDs, which istiod picks up whenever they appear. Concurrent istiods
// agree on one CA, as they do in a cluster: the one that loses the race to
// create istio-ca-secret reads it.
func (m *Mesh) installReal(ctx context.Context, revs []Revision) error {
	crds, err := istioCRDs(*m.istio)
	if err != nil {
		return err
	}
	errs := make([]error, len(revs)+1)
	var wg sync.WaitGroup
	wg.Add(len(revs) + 1)
	go func() {
		defer wg.Done()
		if err := m.apply.apply(ctx, crds); err != nil {
			errs[0] = fmt.Errorf("Istio's CRDs: %w", err)
		}
	}()
	for i, rev := range revs {
		go func() {
			defer wg.Done()
			errs[i+1] = m.InstallRevision(ctx, rev)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops every server of the mesh. Its objects stay in the cluster.
func (m *Mesh) Stop() {
	if m.cancel != nil {
		m.cancel()
	}
	m.stopZtunnels()
	m.mu.Lock()
	istiods := m.istiods
	m.istiods = map[string]Istiod{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range istiods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.(interface{ stop() }).stop()
		}()
	}
	wg.Wait()
	if m.injector != nil {
		m.injector.stop()
	}
	if m.traffic != nil && m.traffic.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.traffic.stop(ctx)
		cancel()
	}
	if m.factory != nil {
		m.factory.Shutdown()
	}
	if m.ownDir {
		_ = os.RemoveAll(m.dir)
	}
}

// Real reports whether the mesh runs Istio's real istiod.
func (m *Mesh) Real() bool { return m.istio != nil }

// Istiod returns the istiod of a revision, or nil.
func (m *Mesh) Istiod(rev string) Istiod {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.istiods[rev]
}

// SimIstiod returns the simulated istiod of a revision, or nil when the
// revision runs the real one.
func (m *Mesh) SimIstiod(rev string) *SimIstiod {
	d, _ := m.Istiod(rev).(*SimIstiod)
	return d
}

// Traffic returns the request-metrics exporter.
func (m *Mesh) Traffic() *Traffic { return m.traffic }

// MeshV1 returns the Mesh v1 webhook, to register MicroServices with.
func (m *Mesh) MeshV1() *MeshV1 { return m.meshV1 }

// RootNamespace is the namespace istiod runs in.
func (m *Mesh) RootNamespace() string { return m.opts.RootNamespace }

// Ports are istiod's ports on each replica IP.
func (m *Mesh) Ports() Ports { return m.opts.Ports }

// InstallRevision installs a revision: its injector webhook configuration,
// its istiod Deployment and Service, and the servers behind its pods. It
// returns when every replica serves.
func (m *Mesh) InstallRevision(ctx context.Context, rev Revision) error {
	if rev.Version == "" {
		rev.Version = strings.ReplaceAll(rev.Name, "-", ".") + ".0"
	}
	if rev.Replicas <= 0 {
		rev.Replicas = 1
	}
	if rev.InjectionPolicy == "" {
		rev.InjectionPolicy = PolicyEnabled
	}
	if m.istio != nil {
		return m.installRealRevision(ctx, rev)
	}
	d := newIstiod(rev, m.opts.RootNamespace, m.opts.Ports, m.auth, m.cert, m.opts.Logf)
	m.mu.Lock()
	m.istiods[rev.Name] = d
	m.mu.Unlock()

	podLabels := map[string]string{"app": "istiod", LabelRev: rev.Name, "istio": "pilot", KeyInject: "false"}
	m.opts.IPs.AssignIPs(m.opts.RootNamespace, labels.SelectorFromSet(map[string]string{"app": "istiod", LabelRev: rev.Name}), m.allocateIP)
	if err := m.injector.register(ctx, rev); err != nil {
		return err
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-" + rev.Name, Namespace: m.opts.RootNamespace, Labels: map[string]string{"app": "istiod", LabelRev: rev.Name, "istio": "pilot"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(rev.Replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod", LabelRev: rev.Name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "discovery", Image: "docker.io/istio/pilot:" + rev.Version,
					Ports: []corev1.ContainerPort{
						{Name: "grpc-xds", ContainerPort: int32(m.opts.Ports.GRPCPlain)},
						{Name: "tls-xds", ContainerPort: int32(m.opts.Ports.GRPCTLS)},
						{Name: "http-monitoring", ContainerPort: int32(m.opts.Ports.HTTP)},
						{Name: "https-webhooks", ContainerPort: 15017},
					},
				}}},
			},
		},
	}
	if _, err := m.client.AppsV1().Deployments(m.opts.RootNamespace).Create(ctx, deploy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create istiod-%s: %w", rev.Name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-" + rev.Name, Namespace: m.opts.RootNamespace, Labels: map[string]string{"app": "istiod", LabelRev: rev.Name}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "istiod", LabelRev: rev.Name},
			Ports: []corev1.ServicePort{
				{Name: "grpc-xds", Port: int32(m.opts.Ports.GRPCPlain)},
				{Name: "https-dns", Port: int32(m.opts.Ports.GRPCTLS)},
				{Name: "http-monitoring", Port: int32(m.opts.Ports.HTTP)},
			},
		},
	}
	if _, err := m.client.CoreV1().Services(m.opts.RootNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service istiod-%s: %w", rev.Name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(d.ReplicaAddrs()) == rev.Replicas, nil
	})
}

// SetTag points revision tag at rev, creating or moving it.
func (m *Mesh) SetTag(ctx context.Context, tag, rev string) error {
	if m.istio != nil {
		return m.setRealTag(ctx, tag, rev, rev)
	}
	return m.setTag(ctx, tag, rev, rev)
}

// MisrouteTag stages a broken tag: its configuration says it points at rev,
// but its webhooks call the injector of injectRev, as a tag repointed by
// hand half-way would. Pods it injects carry injectRev in their status.
func (m *Mesh) MisrouteTag(ctx context.Context, tag, rev, injectRev string) error {
	if m.istio != nil {
		return m.setRealTag(ctx, tag, rev, injectRev)
	}
	return m.setTag(ctx, tag, rev, injectRev)
}

func (m *Mesh) setTag(ctx context.Context, tag, rev, injectRev string) error {
	if err := m.injector.registerTag(ctx, tag, rev, injectRev); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-revision-tag-" + tag, Namespace: m.opts.RootNamespace, Labels: map[string]string{LabelTag: tag, LabelRev: rev}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "istiod", LabelRev: rev},
			Ports:    []corev1.ServicePort{{Name: "grpc-xds", Port: int32(m.opts.Ports.GRPCPlain)}},
		},
	}
	_, err := m.client.CoreV1().Services(m.opts.RootNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := m.client.CoreV1().Services(m.opts.RootNamespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		old.Labels, old.Spec.Selector = svc.Labels, svc.Spec.Selector
		_, err = m.client.CoreV1().Services(m.opts.RootNamespace).Update(ctx, old, metav1.UpdateOptions{})
	}
	return err
}

func (m *Mesh) allocateIP() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nextIP > 254 {
		return "", fmt.Errorf("no loopback addresses left in %s0/24", m.netPref)
	}
	ip := fmt.Sprintf("%s%d", m.netPref, m.nextIP)
	m.nextIP++
	return ip, nil
}

func (m *Mesh) ensureNamespace(ctx context.Context, name string, lbls map[string]string) error {
	_, err := m.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// observePod routes a pod event to the istiod it concerns: istiod's own
// pods start and stop replicas, injected pods connect and disconnect.
func (m *Mesh) observePod(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	m.mu.Lock()
	istiods := make(map[string]podObserver, len(m.istiods))
	for k, v := range m.istiods {
		istiods[k] = v.(podObserver)
	}
	m.mu.Unlock()

	if pod.Namespace == m.opts.RootNamespace && pod.Labels["app"] == "ztunnel" {
		go m.observeZtunnelPod(pod, deleted)
		return
	}
	if pod.Namespace == m.opts.RootNamespace && pod.Labels["app"] == "istiod" {
		if d := istiods[pod.Labels[LabelRev]]; d != nil {
			d.observeIstiodPod(pod, deleted)
		}
		return
	}
	running := !deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	var rev string
	if wrev, ok := waypointRevision(pod); ok {
		// A waypoint istiod deployed: its istio-proxy connects to the
		// revision its pod is annotated with, as a waypoint node.
		rev = wrev
	} else {
		st, injected := ParseSidecarStatus(pod)
		if !injected {
			return
		}
		rev = st.Revision
		if m.istio != nil {
			rev = m.discoveryRevision(pod, rev)
		}
	}
	for name, d := range istiods {
		d.observeProxyPod(pod, running && name == rev)
	}
}

// keepPod is the transform of the mesh's informers. A workload's pod with
// no IP yet, or none ever (the idle pods benchmarks load), is kept as the
// little the mesh reads of one until it has one: its metadata (the
// sidecar's status, the workload it belongs to), its node, phase and
// conditions; a world loaded with 100,000 pods holds them in the
// apiserver's cache and the controllers' informers already. The pods of
// the root namespace (istiods, ztunnels) stay whole; no pod keeps its
// managed fields.
func keepPod(obj any, root string) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return cluster.StripManagedFields(obj)
	}
	pod.ManagedFields = nil
	if pod.Status.PodIP != "" || pod.Namespace == root {
		return pod, nil
	}
	return &corev1.Pod{
		ObjectMeta: pod.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase, Conditions: pod.Status.Conditions},
	}, nil
}

// discoveryRevision is the revision whose istiod a proxy connects to: the
// one its discoveryAddress names (istiod-<rev>.<root>.svc, or istiod.<root>.svc
// for the default revision), as istio-proxy reads it from the PROXY_CONFIG
// the injector wrote from the mesh config and the pod's
// proxy.istio.io/config annotation; by default the revision that injected it.
func (m *Mesh) discoveryRevision(pod *corev1.Pod, injectedBy string) string {
	var raw string
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name != ProxyContainer {
			continue
		}
		for _, e := range c.Env {
			if e.Name == "PROXY_CONFIG" {
				raw = e.Value
			}
		}
	}
	var pc struct {
		DiscoveryAddress string `json:"discoveryAddress"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &pc) != nil || pc.DiscoveryAddress == "" {
		return injectedBy
	}
	host, _, err := net.SplitHostPort(pc.DiscoveryAddress)
	if err != nil {
		return injectedBy
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, d := range m.istiods {
		switch host {
		case "istiod-" + name + "." + m.opts.RootNamespace + ".svc":
			return name
		case "istiod." + m.opts.RootNamespace + ".svc":
			if d.Revision().Default {
				return name
			}
		}
	}
	return injectedBy
}

// podObserver is what both istiods do with pod events.
type podObserver interface {
	observeIstiodPod(pod *corev1.Pod, deleted bool)
	observeProxyPod(pod *corev1.Pod, connected bool)
}
