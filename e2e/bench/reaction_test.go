package bench

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/agent"
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
	// noticed: from the last pod of a wave becoming Ready to the first
	// evaluation of the wave's gates that is shown it Ready.
	noticed []time.Duration
	// ready: from the last pod of a wave becoming Ready to the agent's
	// write that says the wave passed; rolledOut: from the moment the
	// workload had rolled out as the rollout gate reads it (new pods
	// ready and available, every old pod gone) to that same write.
	ready, rolledOut []time.Duration
}

// measureReactions runs an agent in this process against a world already
// loaded, and measures how fast it reacts: to n namespaces opting in (each
// paused, so that none moves anything), then to each of the n waves of one
// namespace of n one-replica Deployments migrated one at a time.
func measureReactions(b *testing.B, f *fixture.Fixture, n int) reactions {
	b.Helper()
	var r reactions
	cfg := harness.Config(f)
	cfg.CanarySize, cfg.BatchSize = 1, 1
	// The agent's own lease times, not the scenarios' short ones: with
	// 100,000 pods in this process the apiserver may take more than the
	// scenarios' 2 s to answer a renewal while it serves a listing.
	defaults := agent.DefaultConfig().LeaderElection
	cfg.LeaderElection.LeaseDuration, cfg.LeaderElection.RenewDeadline, cfg.LeaderElection.RetryPeriod = defaults.LeaseDuration, defaults.RenewDeadline, defaults.RetryPeriod
	log := &writeLog{}
	seen := &gatesSaw{ready: map[string]time.Time{}}
	a := harness.Start(f, cfg, harness.NewCounter(), "reactions", func(o *agent.Options) {
		logWrites(b, f, log)(o)
		o.ObserveGates = seen.observe
	})
	defer a.Kill()
	waitLeading(f, cfg, "reactions")

	paused := map[string]string{canary.AnnotationPaused: "true"}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("react-%03d", i)
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, paused).
			Deployment(ns, "svc-a", fixture.Replicas(1)).Deployment(ns, "svc-b", fixture.Replicas(1))
	}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("react-%03d", i)
		target := "1-26"
		// From the request that sets it: the agent may well write before
		// the apiserver's answer to this request is read.
		set := time.Now()
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
		var first time.Time
		f.EventuallyWithin("the agent's first write in "+ns, time.Minute, func() (bool, string) {
			first = firstWrite(log.snapshot(), ns, set)
			return !first.IsZero(), "no write yet"
		})
		r.optIn = append(r.optIn, first.Sub(set))
	}

	ns := "react-waves"
	g := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
	for w := 0; w < n; w++ {
		g.Deployment(ns, fmt.Sprintf("svc-%03d", w), fixture.Replicas(1))
	}
	g.RolledOut(ns)
	watch := watchRollouts(b, f, ns)
	defer watch.stop()
	target := "1-26"
	f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
	st := waitCompleted(f, ns, 30*time.Minute)
	require.Equal(b, n, st.Wave, "one wave per Deployment: %s", st.Reason)

	waves := wavesOf(log.snapshot(), ns)
	moved := movedIn(log.snapshot(), ns)
	for k := 1; k <= n; k++ {
		wt := waves[k]
		require.NotNil(b, wt, "wave %d in the agent's writes", k)
		require.Len(b, moved[k], 1, "wave %d moved one Deployment", k)
		ready, rolled := watch.times(moved[k][0])
		require.False(b, ready.IsZero() || rolled.IsZero() || wt.passed.IsZero(), "wave %d: ready %v, rolled out %v, passed %v", k, ready, rolled, wt.passed)
		noticed := seen.readyAt(moved[k][0])
		require.False(b, noticed.IsZero(), "wave %d: the gates were never shown %s Ready", k, moved[k][0])
		r.noticed = append(r.noticed, noticed.Sub(ready))
		r.ready = append(r.ready, wt.passed.Sub(ready))
		r.rolledOut = append(r.rolledOut, wt.passed.Sub(rolled))
	}
	return r
}

// gatesSaw notes, per workload, when the agent's gates were first shown
// a pod of it on the target revision Ready.
type gatesSaw struct {
	mu    sync.Mutex
	ready map[string]time.Time
}

func (g *gatesSaw) observe(wave canary.WaveUnderTest, _ []canary.Verdict, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range wave.Workloads {
		if _, seen := g.ready[w.Name]; seen {
			continue
		}
		for _, p := range w.Pods {
			if p.Revision == wave.Expect && p.Ready && !p.Terminating {
				g.ready[w.Name] = at
				break
			}
		}
	}
}

func (g *gatesSaw) readyAt(name string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ready[name]
}

// waitLeading waits until the agent called identity holds the lease: its
// caches synced before it asked for it.
func waitLeading(f *fixture.Fixture, cfg agent.Config, identity string) {
	f.EventuallyWithin(identity+" to lead", 5*time.Minute, func() (bool, string) {
		l, err := f.Client.CoordinationV1().Leases(cfg.RootNamespace).Get(f.Ctx, cfg.LeaderElection.LeaseName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		return holder == identity, "held by " + holder
	})
}

// firstWrite is when the agent first wrote in a namespace after a time,
// its Events apart.
func firstWrite(writes []write, namespace string, after time.Time) time.Time {
	for _, w := range writes {
		if w.namespace == namespace && w.resource != "events" && w.at.After(after) {
			return w.at
		}
	}
	return time.Time{}
}

// movedIn lists, per wave, the Deployments the agent patched forward.
func movedIn(writes []write, namespace string) map[int][]string {
	out := map[int][]string{}
	for _, w := range writes {
		if w.namespace != namespace || w.resource != "deployments" || w.method != http.MethodPatch {
			continue
		}
		if rec, ok := canary.ReadMoveRecord(w.annotations); ok && !rec.Rollback {
			out[rec.Wave] = append(out[rec.Wave], w.name)
		}
	}
	return out
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
