package mesh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// realIstiod runs Istio's own istiod for one revision: a pilot-discovery
// process per istiod pod, listening on that pod's loopback address, and a
// service address (a stand-in for the istiod-<rev> Service's cluster IP,
// which the webhooks and the proxies use) that forwards to a live replica,
// as kube-proxy would.
type realIstiod struct {
	m         *Mesh
	rev       Revision
	serviceIP string
	service   *serviceProxy

	mu       sync.Mutex
	procs    map[string]*istiodProcess // by istiod pod name
	starting map[string]bool
	paused   bool
	envoys   map[string]*envoy // by pod namespace/name
	faults   []proxyFault
	next     int
	rr       int
	ackDelay time.Duration
}

var _ Istiod = (*realIstiod)(nil)

// Revision implements Istiod.
func (d *realIstiod) Revision() Revision { return d.rev }

// ServiceIP is where the revision's Service would route: the webhooks and
// the proxies connect there.
func (d *realIstiod) ServiceIP() string { return d.serviceIP }

// ReplicaAddrs implements Istiod: the IPs of the running processes.
func (d *realIstiod) ReplicaAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ips []string
	for _, p := range d.procs {
		ips = append(ips, p.ip)
	}
	sort.Strings(ips)
	return ips
}

// SetProxyStatus implements Istiod: the matching proxies make istiod
// itself report status. STALE: they stop ACKing typeURL. ERROR: they NACK
// it. NOT_SENT: they never subscribe to it, which istiod shows by leaving
// the type out. The proxies start a fresh stream so that it applies at once.
func (d *realIstiod) SetProxyStatus(namespace string, sel labels.Selector, typeURL string, status statusv3.ConfigStatus) (clear func()) {
	return d.addFault(proxyFault{namespace: namespace, selector: sel, typeURL: typeURL, status: status})
}

// Disconnect implements Istiod: the matching proxies close their streams
// and stay away until the returned function is called.
func (d *realIstiod) Disconnect(namespace string, sel labels.Selector) (clear func()) {
	return d.addFault(proxyFault{namespace: namespace, selector: sel, disconnect: true})
}

// SetSyncDelay implements Istiod: proxies wait this long before each ACK.
func (d *realIstiod) SetSyncDelay(delay time.Duration) {
	d.mu.Lock()
	d.ackDelay = delay
	d.mu.Unlock()
}

// SetUnreachable implements Istiod: it freezes (SIGSTOP) or thaws every
// istiod process of the revision. A frozen istiod accepts connections and
// answers nothing, and its readiness probe fails.
func (d *realIstiod) SetUnreachable(unreachable bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.paused = unreachable
	sig := syscall.SIGCONT
	if unreachable {
		sig = syscall.SIGSTOP
	}
	for _, p := range d.procs {
		if err := p.cmd.Process.Signal(sig); err != nil {
			return err
		}
	}
	return nil
}

// ConnectedProxies implements Istiod: the proxies holding a stream open to
// this revision, as ids pod.namespace.
func (d *realIstiod) ConnectedProxies() []string {
	d.mu.Lock()
	envoys := make([]*envoy, 0, len(d.envoys))
	for _, e := range d.envoys {
		envoys = append(envoys, e)
	}
	d.mu.Unlock()
	var ids []string
	for _, e := range envoys {
		if e.connected() {
			ids = append(ids, e.pod.Name+"."+e.pod.Namespace)
		}
	}
	sort.Strings(ids)
	return ids
}

func (d *realIstiod) addFault(f proxyFault) func() {
	d.mu.Lock()
	d.next++
	f.id = d.next
	d.faults = append(d.faults, f)
	d.mu.Unlock()
	d.refaultEnvoys(f)
	return func() {
		d.mu.Lock()
		for i := range d.faults {
			if d.faults[i].id == f.id {
				d.faults = append(d.faults[:i], d.faults[i+1:]...)
				break
			}
		}
		d.mu.Unlock()
		d.refaultEnvoys(f)
	}
}

// refaultEnvoys restarts the streams of the proxies a fault concerns.
func (d *realIstiod) refaultEnvoys(f proxyFault) {
	d.mu.Lock()
	var hit []*envoy
	for _, e := range d.envoys {
		if f.matchesPod(e.pod) {
			hit = append(hit, e)
		}
	}
	d.mu.Unlock()
	for _, e := range hit {
		e.restart()
	}
}

// behaviour is what the faults ask of one proxy now.
func (d *realIstiod) behaviour(pod *corev1.Pod) envoyBehaviour {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := envoyBehaviour{ackDelay: d.ackDelay, status: map[string]statusv3.ConfigStatus{}}
	for _, f := range d.faults {
		if !f.matchesPod(pod) {
			continue
		}
		if f.disconnect {
			b.disconnected = true
			continue
		}
		types := []string{f.typeURL}
		if f.typeURL == "" {
			types = []string{TypeCDS, TypeLDS, TypeEDS, TypeRDS}
		}
		for _, t := range types {
			b.status[t] = f.status
		}
	}
	return b
}

func (f proxyFault) matchesPod(pod *corev1.Pod) bool {
	return (f.namespace == "" || f.namespace == pod.Namespace) && (f.selector == nil || f.selector.Matches(labels.Set(pod.Labels)))
}

// observeIstiodPod starts the process of a running istiod pod, and stops
// the process of one that is gone.
func (d *realIstiod) observeIstiodPod(pod *corev1.Pod, deleted bool) {
	running := !deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.procs[pod.Name]
	if !running {
		if ok {
			delete(d.procs, pod.Name)
			go p.stop()
		}
		return
	}
	if ok || d.starting[pod.Name] {
		return
	}
	d.starting[pod.Name] = true
	pod = pod.DeepCopy()
	go func() {
		p, err := d.startProcess(pod)
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.starting, pod.Name)
		if err != nil {
			d.m.opts.Logf("istiod %s: %s: %v", d.rev.Name, pod.Name, err)
			return
		}
		if d.paused {
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		}
		d.procs[pod.Name] = p
	}()
}

// ready is the readiness probe of an istiod pod: its process answers
// GET /ready, as the chart's probe asks.
func (d *realIstiod) ready(pod *corev1.Pod) bool {
	d.mu.Lock()
	p, ok := d.procs[pod.Name]
	paused := d.paused
	d.mu.Unlock()
	if !ok || paused || p.ip != pod.Status.PodIP {
		return false
	}
	return p.ready(500 * time.Millisecond)
}

// observeProxyPod connects the simulated Envoy of an injected pod while it
// runs, and disconnects it when the pod goes.
func (d *realIstiod) observeProxyPod(pod *corev1.Pod, running bool) {
	key := pod.Namespace + "/" + pod.Name
	d.mu.Lock()
	e, ok := d.envoys[key]
	switch {
	case running && !ok:
		e = newEnvoy(d, pod)
		d.envoys[key] = e
		d.mu.Unlock()
		e.start()
		return
	case !running && ok:
		delete(d.envoys, key)
		d.mu.Unlock()
		e.stop()
		return
	}
	if ok {
		e.setPod(pod)
	}
	d.mu.Unlock()
}

func (d *realIstiod) stop() {
	d.mu.Lock()
	procs, envoys := d.procs, d.envoys
	d.procs, d.envoys = map[string]*istiodProcess{}, map[string]*envoy{}
	d.mu.Unlock()
	for _, e := range envoys {
		e.stop()
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()
	if d.service != nil {
		d.service.close()
	}
}

// istiodProcess is one pilot-discovery.
type istiodProcess struct {
	pod, ip string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// startProcess runs pilot-discovery for one istiod pod, on the pod's
// address, with the environment the chart's Deployment gives its discovery
// container, and returns once it answers /ready.
func (d *realIstiod) startProcess(pod *corev1.Pod) (*istiodProcess, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := d.m
	ip := pod.Status.PodIP
	dir := filepath.Join(m.dir, "istiod", pod.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ca := d.rev.CA
	if ca == nil {
		ca = m.opts.CA
	}
	if ca != nil {
		if err := ca.plugInto(dir); err != nil {
			return nil, err
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := m.serviceAccountKubeconfig(ctx, pod.Namespace, pod.Spec.ServiceAccountName, kubeconfig); err != nil {
		return nil, err
	}
	env, err := containerEnv(pod, "discovery")
	if err != nil {
		return nil, err
	}
	p := &istiodProcess{pod: pod.Name, ip: ip, exited: make(chan struct{}), logPath: filepath.Join(dir, "istiod.log")}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(m.istio.PilotDiscovery, "discovery",
		"--kubeconfig", kubeconfig,
		"--grpcAddr", net.JoinHostPort(ip, "15010"),
		"--secureGRPCAddr", net.JoinHostPort(ip, "15012"),
		"--httpsAddr", net.JoinHostPort(ip, "15017"),
		"--monitoringAddr", net.JoinHostPort(ip, "15014"),
		"--httpAddr", net.JoinHostPort(ip, "8080"),
		"--ctrlz_port", "0",
		"--domain", "cluster.local",
		"--keepaliveMaxServerConnectionAge", "30m",
		"--log_output_level", "default:warn",
	)
	// The working directory has no ./var/lib/istio/inject and no mesh file:
	// istiod reads its injection templates and mesh config from the
	// chart's ConfigMaps, as it does when they are not mounted.
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Env = append(p.cmd.Env,
		// What a pod has that this process has not: its API credentials
		// (the chart's KUBECONFIG names a remote-cluster secret that is not
		// mounted here), a serving certificate that names the addresses
		// it is reached at rather than the Service's DNS name only, and a
		// CPU limit.
		"KUBECONFIG="+kubeconfig,
		"ISTIOD_CUSTOM_HOST="+ip+","+d.serviceIP,
		"GOMAXPROCS=2",
	)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Never outlive the test process.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start pilot-discovery: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	started := time.Now()
	for {
		if p.ready(time.Second) {
			m.opts.Logf("istiod %s: %s ready in %s", d.rev.Name, pod.Name, time.Since(started).Round(time.Millisecond))
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("pilot-discovery exited before it was ready: %s", p.logTail())
		case <-ctx.Done():
			p.stop()
			return nil, fmt.Errorf("pilot-discovery not ready after 90s: %s", p.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// containerEnv is the environment a kubelet gives a container: its values,
// and the pod fields they refer to. Resource references are left out.
func containerEnv(pod *corev1.Pod, container string) ([]string, error) {
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		var env []string
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			case e.ValueFrom.FieldRef != nil:
				var v string
				switch e.ValueFrom.FieldRef.FieldPath {
				case "metadata.name":
					v = pod.Name
				case "metadata.namespace":
					v = pod.Namespace
				case "spec.serviceAccountName":
					v = pod.Spec.ServiceAccountName
				default:
					return nil, fmt.Errorf("pod %s: env %s refers to %s, which the world does not resolve", pod.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
				}
				env = append(env, e.Name+"="+v)
			}
		}
		return env, nil
	}
	return nil, fmt.Errorf("pod %s has no %s container", pod.Name, container)
}

func (p *istiodProcess) ready(timeout time.Duration) bool {
	client := http.Client{Timeout: timeout}
	resp, err := client.Get("http://" + net.JoinHostPort(p.ip, "8080") + "/ready")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop ends the process: SIGTERM, then SIGKILL after five seconds. A
// frozen process is thawed first, or it would never see the SIGTERM.
func (p *istiodProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *istiodProcess) logTail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as a
// service account with a token from the TokenRequest API, as a pod's
// projected token does.
func (m *Mesh) serviceAccountKubeconfig(ctx context.Context, namespace, sa, path string) error {
	if m.opts.Config == nil {
		return errors.New("the mesh needs the cluster's rest.Config to run istiod")
	}
	tr, err := m.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, sa, err)
	}
	return writeTokenKubeconfig(m.opts.Config, tr.Status.Token, path)
}

func writeTokenKubeconfig(cfg *rest.Config, token, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["world"] = &clientcmdapi.Cluster{
		Server: cfg.Host, CertificateAuthorityData: cfg.TLSClientConfig.CAData,
		TLSServerName: cfg.TLSClientConfig.ServerName, InsecureSkipTLSVerify: cfg.TLSClientConfig.Insecure,
	}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["world"] = &clientcmdapi.Context{Cluster: "world", AuthInfo: "sa"}
	kc.CurrentContext = "world"
	return clientcmd.WriteToFile(*kc, path)
}

// serviceProxy forwards a revision's service address to a live replica,
// on each of istiod's ports, as kube-proxy routes a Service's cluster IP.
type serviceProxy struct {
	listeners []net.Listener
	pick      func() string
	wg        sync.WaitGroup
}

func startServiceProxy(ip string, ports []int, pick func() string) (*serviceProxy, error) {
	s := &serviceProxy{pick: pick}
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
		if err != nil {
			s.close()
			return nil, err
		}
		s.listeners = append(s.listeners, l)
		s.wg.Add(1)
		go s.serve(l, port)
	}
	return s, nil
}

func (s *serviceProxy) serve(l net.Listener, port int) {
	defer s.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			ip := s.pick()
			if ip == "" {
				return
			}
			up, err := net.DialTimeout("tcp", net.JoinHostPort(ip, fmt.Sprint(port)), 2*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

func (s *serviceProxy) close() {
	for _, l := range s.listeners {
		_ = l.Close()
	}
	s.wg.Wait()
}

// pickReplica returns a live replica's IP, spreading connections.
func (d *realIstiod) pickReplica() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.procs))
	for n := range d.procs {
		names = append(names, n)
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	d.rr++
	return d.procs[names[d.rr%len(names)]].ip
}

// installRealRevision installs a revision from Istio's own chart, rendered
// for it: ServiceAccount, RBAC, ConfigMaps, Service, webhooks and the
// istiod Deployment, whose pods the fake kubelet runs and this mesh serves
// with pilot-discovery. It returns when every replica is Ready.
func (m *Mesh) installRealRevision(ctx context.Context, rev Revision) error {
	ip, err := m.allocateIP()
	if err != nil {
		return err
	}
	d := &realIstiod{m: m, rev: rev, serviceIP: ip, procs: map[string]*istiodProcess{}, starting: map[string]bool{}, envoys: map[string]*envoy{}}
	if d.service, err = startServiceProxy(ip, []int{15010, 15012, 15017}, d.pickReplica); err != nil {
		return fmt.Errorf("istiod-%s service address: %w", rev.Name, err)
	}
	m.mu.Lock()
	m.istiods[rev.Name] = d
	m.mu.Unlock()
	root := m.opts.RootNamespace
	sel := labels.SelectorFromSet(map[string]string{"app": "istiod", LabelRev: rev.Name})
	m.opts.IPs.AssignIPs(root, sel, m.allocateIP)
	m.opts.IPs.Probe(root, sel, d.ready)

	objs, err := renderIstioChart(ctx, *m.istio, chartValues{Revision: rev.Name, RootNamespace: root, ServiceIP: ip, Replicas: rev.Replicas, Policy: rev.InjectionPolicy, Env: rev.Env, Tag: rev.ImageTag})
	if err != nil {
		return err
	}
	if err := m.apply.apply(ctx, objs); err != nil {
		return fmt.Errorf("install revision %s: %w", rev.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if len(d.ReplicaAddrs()) != rev.Replicas {
			return false, nil
		}
		pods, err := m.client.CoreV1().Pods(root).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == rev.Replicas, nil
	})
	if err != nil {
		return fmt.Errorf("istiod %s did not become ready: %w", rev.Name, err)
	}
	if rev.Default {
		return m.setRealTag(ctx, "default", rev.Name, rev.Name)
	}
	return nil
}

// setRealTag renders the chart's revision-tag objects for tag pointing at
// rev, as `istioctl tag set` installs them. A broken tag (injectRev other
// than rev) keeps rev in its labels but calls injectRev's istiod.
func (m *Mesh) setRealTag(ctx context.Context, tag, rev, injectRev string) error {
	target, ok := m.Istiod(rev).(*realIstiod)
	inject, ok2 := m.Istiod(injectRev).(*realIstiod)
	if !ok || !ok2 {
		return fmt.Errorf("tag %s: revision %s or %s is not installed", tag, rev, injectRev)
	}
	objs, err := renderIstioChart(ctx, *m.istio, chartValues{Revision: rev, RootNamespace: m.opts.RootNamespace, ServiceIP: target.serviceIP, Tags: []string{tag}},
		"templates/revision-tags-mwc.yaml", "templates/revision-tags-svc.yaml")
	if err != nil {
		return err
	}
	if injectRev != rev {
		from, to := "https://"+target.serviceIP+":", "https://"+inject.serviceIP+":"
		for _, o := range objs {
			if o.GetKind() != "MutatingWebhookConfiguration" {
				continue
			}
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				hm := h.(map[string]any)
				if url, ok, _ := unstructured.NestedString(hm, "clientConfig", "url"); ok {
					_ = unstructured.SetNestedField(hm, strings.Replace(url, from, to, 1), "clientConfig", "url")
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
		}
	}
	if err := m.apply.apply(ctx, objs); err != nil {
		return fmt.Errorf("tag %s: %w", tag, err)
	}
	m.mu.Lock()
	m.tags[tag] = rev
	m.mu.Unlock()
	return nil
}
