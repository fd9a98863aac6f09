package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestOutagesAdvanceNothingAndLoseNothing takes the agent's dependencies
// away, or makes them answer badly, in the middle of a migration, one
// namespace each on one world. Each case must end with nothing advanced
// that should not have, and nothing restarted twice.
func TestOutagesAdvanceNothingAndLoseNothing(t *testing.T) {
	shared := fixture.New(t, world.Options{})

	t.Run("the apiserver restarted mid-wave", func(t *testing.T) {
		f := shared.For(t)
		const ns = "apirestart"
		threeWorkloads(f, ns)
		release := holdNew(f, ns, "b")
		cfg := testConfig(f)
		cfg.BatchSize = 2
		optIn(f, ns, "1-26", 10)
		// The agent runs as in its Deployment: an agent that loses its lease
		// (the apiserver is gone for longer than the renew deadline) exits,
		// and is started again.
		r := startReplica(t, f, cfg, "agent-"+ns, &writeLog{}, restartedOnLostLease())
		waitForMove(f, ns, "c", 2)
		require.NoError(t, f.World.Cluster.RestartAPIServer(f.Ctx))
		release()
		st := waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
		r.stop()
		t.Logf("the agent was restarted %d times", r.restarts)
		assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", st.Reason)
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, restarts(f, ns, "a", "b", "c"))
	})

	t.Run("every target istiod pod gone between waves", func(t *testing.T) {
		f := shared.For(t)
		const ns = "noistiod"
		threeWorkloads(f, ns)
		cfg := testConfig(f)
		cfg.BatchSize = 2
		cfg.DelayBetweenWaves = agent.Duration(3 * time.Second)
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, cfg, newAPICounter(), "agent-"+ns)
		f.Eventually("wave 1 passed", func() (bool, string) {
			st := status(f, ns)
			return st != nil && st.WaveState == canary.WavePassed, fmt.Sprint(st)
		})
		scaleIstiod(f, "1-26", 0)
		st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
		assert.Equal(t, "wave 2 not started: revision 1-26 has no Ready istiod pod (0 pods): nothing moves onto a revision without a control plane", st.Reason)
		assert.Equal(t, map[string]int{"a": 1, "b": 0, "c": 0}, restarts(f, ns, "a", "b", "c"), "nothing moves onto a revision without a control plane")

		scaleIstiod(f, "1-26", 1)
		f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
		st = waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		a.Kill()
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, restarts(f, ns, "a", "b", "c"))
	})

	t.Run("Prometheus answering slower than the query timeout", func(t *testing.T) {
		f := shared.For(t)
		const ns = "slowprom"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "a").Deployment(ns, "b").RolledOut(ns)
		waitForTraffic(t, f, ns, 2)
		slow := slowProxy(t, f.World.Prometheus.URL, 3*time.Second)
		cfg, _ := withMetrics(t, f, testConfig(f))
		cfg.Gates.Metrics.Prometheus.URL = slow
		cfg.Gates.Metrics.QueryTimeout = agent.Duration(time.Second)
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, cfg, newAPICounter(), "agent-"+ns)
		st := waitForPhase(f, ns, canary.PhasePaused, 2*time.Minute)
		a.Kill()
		assert.Regexp(t, `^wave 1 paused: error-rate inconclusive 3 times: Prometheus did not answer: .*(context deadline exceeded|Client.Timeout)`, st.Reason)
		assert.Equal(t, map[string]int{"a": 1, "b": 0}, restarts(f, ns, "a", "b"), "an inconclusive wave never advances")
		// Stopped, it frees its slot for the next cases.
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, nil)
		startAgent(t, f, cfg, newAPICounter(), "agent-"+ns+"-2")
		waitForPhase(f, ns, canary.PhaseStopped, time.Minute)
	})

	t.Run("conflicts, throttling and server errors are retried, counted, and fail nothing", func(t *testing.T) {
		f := shared.For(t)
		const ns = "flaky"
		threeWorkloads(f, ns)
		cfg := testConfig(f)
		cfg.BatchSize = 2
		log := &writeLog{}
		reg := prometheus.NewRegistry()
		agent.RegisterClientMetrics(reg)
		var injected atomic.Int32
		optIn(f, ns, "1-26", 10)
		r := startReplica(t, f, cfg, "agent-"+ns, log, withRegistry(reg), withLink(func(l *link) {
			// Each write to the namespace or its Deployments is first
			// answered 429, then 500 (Deployments) or 409 (the namespace),
			// then let through.
			seen := map[string]int{}
			var mu atomicMap
			l.intercept = func(req *http.Request, obj string) *http.Response {
				if req.Method == http.MethodGet || (obj != "namespaces "+ns && !strings.HasPrefix(obj, "deployments "+ns+"/")) {
					return nil
				}
				n := mu.inc(seen, obj)
				switch {
				case n%3 == 1:
					injected.Add(1)
					return apiError(http.StatusTooManyRequests, "TooManyRequests", "too many requests, slow down")
				case n%3 == 2 && strings.HasPrefix(obj, "namespaces "):
					injected.Add(1)
					return apiError(http.StatusConflict, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
				case n%3 == 2:
					injected.Add(1)
					return apiError(http.StatusInternalServerError, "InternalError", "an error on the server has prevented the request from succeeding")
				}
				return nil
			}
		}))
		st := waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
		assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", st.Reason)
		assert.Empty(t, st.Failures)
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, restarts(f, ns, "a", "b", "c"))
		_, body, err := r.get("/metrics")
		require.NoError(t, err)
		for _, code := range []string{"429", "409", "500"} {
			assert.Regexp(t, `meshwave_kube_requests_total\{code="`+code+`",method="PATCH"\} [1-9]`, body, "the %s answers show in the metrics", code)
		}
		t.Logf("%d bad answers injected", injected.Load())
	})

	t.Run("a person changes a Deployment's image mid-wave", func(t *testing.T) {
		f := shared.For(t)
		const ns = "edit"
		threeWorkloads(f, ns)
		release := holdNew(f, ns, "b")
		cfg := testConfig(f)
		cfg.BatchSize = 2
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, cfg, newAPICounter(), "agent-"+ns)
		waitForMove(f, ns, "b", 2)
		patch := `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/b:2.0"}]}}}}`
		_, err := f.Client.AppsV1().Deployments(ns).Patch(f.Ctx, "b", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		release()
		waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		a.Kill()
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, "b", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "registry.example/b:2.0", d.Spec.Template.Spec.Containers[0].Image, "the person's edit survives")
		assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 1}, restarts(f, ns, "a", "b", "c"), "b changed twice: meshwave's restart and the person's image, no second restart")
		f.Then().PodsOnRevision(ns, "b", "1-26")
	})

	t.Run("decoy namespaces take no write during a migration elsewhere", func(t *testing.T) {
		f := shared.For(t)
		const ns = "real"
		threeWorkloads(f, ns)
		for i := 0; i < 10; i++ {
			decoy := fmt.Sprintf("decoy-%d", i)
			var annotations map[string]string
			if i%2 == 1 {
				// An earlier migration's finished status, target removed since.
				annotations = map[string]string{canary.AnnotationStatus: fmt.Sprintf(`{"phase":%q,"reason":"an earlier migration","target":"1-24","targetRevision":"1-24","sourceLabel":"1-23","sourceRevision":"1-23","wave":2,"totalWaves":2,"counts":{"total":2,"pending":0,"moving":0,"moved":2,"failed":0,"skipped":0},"startedAt":"2026-01-01T00:00:00Z"}`,
					[]canary.Phase{canary.PhaseCompleted, canary.PhaseRolledBack, canary.PhaseStopped}[i%3])}
			}
			f.Given().Namespace(decoy, map[string]string{mesh.LabelRev: "1-25"}, annotations).Deployment(decoy, "app", fixture.Replicas(1))
		}
		log := &writeLog{}
		cfg := testConfig(f)
		cfg.BatchSize = 2
		optIn(f, ns, "1-26", 10)
		r := startReplica(t, f, cfg, "agent-"+ns, log)
		waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		r.stop()
		var decoyWrites []string
		for _, w := range log.matching("") {
			if strings.Contains(w.object, "decoy-") {
				decoyWrites = append(decoyWrites, w.verb+" "+w.object)
			}
		}
		assert.Empty(t, decoyWrites)
		assert.NotEmpty(t, log.matching("namespaces "+ns), "the migration elsewhere was written")
	})
}

// restarts counts the template changes of each Deployment where they
// happen: the apiserver bumps a Deployment's generation on each.
func restarts(f *fixture.Fixture, ns string, names ...string) map[string]int {
	f.T.Helper()
	out := map[string]int{}
	for _, n := range names {
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, n, metav1.GetOptions{})
		require.NoError(f.T, err)
		out[n] = int(d.Generation) - 1
	}
	return out
}

// scaleIstiod scales a revision's istiod and waits until it has that many
// Ready pods.
func scaleIstiod(f *fixture.Fixture, rev string, replicas int32) {
	f.T.Helper()
	root := f.World.Mesh.RootNamespace()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err := f.Client.AppsV1().Deployments(root).Patch(f.Ctx, "istiod-"+rev, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(f.T, err)
	f.Eventually(fmt.Sprintf("istiod %s at %d Ready pods", rev, replicas), func() (bool, string) {
		pods, err := f.Client.CoreV1().Pods(root).List(f.Ctx, metav1.ListOptions{LabelSelector: "app=istiod,istio.io/rev=" + rev})
		require.NoError(f.T, err)
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return ready == int(replicas) && len(pods.Items) == int(replicas), fmt.Sprintf("%d pods, %d ready", len(pods.Items), ready)
	})
}

// slowProxy serves target's API after delay, on 127.0.0.1.
func slowProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// apiError is an apiserver's error answer.
func apiError(code int, reason, message string) *http.Response {
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`, message, reason, code)
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ProtoMajor: 1, ProtoMinor: 1}
}
