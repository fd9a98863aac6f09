// Package harness runs the agent against the local world as scenarios and
// benchmarks do: a client whose every request is counted, the agent's
// configuration for the world, and an agent replica in this process.
package harness

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/e2e/fixture"
)

// Counter counts the requests a client sends, by verb and object:
// "PATCH deployments shop/cart", "LIST pods shop", "WATCH deployments".
// Reads are counted apart from writes.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewCounter returns an empty counter.
func NewCounter() *Counter { return &Counter{counts: map[string]int{}} }

// Wrap counts every request that goes through rt.
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{c: c, next: rt}
}

type countingTransport struct {
	c    *Counter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.c.mu.Lock()
	t.c.counts[Verb(req)+" "+ObjectOf(req.URL.Path)]++
	t.c.mu.Unlock()
	return t.next.RoundTrip(req)
}

// Verb is the request's verb as the apiserver's audit log names it: a GET
// of a collection is a LIST, or a WATCH with ?watch=true.
func Verb(req *http.Request) string {
	if req.Method != http.MethodGet {
		return req.Method
	}
	switch {
	case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
		return "WATCH"
	case isCollection(req.URL.Path):
		return "LIST"
	}
	return "GET"
}

// isCollection reports whether path names a collection: /api/v1/pods,
// /apis/apps/v1/namespaces/shop/deployments, /api/v1/namespaces.
func isCollection(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	n := 2 // api/v1
	if len(parts) > 0 && parts[0] == "apis" {
		n = 3 // apis/group/version
	}
	rest := parts[min(n, len(parts)):]
	if len(rest) >= 2 && rest[0] == "namespaces" {
		if len(rest) == 2 {
			return false // a namespace
		}
		rest = rest[2:]
	}
	return len(rest) == 1
}

// APIPath is what the path of a request to the apiserver names.
type APIPath struct {
	// Namespace is the namespace the request is in, or the namespace
	// object it is about; "" for a cluster-scoped resource.
	Namespace string
	// Resource is the resource, e.g. "deployments" or "namespaces".
	Resource string
	// Name is the object's name; "" for a collection.
	Name string
	// Subresource is e.g. "status" or "scale"; "" for the object itself.
	Subresource string
}

// ParseAPIPath reads an API path:
// /apis/apps/v1/namespaces/shop/deployments/cart/status is the status of
// the Deployment shop/cart, /api/v1/namespaces/shop/pods the pods of
// namespace shop, /api/v1/namespaces/shop the namespace itself. ok is
// false for a path that names no namespace.
func ParseAPIPath(path string) (p APIPath, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] != "namespaces" {
			continue
		}
		p.Namespace = parts[i+1]
		rest := parts[i+2:]
		switch {
		case len(rest) == 0:
			p.Resource, p.Name = "namespaces", p.Namespace
		case len(rest) == 1 && (rest[0] == "status" || rest[0] == "finalize"):
			p.Resource, p.Name, p.Subresource = "namespaces", p.Namespace, rest[0]
		case len(rest) == 1:
			p.Resource = rest[0]
		default:
			p.Resource, p.Name = rest[0], rest[1]
			if len(rest) > 2 {
				p.Subresource = rest[2]
			}
		}
		return p, true
	}
	return APIPath{}, false
}

// ObjectOf turns /apis/apps/v1/namespaces/shop/deployments/cart (and its
// subresources) into "deployments shop/cart", /api/v1/namespaces/shop/pods
// into "pods shop" and /api/v1/namespaces/shop into "namespaces shop".
func ObjectOf(path string) string {
	p, ok := ParseAPIPath(path)
	switch {
	case !ok:
		return path
	case p.Resource == "namespaces":
		return "namespaces " + p.Namespace
	case p.Name == "":
		return p.Resource + " " + p.Namespace
	}
	return p.Resource + " " + p.Namespace + "/" + p.Name
}

// Get returns one count.
func (c *Counter) Get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// Matching returns every count whose key starts with prefix.
func (c *Counter) Matching(prefix string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.counts {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// Sum adds up every count whose key starts with prefix.
func (c *Counter) Sum(prefix string) int {
	n := 0
	for _, v := range c.Matching(prefix) {
		n += v
	}
	return n
}

// Reset forgets every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int{}
}

// Lines lists the counts as "key count", sorted by key.
func (c *Counter) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.counts))
	for k := range c.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+" "+strconv.Itoa(c.counts[k]))
	}
	return out
}

// Config is the agent's configuration for the world: real defaults, with
// waits shortened so a scenario takes seconds. The xDS sync gate asks the
// world's istiods over gRPC and TLS with a real token of the meshwave
// service account, audience istio-ca, as the chart mounts it and the
// kubelet keeps it fresh (projectToken).
func Config(f *fixture.Fixture) agent.Config {
	f.T.Helper()
	cfg := agent.DefaultConfig()
	token := filepath.Join(f.T.TempDir(), "istio-token")
	projectToken(f, token)
	cfg.Gates.Sync.TokenFile = token
	cfg.Gates.Sync.Port = f.World.Mesh.Ports().GRPCTLS
	cfg.Gates.Sync.Interval = agent.Duration(time.Second)
	cfg.Gates.Sync.Timeout = agent.Duration(20 * time.Second)
	cfg.DelayBetweenWaves = agent.Duration(300 * time.Millisecond)
	cfg.ReadinessTimeout = agent.Duration(time.Minute)
	cfg.ResyncPeriod = 0
	cfg.LeaderElection.LeaseDuration = agent.Duration(3 * time.Second)
	cfg.LeaderElection.RenewDeadline = agent.Duration(2 * time.Second)
	cfg.LeaderElection.RetryPeriod = agent.Duration(500 * time.Millisecond)
	return cfg
}

// Agent is an agent running in this process, as its own replica.
type Agent struct {
	Controller *agent.Controller
	cancel     context.CancelFunc
	done       chan error
	once       sync.Once
}

// Start runs an agent against the world with cfg, its requests counted by
// counter, and stops it when the test ends. adjust, if set, changes its
// options first.
func Start(f *fixture.Fixture, cfg agent.Config, counter *Counter, identity string, adjust func(*agent.Options)) *Agent {
	t := f.T
	t.Helper()
	rc := rest.CopyConfig(f.World.Cluster.Config)
	rc.Wrap(counter.Wrap)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	md, err := metadata.NewForConfig(rc)
	require.NoError(t, err)
	// As the command runs it: the Jobs' metadata names a CronJob's pods.
	// The port-forwards to ztunnels' admin go uncounted: they are no reads
	// of the API's objects.
	opts := agent.Options{Client: client, Metadata: md, Config: cfg, Identity: identity, RestConfig: rest.CopyConfig(f.World.Cluster.Config)}
	if adjust != nil {
		adjust(&opts)
	}
	ctrl, err := agent.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	logger := funcr.New(func(prefix, args string) {
		if os.Getenv("MESHWAVE_E2E_AGENT_LOG") != "" {
			t.Logf("agent %s: %s %s", identity, prefix, args)
		}
	}, funcr.Options{Verbosity: 2})
	a := &Agent{Controller: ctrl, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- ctrl.Run(klog.NewContext(ctx, logger)) }()
	t.Cleanup(a.Kill)
	return a
}

// Kill stops the agent at once, wherever it is.
func (a *Agent) Kill() {
	a.once.Do(func() {
		a.cancel()
		<-a.done
		a.Controller.Shutdown()
	})
}
