package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestAMoveToAmbientBehindAWaypointIsJudgedThroughIt runs the move to
// ambient with a waypoint that Istio's own istiod deploys for a Gateway of
// class istio-waypoint, its proxy connected to istiod as a waypoint node,
// and the metric checks on the real Prometheus, reading the series the
// waypoint reports (reporter="waypoint").
func TestAMoveToAmbientBehindAWaypointIsJudgedThroughIt(t *testing.T) {
	f := fixture.New(t, world.Options{Revisions: []mesh.Revision{
		{Name: "1-25"}, {Name: "1-26", Env: map[string]string{"PILOT_ENABLE_AMBIENT": "true"}},
	}})
	require.NoError(t, f.World.Mesh.InstallGatewayAPI(f.Ctx))
	cni, err := f.World.Mesh.StartCNI(f.Ctx)
	require.NoError(t, err)
	t.Cleanup(cni.Stop)
	zs := installZtunnel(f, "1-26")
	installCNI(f)
	dyn, err := dynamic.NewForConfig(f.World.Cluster.Config)
	require.NoError(t, err)
	gatewaysResource := schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	waypoint := func(f *fixture.Fixture, ns string) {
		f.T.Helper()
		gw := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
			"metadata": map[string]any{"name": "waypoint", "namespace": ns, "labels": map[string]any{mesh.LabelRev: "1-26"}},
			"spec": map[string]any{"gatewayClassName": "istio-waypoint",
				"listeners": []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}}},
		}}
		f.Eventually("the Gateway to be created (its CRD established)", func() (bool, string) {
			_, err := dyn.Resource(gatewaysResource).Namespace(ns).Create(f.Ctx, gw, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err)
		})
		f.WaitForRolledOut(ns, "waypoint")
	}
	cfg, q := withMetrics(t, f, testConfig(f))
	cfg.CanarySize, cfg.BatchSize = 1, 2
	counter := newAPICounter()
	reg := prometheus.NewRegistry()
	startAgentWithOptions(t, f, cfg, counter, "agent-waypoint", func(o *agent.Options) {
		withDynamic(f)(o)
		o.GateDeps.Prometheus = q
		o.Registerer = reg
	})
	mode, name := "ambient", "waypoint"

	t.Run("Deployments, a StatefulSet and a DaemonSet leave their sidecars behind the waypoint, judged on its series", func(t *testing.T) {
		f := f.For(t)
		const ns = "wp"
		db := fixture.NewStatefulSet(ns, "db", 2, appsv1.RollingUpdateStatefulSetStrategyType)
		agentDS := fixture.NewDaemonSet(ns, "agent")
		agentDS.Annotations = map[string]string{canary.AnnotationWave: "2"}
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
			Deployment(ns, "web", waveAnnotation("0")).Deployment(ns, "api", waveAnnotation("1")).StatefulSet(db).DaemonSet(agentDS).RolledOut(ns)
		f.WaitForStatefulSetRolledOut(ns, "db")
		f.WaitForDaemonSetRolledOut(ns, "agent")
		waypoint(f, ns)
		// Subset routing Istio's guide moves to HTTPRoute: a warning, not a block.
		_, err := dyn.Resource(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}).Namespace(ns).Create(f.Ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
			"metadata": map[string]any{"name": "web", "namespace": ns},
			"spec":     map[string]any{"host": "web", "subsets": []any{map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}}}},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		waitForTraffic(t, f, ns, 4)
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode).AnnotateNamespace(ns, canary.AnnotationWaypoint, &name)
		optIn(f, ns, "1-26", 10)

		st := waitForPhase(f, ns, canary.PhaseCompleted, 4*time.Minute)
		assert.Equal(t, canary.ModeAmbient, st.Mode)
		assert.Equal(t, "waypoint", st.WaypointSet)
		assert.True(t, st.NamespaceEnrolled)
		assert.Contains(t, st.Warnings, "DestinationRule wp/web defines subsets (v1): a pod in ambient is reached through ztunnel, which applies no subset, and a waypoint applies VirtualServices only in part; move them to an HTTPRoute with a Service per version, as Istio's guide says")
		assert.Contains(t, st.Warnings, `dashboards and alerts keyed on reporter="destination" lose the moved workloads' requests: in ambient no sidecar reports them; a waypoint reports them with reporter="waypoint", and ztunnel only connections (istio_tcp_*)`)
		nsObj, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "waypoint", nsObj.Labels[canary.LabelUseWaypoint])
		assert.Equal(t, mesh.DataplaneModeAmbient, nsObj.Labels[mesh.LabelDataplaneMode])
		waitForEvent(f, "Namespace", "", ns, "WaypointUsed: namespace wp is labelled istio.io/use-waypoint=waypoint before its workloads leave their sidecars")

		var gates []string
		for _, v := range st.Verdicts {
			gates = append(gates, v.Gate+"="+string(v.Result))
		}
		assert.Equal(t, []string{"rollout=Pass", "injection=Pass", "xds-sync=Pass", "error-rate=Pass", "latency-p99=Pass"}, gates)
		sync, _ := verdictOf(st, "xds-sync")
		assert.Regexp(t, `^\d+ of \d+ ztunnels SYNCED with istiod 1-26; \d+ of \d+ pods held as HBONE by their node's ztunnel; waypoint waypoint: 1 of 1 proxies SYNCED with istiod 1-26$`, sync.Reason)
		er, _ := verdictOf(st, "error-rate")
		require.NotEmpty(t, er.Measurements)
		for _, m := range er.Measurements {
			assert.Equal(t, 0.0, m.Value, "through the waypoint, %s answers no 5xx", m.Workload)
			require.NotNil(t, m.Baseline, "held against its sidecars' series before the restart")
		}
		assert.NoError(t, f.World.Prometheus.WaitForQuery(f.Ctx, fmt.Sprintf(`sum(increase(istio_requests_total{reporter="waypoint",destination_workload_namespace=%q,destination_workload="db"}[10s])) > 50`, ns), 1, 30*time.Second),
			"the waypoint reports db's requests")

		// No pod keeps a sidecar; each is redirected and held by ztunnel as HBONE.
		moved := 0
		for _, w := range []string{"web", "api", "db", "agent"} {
			for _, p := range f.Pods(ns, map[string]string{"app": w}) {
				moved++
				assert.False(t, hasProxy(p), "%s runs a sidecar", p.Name)
				assert.Equal(t, mesh.RedirectionEnabled, p.Annotations[mesh.AnnotationRedirection], p.Name)
				for _, z := range zs {
					assert.Equal(t, "HBONE", z.Protocol("Kubernetes//Pod/"+ns+"/"+p.Name), p.Name)
				}
			}
		}
		// The dashboard's mode of the namespace's waves.
		assert.Equal(t, 1.0, gathered(t, reg, "meshwave_namespace_info", map[string]string{"namespace": ns, "target_revision": "1-26", "mode": "ambient"}))
		// They hold 1-26 through its ztunnels: the holders metric counts them.
		assert.Equal(t, float64(moved), gathered(t, reg, "meshwave_revision_holders", map[string]string{"revision": "1-26", "reason": string(canary.ReasonAmbient)}), "meshwave_revision_holders{revision=1-26,reason=ambient}")
		for _, w := range []string{"deployments " + ns + "/web", "deployments " + ns + "/api", "statefulsets " + ns + "/db", "daemonsets " + ns + "/agent"} {
			assert.Equal(t, 1, counter.get("PATCH "+w), w)
		}
		assert.Zero(t, counter.get("PATCH deployments "+ns+"/waypoint"), "the waypoint itself is never restarted")
	})

	t.Run("a wave whose error rate through the waypoint rises is rolled back onto its sidecars, the waypoint label meshwave set taken off and the policy it deleted put back", func(t *testing.T) {
		f := f.For(t)
		const ns = "wp-bad"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
			Deployment(ns, "reviews", waveAnnotation("0")).Deployment(ns, "details", waveAnnotation("1")).RolledOut(ns)
		waypoint(f, ns)
		// reviews' sidecar enforces an L7 policy; its replacement on the
		// waypoint holds the same rules. Istio's guide deletes the first
		// right after the restart, which meshwave does when asked.
		policies := dyn.Resource(schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}).Namespace(ns)
		rules := []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"methods": []any{"GET", "POST"}}}}}}
		selectorPolicy, err := policies.Create(f.Ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
			"metadata": map[string]any{"name": "reviews-methods", "namespace": ns, "labels": map[string]any{"team": "reviews"}},
			"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "reviews"}}, "rules": rules},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = policies.Create(f.Ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
			"metadata": map[string]any{"name": "reviews-methods-waypoint", "namespace": ns},
			"spec": map[string]any{"targetRefs": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "waypoint"}},
				"rules": rules},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		f.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "reviews"}, mesh.AmbientRevision, mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
		waitForTraffic(t, f, ns, 2)
		yes := "true"
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode).AnnotateNamespace(ns, canary.AnnotationWaypoint, &name).
			AnnotateNamespace(ns, canary.AnnotationDeleteReplacedPolicies, &yes)
		optIn(f, ns, "1-26", 20)

		waitForEvent(f, "Namespace", "", ns, "ReplacedPolicyDeleted: AuthorizationPolicy wp-bad/reviews-methods is deleted: every workload it selects (deployment reviews) left its sidecar, and reviews-methods-waypoint replaces it on the waypoint")
		st, _ := rolledBackOnItsErrorRate(f, ns, "reviews", 1, "through the waypoint")
		assert.Contains(t, st.Warnings, "AuthorizationPolicy wp-bad/reviews-methods, replaced by reviews-methods-waypoint, will be deleted right after the restart of the workloads it selects, as meshwave.io/delete-replaced-policies asks; its copy is kept in meshwave.io/replaced-policies, and a rollback puts it back")
		waitForEvent(f, "Namespace", "", ns, "ReplacedPolicyRestored: AuthorizationPolicy wp-bad/reviews-methods, deleted when the workloads it selects left their sidecars, is created again from its copy")
		restored, err := policies.Get(f.Ctx, "reviews-methods", metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotEqual(t, selectorPolicy.GetUID(), restored.GetUID(), "created again")
		assert.Equal(t, selectorPolicy.Object["spec"], restored.Object["spec"], "from its copy")
		assert.Equal(t, map[string]string{"team": "reviews"}, restored.GetLabels())
		f.Eventually("the copy to be dropped once it served", func() (bool, string) {
			n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			_, kept := n.Annotations[canary.AnnotationReplacedPolicies]
			return !kept, n.Annotations[canary.AnnotationReplacedPolicies]
		})

		// Back on its sidecar, injection checked again by the rollback's gates.
		f.WaitForRolledOut(ns, "reviews")
		f.Then().PodsOnRevision(ns, "reviews", "1-26").PodsOnRevision(ns, "details", "1-26")
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, "reviews", metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotContains(t, d.Spec.Template.Labels, mesh.LabelDataplaneMode)
		f.Eventually("the waypoint label meshwave set to be taken off", func() (bool, string) {
			n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			_, has := n.Labels[canary.LabelUseWaypoint]
			return !has, fmt.Sprint(n.Labels)
		})
		waitForEvent(f, "Namespace", "", ns, "WaypointReleased: no pod of namespace wp-bad runs in ambient any more")
		_, err = dyn.Resource(gatewaysResource).Namespace(ns).Get(f.Ctx, "waypoint", metav1.GetOptions{})
		assert.NoError(t, err, "the Gateway a person made is never deleted")
		assert.Equal(t, 2, counter.get("PATCH deployments "+ns+"/reviews"), "into ambient, and back")
		assert.Zero(t, counter.get("PATCH deployments "+ns+"/details"), "the next wave never started")
		assert.True(t, strings.HasPrefix(st.Failures[0].Reason, "error-rate"), st.Failures[0].Reason)
	})

	t.Run("without a waypoint, a wave passes on ztunnel's connections without a latency check, and one whose connections ztunnel fails is rolled back onto its sidecars", func(t *testing.T) {
		f := f.For(t)
		const ns = "zt-bad"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
			Deployment(ns, "web", waveAnnotation("0")).Deployment(ns, "cart", waveAnnotation("1")).RolledOut(ns)
		f.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "cart"}, mesh.AmbientRevision, mesh.Behavior{ErrorRatio: 0.3, LatencyMs: 40})
		waitForTraffic(t, f, ns, 2)
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode)
		optIn(f, ns, "1-26", 30)

		// web's wave passes on the share of connections ztunnel failed
		// (none); no proxy sees a request, so no latency check runs.
		waitForEvent(f, "Namespace", "", ns, "WavePassed: wave 1 passed (rollout, injection, xds-sync, error-rate): moved web")
		_, m := rolledBackOnItsErrorRate(f, ns, "cart", 2, "from ztunnel's failed connections")
		assert.Nil(t, m.Baseline, "ztunnel's connections have no sidecar baseline")
		f.WaitForRolledOut(ns, "cart")
		f.Then().PodsOnRevision(ns, "cart", "1-26")
		assert.Equal(t, 2, counter.get("PATCH deployments "+ns+"/cart"), "into ambient, and back")
		assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/web"), "the wave that passed stays in ambient")
	})
}

// rolledBackOnItsErrorRate waits for namespace ns to be rolled back for
// workload's error rate, staged at 30% in ambient, failing its wave, and
// returns the status and the measurement, read as read says.
func rolledBackOnItsErrorRate(f *fixture.Fixture, ns, workload string, wave int, read string) (*canary.Status, canary.Measurement) {
	t := f.T
	t.Helper()
	st := waitForPhase(f, ns, canary.PhaseRolledBack, 4*time.Minute)
	assert.Regexp(t, fmt.Sprintf(`^rolled back 1 workloads to 1-26: wave %d failed: error-rate fail: %s: \d+\.\d\d%% > threshold 5\.00%%`, wave, workload), st.Reason)
	er, ok := verdictOf(st, "error-rate")
	require.True(t, ok)
	require.Len(t, er.Measurements, 1)
	t.Logf("%s in ambient, staged at 30%% errors, measured %.2f%% %s", workload, er.Measurements[0].Value*100, read)
	assert.InDelta(t, 0.3, er.Measurements[0].Value, 0.05)
	return st, er.Measurements[0]
}

// gathered is the value of the series of metric name whose labels
// include want, as reg gathers it.
func gathered(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range want {
				match = match && labels[k] == v
			}
			if match {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}
