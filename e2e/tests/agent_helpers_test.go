package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/cluster"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/harness"
	"github.com/meshwave/meshwave/e2e/mesh"
)

// apiCounter counts the requests a client sends, by verb and object, so a
// scenario can assert exactly how many writes the agent made.
type apiCounter struct{ *harness.Counter }

func newAPICounter() *apiCounter { return &apiCounter{harness.NewCounter()} }

// objectOf names the object of a request path ("deployments shop/cart").
func objectOf(path string) string { return harness.ObjectOf(path) }

func (c *apiCounter) get(key string) int { return c.Get(key) }

// writes returns every counted write whose key starts with prefix.
func (c *apiCounter) writes(prefix string) map[string]int { return c.Matching(prefix) }

func (c *apiCounter) report(t *testing.T) {
	for _, line := range c.Lines() {
		if !strings.HasPrefix(line, "GET ") && !strings.HasPrefix(line, "LIST ") && !strings.HasPrefix(line, "WATCH ") {
			t.Logf("writes: %s", line)
		}
	}
}

// testConfig is the agent's configuration for scenarios (harness.Config).
func testConfig(f *fixture.Fixture) agent.Config { return harness.Config(f) }

// runningAgent is an agent running in this process, as its own replica.
type runningAgent = harness.Agent

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
	return harness.Start(f.For(t), cfg, counter.Counter, identity, adjust)
}

// optIn annotates a namespace with its target and priority.
func optIn(f *fixture.Fixture, ns, target string, priority int) {
	f.T.Helper()
	t, p := target, fmt.Sprint(priority)
	f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &t).AnnotateNamespace(ns, canary.AnnotationPriority, &p)
}

// threeWorkloads stages namespace ns on 1-25 with Deployments a, b and c
// of one replica each, rolled out.
func threeWorkloads(f *fixture.Fixture, ns string) {
	f.T.Helper()
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "a", fixture.Replicas(1)).Deployment(ns, "b", fixture.Replicas(1)).Deployment(ns, "c", fixture.Replicas(1)).RolledOut(ns)
}

// holdNew keeps the new pods of a workload unready until released.
func holdNew(f *fixture.Fixture, ns, app string) func() {
	return f.World.Cluster.Kubelet.HoldUnready(cluster.PodSelector{Namespace: ns, Labels: fixture.PodSelector(map[string]string{"app": app}), OnlyNew: true})
}

// waitForMove waits until the move record of Deployment name in ns is of
// the given wave.
func waitForMove(f *fixture.Fixture, ns, name string, wave int) {
	f.T.Helper()
	f.Eventually(fmt.Sprintf("%s moved in wave %d", name, wave), func() (bool, string) {
		r, ok := moveRecord(f, ns, name)
		return ok && r.Wave == wave, fmt.Sprint(r)
	})
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

// TestMain removes the meshwave binary the scenarios built, if any.
func TestMain(m *testing.M) {
	code := m.Run()
	if cliPath != "" {
		os.RemoveAll(filepath.Dir(cliPath))
	}
	os.Exit(code)
}
