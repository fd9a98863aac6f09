package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
)

// write is one write an agent sent that reached the apiserver.
type write struct {
	// at is when the request left the agent: what a replica sends while it
	// holds the lease was decided under it, however long the apiserver
	// takes to answer on a loaded machine (and a write fenced by a
	// resourceVersion that a later leader moved past is refused).
	at     time.Time
	agent  string
	verb   string
	object string // "deployments ns/name", "namespaces ns", "leases ns/name"
	code   int
}

// writeLog attributes every write to the agent that sent it.
type writeLog struct {
	mu     sync.Mutex
	writes []write
}

func (l *writeLog) add(w write) {
	l.mu.Lock()
	l.writes = append(l.writes, w)
	l.mu.Unlock()
}

// matching returns the writes whose object starts with prefix and that
// the apiserver accepted.
func (l *writeLog) matching(prefix string) []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []write
	for _, w := range l.writes {
		if strings.HasPrefix(w.object, prefix) && w.code < 300 {
			out = append(out, w)
		}
	}
	return out
}

// patches counts the accepted PATCHes per object under prefix.
func (l *writeLog) patches(prefix string) map[string]int {
	out := map[string]int{}
	for _, w := range l.matching(prefix) {
		if w.verb == http.MethodPatch {
			out[w.object]++
		}
	}
	return out
}

// link is one agent's connection to the apiserver. It records the agent's
// writes, and can cut it off: dead fails every request, as when the
// process is gone; cutLease fails only its lease requests, as a leader
// partitioned from its lease.
type link struct {
	name     string
	log      *writeLog
	next     http.RoundTripper
	dead     atomic.Bool
	cutLease atomic.Bool
	// afterWrite sees each accepted write, before the agent sees its answer.
	afterWrite func(write)
	// intercept, when it returns an answer, answers a request in the
	// apiserver's place: a fault injected on the wire.
	intercept func(req *http.Request, object string) *http.Response
}

var errCrashed = errors.New("dial tcp: connection refused (the agent is gone)")

func (l *link) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.dead.Load() {
		return nil, errCrashed
	}
	obj := objectOf(req.URL.Path)
	if l.cutLease.Load() && strings.HasPrefix(obj, "leases ") {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("lease unreachable")}
	}
	var resp *http.Response
	var err error
	sent := time.Now()
	if l.intercept != nil {
		resp = l.intercept(req, obj)
	}
	if resp == nil {
		resp, err = l.next.RoundTrip(req)
	} else {
		resp.Request = req
	}
	if err != nil || req.Method == http.MethodGet {
		return resp, err
	}
	w := write{at: sent, agent: l.name, verb: req.Method, object: obj, code: resp.StatusCode}
	l.log.add(w)
	if l.afterWrite != nil && w.code < 300 {
		l.afterWrite(w)
	}
	return resp, err
}

// replica is an agent running in this process as one replica of the
// Deployment would: its own client (through its link), metrics registry
// and /metrics, /healthz and /readyz server.
type replica struct {
	name    string
	link    *link
	addr    string
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once

	mu       sync.Mutex
	ctrl     *agent.Controller
	restarts int
}

// replicaOption adjusts a replica before it starts.
type replicaOption func(*replicaSetup)

type replicaSetup struct {
	link    *link
	reg     *prometheus.Registry
	restart bool
}

// restartedOnLostLease restarts the replica, as the kubelet restarts the
// agent's container, when it exits because it lost its lease.
func restartedOnLostLease() replicaOption {
	return func(s *replicaSetup) { s.restart = true }
}

// withLink adjusts the replica's link (its faults and hooks).
func withLink(adjust func(*link)) replicaOption {
	return func(s *replicaSetup) { adjust(s.link) }
}

// withRegistry gives the replica a registry of the caller's.
func withRegistry(reg *prometheus.Registry) replicaOption {
	return func(s *replicaSetup) { s.reg = reg }
}

func startReplica(t testing.TB, f *fixture.Fixture, cfg agent.Config, name string, log *writeLog, opts ...replicaOption) *replica {
	t.Helper()
	l := &link{name: name, log: log}
	setup := replicaSetup{link: l, reg: prometheus.NewRegistry()}
	for _, o := range opts {
		o(&setup)
	}
	rc := rest.CopyConfig(f.World.Cluster.Config)
	rc.UserAgent = "meshwave/" + name
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { l.next = rt; return l })
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	incarnation := func(reg *prometheus.Registry) (*agent.Controller, http.Handler) {
		ctrl, err := agent.New(agent.Options{Client: client, Config: cfg, Identity: name, Registerer: reg})
		require.NoError(t, err)
		return ctrl, ctrl.Handler(reg)
	}
	ctrl, handler := incarnation(setup.reg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &replica{name: name, link: l, ctrl: ctrl, addr: lis.Addr().String(), done: make(chan error, 1)}
	r.handler.Store(&handler)
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		(*r.handler.Load()).ServeHTTP(w, req)
	})}
	go func() { _ = r.srv.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	logger := funcr.New(func(prefix, args string) {
		if os.Getenv("MESHWAVE_E2E_AGENT_LOG") != "" {
			t.Logf("agent %s: %s %s", name, prefix, args)
		}
	}, funcr.Options{Verbosity: 2})
	go func() {
		for {
			err := r.controller().Run(klog.NewContext(ctx, logger))
			if !setup.restart || !errors.Is(err, agent.ErrLostLease) || ctx.Err() != nil {
				r.done <- err
				return
			}
			// The container exits and the kubelet starts a new one: new
			// caches, new metrics.
			r.controller().Shutdown()
			ctrl, handler := incarnation(prometheus.NewRegistry())
			r.mu.Lock()
			r.ctrl, r.restarts = ctrl, r.restarts+1
			r.mu.Unlock()
			r.handler.Store(&handler)
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) controller() *agent.Controller {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctrl
}

// crash stops the replica as a killed process would: from now on none of
// its requests reaches the apiserver, so it releases nothing (not even its
// lease), and its goroutines are stopped.
func (r *replica) crash() {
	r.link.dead.Store(true)
	r.stop()
}

func (r *replica) stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		r.controller().Shutdown()
		_ = r.srv.Close()
	})
}

// get fetches one of the replica's endpoints.
func (r *replica) get(path string) (int, string, error) {
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(resp))
	return resp.StatusCode, b.String(), nil
}

func readAll(resp *http.Response) string {
	buf := new(strings.Builder)
	tmp := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(tmp)
		buf.Write(tmp[:n])
		if err != nil {
			return buf.String()
		}
	}
}

// tenure is a span of time during which one identity held the lease, as
// the apiserver's Lease object shows it.
type tenure struct {
	holder      string
	from, until time.Time // until is zero while it still holds it
}

// leaseWatch records who holds the agent's Lease over time.
type leaseWatch struct {
	mu      sync.Mutex
	tenures []tenure
	stop    func()
}

func watchLease(t testing.TB, f *fixture.Fixture, ns, name string) *leaseWatch {
	t.Helper()
	w, err := f.Client.CoordinationV1().Leases(ns).Watch(f.Ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	require.NoError(t, err)
	lw := &leaseWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			lease, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || ev.Type == watch.Error {
				continue
			}
			holder := ""
			if lease.Spec.HolderIdentity != nil {
				holder = *lease.Spec.HolderIdentity
			}
			// A new holder's tenure starts when it wrote the Lease,
			// not when this watch heard of it: under load the holder's
			// first write can come before the watch's event.
			at := time.Now()
			if lease.Spec.AcquireTime != nil && holder != "" {
				at = lease.Spec.AcquireTime.Time
			}
			lw.observe(holder, at)
		}
	}()
	t.Cleanup(w.Stop)
	return lw
}

func (lw *leaseWatch) observe(holder string, at time.Time) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	n := len(lw.tenures)
	if n > 0 && lw.tenures[n-1].holder == holder {
		return
	}
	if n > 0 {
		lw.tenures[n-1].until = at
	}
	if holder != "" {
		lw.tenures = append(lw.tenures, tenure{holder: holder, from: at})
	}
}

func (lw *leaseWatch) snapshot() []tenure {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return append([]tenure(nil), lw.tenures...)
}

// heldBy reports whether agent held the lease at time at, give or take
// slack for the watch's delivery.
func heldBy(tenures []tenure, agentName string, at time.Time, slack time.Duration) bool {
	for _, tn := range tenures {
		if tn.holder != agentName {
			continue
		}
		if !at.Before(tn.from.Add(-slack)) && (tn.until.IsZero() || !at.After(tn.until.Add(slack))) {
			return true
		}
	}
	return false
}

// labelWatch records every version of a namespace that lacked its
// istio.io/rev label.
type labelWatch struct {
	mu      sync.Mutex
	missing []string
}

func watchLabel(t *testing.T, f *fixture.Fixture, ns string) *labelWatch {
	t.Helper()
	w, err := f.Client.CoreV1().Namespaces().Watch(f.Ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", ns).String()})
	require.NoError(t, err)
	lw := &labelWatch{}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Namespace)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if n.Labels[canary.LabelRev] == "" {
				lw.mu.Lock()
				lw.missing = append(lw.missing, n.ResourceVersion)
				lw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return lw
}

func (lw *labelWatch) versionsWithoutLabel() []string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return append([]string(nil), lw.missing...)
}

// atomicMap counts per key under a lock.
type atomicMap struct{ mu sync.Mutex }

func (a *atomicMap) inc(m map[string]int, key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m[key]++
	return m[key]
}

func sortedObjects(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
