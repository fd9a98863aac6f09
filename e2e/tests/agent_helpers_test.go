package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
)

// apiCounter counts the requests a client sends, by verb and object, so a
// scenario can assert exactly how many writes the agent made.
type apiCounter struct {
	mu     sync.Mutex
	counts map[string]int // "PATCH deployments shop/cart"
}

func newAPICounter() *apiCounter { return &apiCounter{counts: map[string]int{}} }

type countingTransport struct {
	c    *apiCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		t.c.mu.Lock()
		t.c.counts[req.Method+" "+objectOf(req.URL.Path)]++
		t.c.mu.Unlock()
	}
	return t.next.RoundTrip(req)
}

// objectOf turns /apis/apps/v1/namespaces/shop/deployments/cart into
// "deployments shop/cart" and /api/v1/namespaces/shop into "namespaces shop".
func objectOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] != "namespaces" {
			continue
		}
		ns := parts[i+1]
		if i+3 < len(parts) {
			return parts[i+2] + " " + ns + "/" + parts[i+3]
		}
		if i+2 < len(parts) {
			return parts[i+2] + " " + ns
		}
		return "namespaces " + ns
	}
	return path
}

func (c *apiCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// writes returns every counted write whose key starts with prefix.
func (c *apiCounter) writes(prefix string) map[string]int {
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

func (c *apiCounter) report(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.counts))
	for k := range c.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("writes: %-60s %d", k, c.counts[k])
	}
}

// testConfig is the agent's configuration for scenarios: real defaults,
// with waits shortened so a scenario takes seconds. The xDS sync gate asks
// the world's istiods over gRPC and TLS with a real token of the
// meshwave service account, audience istio-ca, as the chart mounts it.
func testConfig(f *fixture.Fixture) agent.Config {
	f.T.Helper()
	cfg := agent.DefaultConfig()
	token := filepath.Join(f.T.TempDir(), "istio-token")
	require.NoError(f.T, os.WriteFile(token, []byte(f.IstioCAToken("meshwave")), 0o600))
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

// runningAgent is an agent running in this process, as its own replica.
type runningAgent struct {
	ctrl   *agent.Controller
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startAgent runs an agent against the world with cfg. Its requests go
// through counter.
func startAgent(t *testing.T, f *fixture.Fixture, cfg agent.Config, counter *apiCounter, identity string) *runningAgent {
	t.Helper()
	return startAgentWith(t, f, cfg, counter, identity, agent.GateDeps{})
}

// startAgentWith is startAgent with some of the gates' outside systems
// replaced, such as a counting Prometheus client.
func startAgentWith(t *testing.T, f *fixture.Fixture, cfg agent.Config, counter *apiCounter, identity string, deps agent.GateDeps) *runningAgent {
	t.Helper()
	return startAgentWithOptions(t, f, cfg, counter, identity, func(o *agent.Options) { o.GateDeps = deps })
}

// startAgentWithOptions is startAgent with the agent's options adjusted.
func startAgentWithOptions(t *testing.T, f *fixture.Fixture, cfg agent.Config, counter *apiCounter, identity string, adjust func(*agent.Options)) *runningAgent {
	t.Helper()
	rc := rest.CopyConfig(f.World.Cluster.Config)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{c: counter, next: rt} })
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	opts := agent.Options{Client: client, Config: cfg, Identity: identity}
	adjust(&opts)
	ctrl, err := agent.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	logger := funcr.New(func(prefix, args string) {
		if os.Getenv("MESHWAVE_E2E_AGENT_LOG") != "" {
			t.Logf("agent %s: %s %s", identity, prefix, args)
		}
	}, funcr.Options{Verbosity: 2})
	a := &runningAgent{ctrl: ctrl, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- ctrl.Run(klog.NewContext(ctx, logger)) }()
	t.Cleanup(a.Kill)
	return a
}

// Kill stops the agent at once, wherever it is.
func (a *runningAgent) Kill() {
	a.once.Do(func() {
		a.cancel()
		<-a.done
		a.ctrl.Shutdown()
	})
}

// optIn annotates a namespace with its target and priority.
func optIn(f *fixture.Fixture, ns, target string, priority int) {
	f.T.Helper()
	t, p := target, fmt.Sprint(priority)
	f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &t).AnnotateNamespace(ns, canary.AnnotationPriority, &p)
}

func status(f *fixture.Fixture, ns string) *canary.Status {
	f.T.Helper()
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(f.T, err)
	st, _, err := canary.ParseStatus(n.Annotations)
	require.NoError(f.T, err)
	return st
}

// waitForPhase waits until the namespace's status reaches phase.
func waitForPhase(f *fixture.Fixture, ns string, phase canary.Phase, timeout time.Duration) *canary.Status {
	f.T.Helper()
	var st *canary.Status
	f.EventuallyWithin(fmt.Sprintf("namespace %s to be %s", ns, phase), timeout, func() (bool, string) {
		st = status(f, ns)
		if st == nil {
			return false, "no status"
		}
		return st.Phase == phase, fmt.Sprintf("phase %s, wave %d/%d, reason %q", st.Phase, st.Wave, st.TotalWaves, st.Reason)
	})
	return st
}

func moveRecord(f *fixture.Fixture, ns, name string) (canary.MoveRecord, bool) {
	f.T.Helper()
	d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, name, metav1.GetOptions{})
	require.NoError(f.T, err)
	return canary.ReadMoveRecord(d.Annotations)
}

// eventsFor lists the Events about an object, oldest first, as
// "Reason: message".
func eventsFor(f *fixture.Fixture, kind, ns, name string) []string {
	f.T.Helper()
	eventNS := ns
	if kind == "Namespace" {
		eventNS = metav1.NamespaceDefault
	}
	list, err := f.Client.CoreV1().Events(eventNS).List(f.Ctx, metav1.ListOptions{})
	require.NoError(f.T, err)
	var evs []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Source.Component == "meshwave" {
			evs = append(evs, e)
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].FirstTimestamp.Before(&evs[j].FirstTimestamp) })
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// waitForEvent waits until an Event with the given reason and message
// prefix is recorded about the object.
func waitForEvent(f *fixture.Fixture, kind, ns, name, want string) {
	f.T.Helper()
	f.Eventually(fmt.Sprintf("event %q on %s %s", want, kind, name), func() (bool, string) {
		evs := eventsFor(f, kind, ns, name)
		for _, e := range evs {
			if strings.HasPrefix(e, want) {
				return true, ""
			}
		}
		return false, strings.Join(evs, " | ")
	})
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// meshwaveCLI builds the meshwave binary once per test run.
func meshwaveCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meshwave-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "meshwave")
		out, err := exec.Command("go", "build", "-o", cliPath, "github.com/meshwave/meshwave/cmd/agent").CombinedOutput()
		if err != nil {
			cliErr = fmt.Errorf("go build meshwave: %v: %s", err, out)
		}
	})
	require.NoError(t, cliErr)
	return cliPath
}

// runCLI runs the meshwave binary against the world and returns stdout.
func runCLI(t *testing.T, f *fixture.Fixture, args ...string) string {
	t.Helper()
	cmd := exec.Command(meshwaveCLI(t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+f.World.Cluster.Kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "meshwave %v: %s", args, stderr.String())
	return string(out)
}
