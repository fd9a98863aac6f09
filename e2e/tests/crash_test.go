package tests

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// crashScenario is a migration played once without interruption, then
// once per write it makes, with the agent killed right after that write
// and a new agent taking over.
type crashScenario struct {
	name string
	// stage runs before opt-in, on the scenario's namespace.
	stage func(f *fixture.Fixture, ns string)
	end   canary.Phase
	// gates are those each passed wave must show passed in its status.
	gates []string
}

// TestCrashAtEveryWrite kills the agent abruptly after each write of a
// migration, one crash point per write counted in an uninterrupted run,
// and starts a new agent. At every point the migration must reach the end
// state of the uninterrupted run, with the same PATCHes (none twice for
// one move), the namespace never without its revision label, and every
// wave that passed showing each gate's verdict in its status.
func TestCrashAtEveryWrite(t *testing.T) {
	shared := fixture.New(t, world.Options{NoPrometheus: true})
	scenarios := []crashScenario{
		{name: "forward", end: canary.PhaseCompleted, gates: []string{"rollout", "injection", "xds-sync"}},
		{name: "rollback", end: canary.PhaseRolledBack, gates: []string{"rollout", "injection", "xds-sync"},
			stage: func(f *fixture.Fixture, ns string) {
				// c's new proxies never ACK routes on 1-26: its wave fails the
				// sync gate and is rolled back.
				f.World.Mesh.Istiod("1-26").SetProxyStatus(ns, fixture.PodSelector(map[string]string{"app": "c"}), mesh.TypeRDS, statusv3.ConfigStatus_STALE)
			}},
	}
	covered := 0
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			f := shared.For(t)
			base := runCrashPoint(f, sc, sc.name+"-0", 0)
			require.Equal(t, sc.end, base.final.Phase, base.final.Reason)
			t.Logf("%s: %d writes in the uninterrupted run: %s", sc.name, len(base.writes), strings.Join(base.writes, ", "))
			for k := 1; k <= len(base.writes); k++ {
				t.Run(fmt.Sprintf("after write %d %s", k, base.writes[k-1]), func(t *testing.T) {
					f := shared.For(t)
					got := runCrashPoint(f, sc, fmt.Sprintf("%s-%d", sc.name, k), k)
					if !got.crashed {
						// The number of status writes while a gate is pending
						// depends on timing: this run ended with fewer.
						t.Skipf("this run made only %d writes: %s", len(got.writes), strings.Join(got.writes, ", "))
					}
					covered++
					assert.Equal(t, base.final.Phase, got.final.Phase)
					assert.Equal(t, podsNamed(strings.ReplaceAll(base.final.Reason, base.ns, got.ns)), podsNamed(got.final.Reason))
					assert.Equal(t, base.final.Counts, got.final.Counts)
					assert.Equal(t, base.patches, got.patches, "the same restarts as the uninterrupted run, none twice")
					assert.Empty(t, got.unlabelled, "versions of the namespace without istio.io/rev")
					assert.Equal(t, base.passedWaves, got.passedWaves, "each passed wave shows its gates' verdicts")
				})
			}
		})
	}
	t.Logf("crash points covered: %d", covered)
}

// podName matches a ReplicaSet pod's generated suffix: the pod-template-hash
// (a 32-bit hash, safe-encoded, so 1 to 10 characters) and the pod's own 5.
var podName = regexp.MustCompile(`-[a-z0-9]{1,10}-[a-z0-9]{5}\b`)

// podsNamed blanks the generated part of pod names, which differ between
// runs of the same scenario.
func podsNamed(reason string) string { return podName.ReplaceAllString(reason, "-<pod>") }

// crashRun is what one run of a scenario did.
type crashRun struct {
	ns          string
	writes      []string // the scenario's namespace and Deployment writes, in order: "namespace", "deployment a"
	crashed     bool
	final       *canary.Status
	patches     map[string]int // template changes by workload name
	unlabelled  []string
	passedWaves map[int]bool // waves whose status showed every gate passed
}

// runCrashPoint plays the scenario in namespace ns. With crashAfter > 0
// the first agent is killed right after that many writes to the
// namespace and its Deployments, and a second agent finishes the job.
func runCrashPoint(f *fixture.Fixture, sc crashScenario, ns string, crashAfter int) crashRun {
	f.T.Helper()
	threeWorkloads(f, ns)
	if sc.stage != nil {
		sc.stage(f, ns)
	}
	history := watchHistory(f, ns, sc.gates)
	cfg := testConfig(f)
	cfg.BatchSize = 2
	cfg.LeaderElection.Enabled = false // one replica at a time here; leases are TestHighAvailability's
	cfg.Gates.Sync.Timeout = agent.Duration(3 * time.Second)
	log := &writeLog{}
	run := crashRun{ns: ns}
	var mu sync.Mutex
	crashed := make(chan struct{})
	counted := 0
	first := startReplica(f.T, f, cfg, "first-"+ns, log, withLink(func(l *link) {
		l.afterWrite = func(w write) {
			if w.object != "namespaces "+ns && !strings.HasPrefix(w.object, "deployments "+ns+"/") {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			counted++
			what := "namespace"
			if name, ok := strings.CutPrefix(w.object, "deployments "+ns+"/"); ok {
				what = "deployment " + name
			}
			run.writes = append(run.writes, what)
			if crashAfter > 0 && counted == crashAfter {
				l.dead.Store(true)
				close(crashed)
			}
		}
	}))
	optIn(f, ns, "1-26", 10)
	if crashAfter > 0 {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(time.Minute)
	wait:
		for {
			select {
			case <-crashed:
				run.crashed = true
				first.crash()
				startReplica(f.T, f, cfg, "second-"+ns, log)
				break wait
			case <-tick.C:
				if st := status(f, ns); st != nil && st.Phase == sc.end {
					break wait // the run ended before that write
				}
			case <-deadline:
				break wait
			}
		}
	}
	run.final = waitForPhase(f, ns, sc.end, time.Minute)
	first.stop()
	// Restarts are counted where they happen: each one changes the pod
	// template, so the apiserver bumps the Deployment's generation. A
	// client-side count would miss a patch that landed while its agent died.
	run.patches = map[string]int{}
	for _, name := range []string{"a", "b", "c"} {
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(f.T, err)
		run.patches[name] = int(d.Generation) - 1
	}
	run.unlabelled, run.passedWaves = history.result()
	return run
}

// nsHistory watches every version of a namespace: whether it carried its
// revision label, and which waves its status showed passed with every
// gate's verdict a Pass.
type nsHistory struct {
	mu         sync.Mutex
	gates      []string
	unlabelled []string
	passed     map[int]bool
}

func watchHistory(f *fixture.Fixture, ns string, gates []string) *nsHistory {
	f.T.Helper()
	w, err := f.Client.CoreV1().Namespaces().Watch(f.Ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", ns).String()})
	require.NoError(f.T, err)
	h := &nsHistory{gates: gates, passed: map[int]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Namespace)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			h.observe(n)
		}
	}()
	f.T.Cleanup(w.Stop)
	return h
}

func (h *nsHistory) observe(n *corev1.Namespace) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n.Labels[canary.LabelRev] == "" {
		h.unlabelled = append(h.unlabelled, n.ResourceVersion)
	}
	var st canary.Status
	if json.Unmarshal([]byte(n.Annotations[canary.AnnotationStatus]), &st) != nil || st.Wave == 0 {
		return
	}
	if st.WaveState != canary.WavePassed && st.Phase != canary.PhaseCompleted {
		return
	}
	passed := map[string]bool{}
	for _, v := range st.Verdicts {
		if v.Result == canary.ResultPass {
			passed[v.Gate] = true
		}
	}
	for _, g := range h.gates {
		if !passed[g] {
			return
		}
	}
	h.passed[st.Wave] = true
}

func (h *nsHistory) result() ([]string, map[int]bool) {
	// Let the watch deliver the last versions.
	time.Sleep(200 * time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	passed := map[int]bool{}
	for k, v := range h.passed {
		passed[k] = v
	}
	return append([]string(nil), h.unlabelled...), passed
}
