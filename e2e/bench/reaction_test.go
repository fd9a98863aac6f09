package bench

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/harness"
	"github.com/meshwave/meshwave/e2e/mesh"
)

// reactions are the agent's reaction times in a loaded world.
type reactions struct {
	// optIn: from the target-revision annotation being set to the
	// agent's first write in that namespace.
	optIn []time.Duration
	// answered: from that request to the apiserver's answer to it, as the
	// benchmark reads it: the world's own latency, beside optIn.
	answered []time.Duration
	// noticed: from the last pod of a wave becoming Ready to the first
	// evaluation of the wave's gates that is shown it Ready.
	noticed []time.Duration
	// ready: from the last pod of a wave becoming Ready to the agent's
	// write that says the wave passed; rolledOut: from the moment the
	// workload had rolled out as the rollout gate reads it (new pods
	// ready and available, every old pod gone) to that same write.
	ready, rolledOut []time.Duration
}

// measureReactions runs the meshwave binary, as its own process, against
// a world already loaded, and measures how fast it reacts: to n
// namespaces opting in (each paused, so that none moves anything), then
// to each of the n waves of one namespace of n one-replica Deployments
// migrated one at a time. Its own log at -v=4 says when it did what:
// each namespace write as it is sent, each evaluation of a wave's gates
// with the members shown Ready, each restart. The world's garbage
// collection, in this process, does not stretch the agent's own work.
func measureReactions(b *testing.B, f *fixture.Fixture, bin, dir string, n int) reactions {
	b.Helper()
	var r reactions
	log, addr := startReactionAgent(b, f, bin, dir)
	defer saveAgentMetrics(b, addr, "reactions-metrics.txt")

	paused := map[string]string{canary.AnnotationPaused: "true"}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("react-%03d", i)
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, paused).
			Deployment(ns, "svc-a", fixture.Replicas(1)).Deployment(ns, "svc-b", fixture.Replicas(1))
	}
	profiled := profileAgentCPU(b, addr, "reactions-cpu-optin.pprof", 30*time.Second)
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("react-%03d", i)
		target := "1-26"
		// From the request that sets it: the agent may well write before
		// the apiserver's answer to this request is read.
		set := time.Now()
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
		r.answered = append(r.answered, time.Since(set))
		var first time.Time
		f.EventuallyWithin("the agent's first write in "+ns, time.Minute, func() (bool, string) {
			first = firstNamespaceWrite(log.snapshot(), ns, set)
			return !first.IsZero(), "no write yet"
		})
		r.optIn = append(r.optIn, first.Sub(set))
	}

	profiled()

	ns := "react-waves"
	g := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
	for w := 0; w < n; w++ {
		g.Deployment(ns, fmt.Sprintf("svc-%03d", w), fixture.Replicas(1))
	}
	g.RolledOut(ns)
	watch := watchRollouts(b, f, ns)
	defer watch.stop()
	target := "1-26"
	profiled = profileAgentCPU(b, addr, "reactions-cpu-waves.pprof", 60*time.Second)
	f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
	st := waitCompleted(f, ns, 30*time.Minute)
	profiled()
	require.Equal(b, n, st.Wave, "one wave per Deployment: %s", st.Reason)

	lines := log.snapshot()
	passed, moved := wavesLogged(lines, ns)
	for k := 1; k <= n; k++ {
		require.Len(b, moved[k], 1, "wave %d restarted one Deployment", k)
		ready, rolled := watch.times(moved[k][0])
		require.False(b, ready.IsZero() || rolled.IsZero() || passed[k].IsZero(), "wave %d: ready %v, rolled out %v, passed %v", k, ready, rolled, passed[k])
		noticed := shownReady(lines, ns, k, moved[k][0])
		require.False(b, noticed.IsZero(), "wave %d: the gates were never shown %s Ready", k, moved[k][0])
		r.noticed = append(r.noticed, noticed.Sub(ready))
		r.ready = append(r.ready, passed[k].Sub(ready))
		r.rolledOut = append(r.rolledOut, passed[k].Sub(rolled))
	}
	return r
}

// The agent's log messages the reactions are read from.
const (
	logLeading = "Acquired the leader lease"
	logWriting = "Writing the namespace"
	logGates   = "Evaluating the wave's gates"
	logRestart = "Restarted workload"
)

// startReactionAgent starts the meshwave binary with the world's agent
// configuration (harness.Config: xDS sync checked every second, 300 ms
// between waves), one Deployment a wave and the default lease times, at
// -v=4, and waits until it leads. Its log goes to reactions.log in dir, or
// in the profile directory when one is set, and then at -v=5 (each
// reconcile), with its profiles served. It returns the log and where the
// agent serves its metrics.
func startReactionAgent(b *testing.B, f *fixture.Fixture, bin, dir string) (*agentLog, string) {
	b.Helper()
	cfg := harness.Config(f)
	config := filepath.Join(dir, "reactions.yaml")
	require.NoError(b, os.WriteFile(config, []byte(fmt.Sprintf(`canarySize: 1
batchSize: 1
readinessTimeout: %q
delayBetweenWaves: %q
resyncPeriod: "0s"
gates:
  sync:
    port: %d
    tokenFile: %q
    interval: %q
    timeout: %q
`, cfg.ReadinessTimeout.D(), cfg.DelayBetweenWaves.D(), cfg.Gates.Sync.Port, cfg.Gates.Sync.TokenFile,
		cfg.Gates.Sync.Interval.D(), cfg.Gates.Sync.Timeout.D())), 0o600))
	addr, verbosity := freeAddr(b), "-v=4"
	args := []string{"run", "--kubeconfig", f.World.Cluster.Kubeconfig, "--config", config, "--metrics-address", addr}
	if profileDir() != "" {
		verbosity = "-v=5"
		args = append(args, "--profiling")
	}
	cmd := exec.Command(bin, append(args, verbosity)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(b, err)
	cmd.Stdout = io.Discard
	logDir := dir
	if profileDir() != "" {
		logDir = profileDir()
		require.NoError(b, os.MkdirAll(logDir, 0o755))
	}
	raw, err := os.Create(filepath.Join(logDir, "reactions.log"))
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	log := newAgentLog(logLeading, logWriting, logGates, logRestart)
	read := make(chan struct{})
	go func() { defer close(read); log.read(stderr, raw) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-read
		_ = cmd.Wait()
		_ = raw.Close()
	})
	f.EventuallyWithin("the reactions agent to lead (its log: "+raw.Name()+")", 5*time.Minute, func() (bool, string) {
		for _, l := range log.snapshot() {
			if l.msg == logLeading {
				return true, ""
			}
		}
		return false, "not leading"
	})
	return log, addr
}

// firstNamespaceWrite is when the agent first sent a write of a namespace
// after a time.
func firstNamespaceWrite(lines []logLine, namespace string, after time.Time) time.Time {
	for _, l := range lines {
		if l.msg == logWriting && l.kv["namespace"] == namespace && l.at.After(after) {
			return l.at
		}
	}
	return time.Time{}
}

// wavesLogged reads a namespace's waves from the agent's log: when it
// sent the write that says each passed (the status of a completed
// migration, for the last), and the Deployments each restarted.
func wavesLogged(lines []logLine, namespace string) (passed map[int]time.Time, moved map[int][]string) {
	passed, moved = map[int]time.Time{}, map[int][]string{}
	for _, l := range lines {
		if l.kv["namespace"] != namespace {
			continue
		}
		wave, err := strconv.Atoi(l.kv["wave"])
		if err != nil {
			continue
		}
		switch {
		case l.msg == logRestart && l.kv["rollback"] == "false":
			moved[wave] = append(moved[wave], l.kv["workload"])
		case l.msg == logWriting && (l.kv["waveState"] == string(canary.WavePassed) || l.kv["phase"] == string(canary.PhaseCompleted)):
			if _, seen := passed[wave]; !seen {
				passed[wave] = l.at
			}
		}
	}
	return passed, moved
}

// shownReady is when an evaluation of a wave's gates was first shown a
// member Ready.
func shownReady(lines []logLine, namespace string, wave int, member string) time.Time {
	for _, l := range lines {
		if l.msg == logGates && l.kv["namespace"] == namespace && l.kv["wave"] == strconv.Itoa(wave) && l.kv["rollback"] == "false" &&
			slices.Contains(strings.Split(l.kv["readyWorkloads"], ","), member) {
			return l.at
		}
	}
	return time.Time{}
}

// rolloutWatch watches a namespace's Deployments and pods, as an informer
// of the benchmark's own, and notes per Deployment when its first pod
// injected by the target became Ready and when it had rolled out after
// its restart.
type rolloutWatch struct {
	mu                sync.Mutex
	ready, rolled     map[string]time.Time
	factory           informers.SharedInformerFactory
	stopCh            chan struct{}
	pods              cache.Indexer
	deployments       cache.Indexer
	namespace, target string
}

func watchRollouts(b *testing.B, f *fixture.Fixture, ns string) *rolloutWatch {
	b.Helper()
	w := &rolloutWatch{ready: map[string]time.Time{}, rolled: map[string]time.Time{}, stopCh: make(chan struct{}), namespace: ns, target: "1-26"}
	w.factory = informers.NewSharedInformerFactoryWithOptions(f.Client, 0, informers.WithNamespace(ns))
	podInf, depInf := w.factory.Core().V1().Pods().Informer(), w.factory.Apps().V1().Deployments().Informer()
	w.pods, w.deployments = podInf.GetIndexer(), depInf.GetIndexer()
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		if canary.SidecarRevision(p.Annotations) == w.target && podReady(p) {
			w.note(w.ready, p.Labels["app"], now)
		}
		w.check(p.Labels["app"], now)
	}
	onDeployment := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok {
			w.check(d.Name, time.Now())
		}
	}
	for inf, fn := range map[cache.SharedIndexInformer]func(any){podInf: onPod, depInf: onDeployment} {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) }, DeleteFunc: fn})
		require.NoError(b, err)
	}
	w.factory.Start(w.stopCh)
	for typ, ok := range w.factory.WaitForCacheSync(w.stopCh) {
		require.True(b, ok, "sync %v", typ)
	}
	return w
}

// check notes when a restarted Deployment has rolled out: the rollout
// gate's reading (fixture.RolledOut), with every pod it selects counted.
func (w *rolloutWatch) check(name string, at time.Time) {
	obj, ok, _ := w.deployments.GetByKey(w.namespace + "/" + name)
	if !ok {
		return
	}
	d := obj.(*appsv1.Deployment)
	if d.Spec.Template.Annotations[canary.AnnotationRestartedAt] == "" {
		return
	}
	sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	var pods []*corev1.Pod
	for _, o := range w.pods.List() {
		if p := o.(*corev1.Pod); sel.Matches(labels.Set(p.Labels)) {
			if canary.SidecarRevision(p.Annotations) != w.target {
				return
			}
			pods = append(pods, p)
		}
	}
	if fixture.RolledOut(d, pods) {
		w.note(w.rolled, name, at)
	}
}

func (w *rolloutWatch) note(m map[string]time.Time, name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := m[name]; !seen {
		m[name] = at
	}
}

func (w *rolloutWatch) times(name string) (ready, rolled time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready[name], w.rolled[name]
}

func (w *rolloutWatch) stop() {
	close(w.stopCh)
	w.factory.Shutdown()
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
