package tests

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// withSequential is withMetrics with the error check in mode sequential:
// a look every 2 s (Prometheus scrapes every second), the control read
// from the 30 s before the restart, and no verdict after 30 s
// Inconclusive.
func withSequential(t *testing.T, f *fixture.Fixture) (agent.Config, *countingQuerier) {
	cfg, q := withMetrics(t, f, testConfig(f))
	e := &cfg.Gates.Metrics.ErrorRate
	e.Mode = "sequential"
	e.Sequential.Step = agent.Duration(2 * time.Second)
	e.Sequential.History = agent.Duration(30 * time.Second)
	e.Sequential.MaxDuration = agent.Duration(30 * time.Second)
	// The latency check is a threshold check, with its bake time: off, so
	// that the error check alone decides.
	cfg.Gates.Metrics.LatencyP99.Enabled = false
	cfg.Concurrency = 4
	return cfg, q
}

// twoWaves stages ns on 1-25 with reviews (wave 0) and details (wave 1).
func twoWaves(f *fixture.Fixture, ns string) {
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "reviews", waveAnnotation("0")).
		Deployment(ns, "details", waveAnnotation("1")).
		RolledOut(ns)
}

// decidedAfter is how long after its wave started the check's verdict in
// st was reached.
func decidedAfter(t *testing.T, st *canary.Status) (canary.Verdict, time.Duration) {
	t.Helper()
	v, ok := verdictOf(st, "error-rate")
	require.True(t, ok, "an error-rate verdict in %+v", st.Verdicts)
	require.NotNil(t, st.WaveStartedAt)
	return v, v.At.Sub(*st.WaveStartedAt)
}

// beforeTheBakeEnds checks that the error check's verdict in st came
// before the threshold mode could have given one: that mode waits until
// the wave is up (every pod ready and in sync) and then the bake time. A
// verdict reached before the wave was seen up (while it rolled out, or in
// the very decision that found it up, so no status ever showed it up) is
// sooner still; one that waited would have left the wave's readyAt in a
// status written meanwhile. Both are measured on the wave's own clock, so the load on
// the machine, which stretches rollouts, does not decide.
func beforeTheBakeEnds(t *testing.T, up *waveUp, ns string, st *canary.Status, bake time.Duration) {
	t.Helper()
	v, ok := verdictOf(st, "error-rate")
	require.True(t, ok, "an error-rate verdict in %+v", st.Verdicts)
	up.mu.Lock()
	at, seen := up.seen[fmt.Sprintf("%s|%s/%d", ns, st.Target, st.Wave)]
	up.mu.Unlock()
	if !seen || v.At.Before(at) {
		t.Logf("%s: decided before wave %d was seen up (as it rolled out, or in the decision that found it up)", ns, st.Wave)
		return
	}
	t.Logf("%s: decided %s after wave %d was up", ns, v.At.Sub(at), st.Wave)
	assert.Less(t, v.At.Sub(at), bake, "the threshold mode would still be baking")
}

// waveUp records, for each namespace it watches, when each wave was first
// seen up (the status's analysis.readyAt), polling until the test ends:
// a rollback or the next wave clears it from the status.
type waveUp struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func watchWavesUp(f *fixture.Fixture, namespaces ...string) *waveUp {
	w := &waveUp{seen: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(f.Ctx)
	f.T.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			for _, ns := range namespaces {
				n, err := f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				if err != nil {
					continue
				}
				st, _, err := canary.ParseStatus(n.Annotations)
				if err != nil || st == nil || st.Analysis == nil || st.Analysis.ReadyAt == nil {
					continue
				}
				key := fmt.Sprintf("%s/%d", st.Target, st.Wave)
				w.mu.Lock()
				if _, ok := w.seen[ns+"|"+key]; !ok {
					w.seen[ns+"|"+key] = *st.Analysis.ReadyAt
				}
				w.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return w
}

// TestTheSequentialErrorCheckDecidesOnEvidence runs the same waves under
// both modes of the error check, on the real Prometheus: the threshold
// mode first, then the sequential one.
//   - The demo's broken revision (reviews answering 30% 5xx on 1-26) is
//     rolled back sooner, with the evidence in the reason.
//   - A busy healthy namespace passes sooner than the bake time and two
//     passes in a row allow, each wave on one final pass.
//   - A namespace with almost no traffic is Inconclusive at the maximum
//     duration, and pauses: never a pass.
//   - Traffic that quadruples for every workload mid-wave, with errors
//     the workloads always had, does not fail a healthy wave.
func TestTheSequentialErrorCheckDecidesOnEvidence(t *testing.T) {
	f := fixture.New(t, world.Options{})
	traffic := f.World.Mesh.Traffic()
	for _, ns := range []string{"broken-threshold", "busy-threshold", "broken", "busy", "quiet", "surge"} {
		twoWaves(f, ns)
	}
	for _, ns := range []string{"broken-threshold", "broken"} {
		traffic.SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "reviews"}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
	}
	for _, ns := range []string{"busy-threshold", "busy"} {
		for _, w := range []string{"reviews", "details"} {
			traffic.SetRate(mesh.WorkloadRef{Namespace: ns, Name: w}, 300)
		}
	}
	for _, w := range []string{"reviews", "details"} {
		traffic.SetRate(mesh.WorkloadRef{Namespace: "quiet", Name: w}, 0.2)
		traffic.SetBehavior(mesh.WorkloadRef{Namespace: "surge", Name: w}, "", mesh.Behavior{ErrorRatio: 0.02, LatencyMs: 40})
		traffic.SetRate(mesh.WorkloadRef{Namespace: "surge", Name: w}, 100)
	}
	// rolling's reviews has four pods, replaced one at a time, each new
	// one 3 s in service before the next old one goes; ledger's is an
	// OnDelete StatefulSet of three, which meshwave evicts one at a time
	// once the last is Ready, and its controller recreates under the same
	// names. Both break on
	// 1-26, and their old pods serve beside the new ones meanwhile.
	f.Given().Namespace("rolling", map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment("rolling", "reviews", fixture.Replicas(4), func(d *appsv1.Deployment) {
			d.Spec.MinReadySeconds = 3
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
		}).RolledOut("rolling")
	ledger := fixture.NewStatefulSet("ledger", "reviews", 3, appsv1.OnDeleteStatefulSetStrategyType)
	ledger.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	f.Given().Namespace("ledger", map[string]string{mesh.LabelRev: "1-25"}, nil).StatefulSet(ledger)
	f.WaitForStatefulSetRolledOut("ledger", "reviews")
	// Each new pod of ledger is Ready 5 s after it was created, so that
	// the next eviction waits and the old pods serve meanwhile.
	f.World.Cluster.Kubelet.Probe("ledger", labels.SelectorFromSet(map[string]string{"app": "reviews"}), func(p *corev1.Pod) bool {
		return time.Since(p.CreationTimestamp.Time) >= 5*time.Second
	})
	for _, ns := range []string{"rolling", "ledger"} {
		traffic.SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "reviews"}, "1-26", mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
		traffic.SetRate(mesh.WorkloadRef{Namespace: ns, Name: "reviews"}, 60)
	}
	waitForTraffic(t, f, "broken", 2)
	waitForTraffic(t, f, "surge", 2)
	waitForTraffic(t, f, "rolling", 1)
	waitForTraffic(t, f, "ledger", 1)

	// Today's mode: a 10 s window after a 10 s bake, a run every 2 s, two
	// passes in a row.
	cfg, q := withMetrics(t, f, testConfig(f))
	cfg.Gates.Metrics.LatencyP99.Enabled = false
	cfg.Concurrency = 2
	threshold := startAnalyzedAgent(t, f, cfg, q, newAPICounter())
	up := watchWavesUp(f, "broken", "busy")
	optIn(f, "broken-threshold", "1-26", 10)
	optIn(f, "busy-threshold", "1-26", 10)
	st := waitForPhase(f, "broken-threshold", canary.PhaseRolledBack, 3*time.Minute)
	_, thresholdFail := decidedAfter(t, st)
	st = waitForPhase(f, "busy-threshold", canary.PhaseCompleted, 3*time.Minute)
	_, thresholdPass := decidedAfter(t, st)
	threshold.Kill()
	t.Logf("threshold mode: failed %s after the wave started, passed the last wave %s after it started", thresholdFail, thresholdPass)
	bake := cfg.Gates.Metrics.BakeTime.D()

	cfg, q = withSequential(t, f)
	cfg.Concurrency = 6
	startAgentWith(t, f, cfg, newAPICounter(), "agent-2", agent.GateDeps{Prometheus: q})
	for _, ns := range []string{"broken", "busy", "quiet", "surge", "rolling", "ledger"} {
		optIn(f, ns, "1-26", 10)
	}
	// The surge comes once reviews, the first wave, is up on 1-26 and
	// being measured.
	waitForMove(f, "surge", "reviews", 1)
	f.WaitForRolledOut("surge", "reviews")
	for _, w := range []string{"reviews", "details"} {
		traffic.SetRate(mesh.WorkloadRef{Namespace: "surge", Name: w}, 400)
	}
	surged := time.Now()

	t.Run("the broken revision is rolled back sooner, on evidence", func(t *testing.T) {
		st := waitForPhase(f, "broken", canary.PhaseRolledBack, 3*time.Minute)
		v, after := decidedAfter(t, st)
		t.Logf("sequential: failed %s after the wave started: %s", after, v.Reason)
		beforeTheBakeEnds(t, up, "broken", st, bake)
		// reviews' two pods are replaced one at a time: a look may fall
		// while an old one still serves beside a new one.
		assert.Regexp(t, `^rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: reviews: error ratio 3\d\.\d\d% \(\d+/\d+\)`+ownLooks+` against 0\.00% \(0/\d+\) before the restart; `+
			`control: (its pods not yet replaced in \d+ looks, else )?its own error ratio before the restart; evidence \S+ of 40: fail$`, st.Reason)
		require.Len(t, v.Measurements, 1)
		m := v.Measurements[0]
		assert.Equal(t, canary.ResultFail, m.Result)
		require.NotNil(t, m.Evidence)
		assert.GreaterOrEqual(t, *m.Evidence, 40.0)
		assert.Equal(t, 40.0, *m.EvidenceBound)
		assert.Regexp(t, `^(its pods not yet replaced in \d+ looks, else )?its own error ratio before the restart$`, m.Control)
	})

	t.Run("a busy healthy namespace passes each wave on one final pass, sooner", func(t *testing.T) {
		st := waitForPhase(f, "busy", canary.PhaseCompleted, 3*time.Minute)
		v, after := decidedAfter(t, st)
		t.Logf("sequential: passed the last wave %s after it started: %s", after, v.Reason)
		beforeTheBakeEnds(t, up, "busy", st, bake)
		assert.True(t, v.Final)
		assert.Regexp(t, `^details: error ratio 0\.00% \(0/\d+\)(, 0\.00% \(0/\d+\) of it against its pods not yet replaced's 0\.00% \(0/\d+\) in the \d+ looks both served,)? against 0\.00% \(0/\d+\) before the restart; `+
			`control: (its pods not yet replaced in \d+ looks, else )?its own error ratio before the restart; evidence of health \S+ of 40: pass$`, v.Reason)
	})

	t.Run("a quiet namespace is inconclusive at the maximum duration, never a pass", func(t *testing.T) {
		st := waitForPhase(f, "quiet", canary.PhasePaused, 3*time.Minute)
		assert.Regexp(t, `^wave 1 paused: error-rate inconclusive 3 times: no verdict 30s after the wave was up: reviews: error ratio 0\.00% \(0/\d+\)[ ,]`, st.Reason)
		assert.Zero(t, st.Counts.Moved, "nothing passed")
	})

	t.Run("traffic quadrupling for every workload mid-wave does not fail it", func(t *testing.T) {
		st := waitForPhaseOrPause(f, "surge", canary.PhaseCompleted, 3*time.Minute, canary.PhaseRolledBack, canary.PhaseRollingBack)
		t.Logf("surge: %s: %s", st.Phase, st.Reason)
		v, ok := verdictOf(st, "error-rate")
		require.True(t, ok)
		assert.True(t, v.At.After(surged), "the verdict came after the surge: %s", v.At)
		assert.NotContains(t, []canary.Phase{canary.PhaseRolledBack, canary.PhaseRollingBack}, st.Phase, "a healthy wave is not failed")
		assert.NotEqual(t, canary.ResultFail, v.Result, fmt.Sprint(v))
		assert.Regexp(t, `control: (its pods not yet replaced in \d+ looks, else )?the namespace's workloads not yet moved, against their split before the restart`, v.Reason,
			"with errors before the restart on both, the other workloads are the control")
	})

	// Each is failed on the looks in which its old pods served beside its
	// new ones, and the reason names them as the control.
	for ns, name := range map[string]string{"rolling": "reviews", "ledger": "StatefulSet/reviews"} {
		t.Run(ns+": a broken rollout is held to the workload's pods not yet replaced", func(t *testing.T) {
			st := waitForPhase(f, ns, canary.PhaseRolledBack, 3*time.Minute)
			v, after := decidedAfter(t, st)
			t.Logf("%s: failed %s after the wave started: %s", ns, after, v.Reason)
			assert.Regexp(t, `^`+regexp.QuoteMeta(name)+`: error ratio 3\d\.\d\d% \(\d+/\d+\), 3\d\.\d\d% \(\d+/\d+\) of it against its pods not yet replaced's 0\.00% \(0/\d+\) in the \d+ looks both served, against 0\.00% \(0/\d+\) before the restart; `+
				`control: its pods not yet replaced in \d+ looks, else its own error ratio before the restart; evidence \S+ of 40: fail$`, v.Reason)
			require.Len(t, v.Measurements, 1)
			assert.Regexp(t, `^its pods not yet replaced in \d+ looks, else its own error ratio before the restart$`, v.Measurements[0].Control)
		})
	}
}

// ownLooks is the part of a reason that gives the looks held to the
// workload's pods not yet replaced, when there were any.
const ownLooks = `(, 3\d\.\d\d% \(\d+/\d+\) of it against its pods not yet replaced's 0\.00% \(0/\d+\) in the \d+ looks both served,)?`
