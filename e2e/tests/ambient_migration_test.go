package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
)

// TestANamespaceMovesFromSidecarsToAmbientInWaves runs the move to ambient
// on Istio's own istiod and injector, with a simulated ztunnel on each node
// and a simulated istio-cni node agent.
func TestANamespaceMovesFromSidecarsToAmbientInWaves(t *testing.T) {
	f := ambientWorld(t)
	cni, err := f.World.Mesh.StartCNI(f.Ctx)
	require.NoError(t, err)
	t.Cleanup(cni.Stop)
	zs := installZtunnel(f, "1-26")
	installCNI(f)
	cfg := testConfig(f)
	counter := newAPICounter()
	startAgentWithOptions(t, f, cfg, counter, "agent-ambient", withDynamic(f))

	t.Run("Deployments, a StatefulSet and a DaemonSet leave their sidecars wave by wave, the sidecars moved onto the ambient revision first", func(t *testing.T) {
		f := f.For(t)
		const ns = "amb"
		wave := func(v string) fixture.DeploymentOption {
			return func(d *appsv1.Deployment) { d.Annotations = map[string]string{canary.AnnotationWave: v} }
		}
		db := fixture.NewStatefulSet(ns, "db", 2, appsv1.RollingUpdateStatefulSetStrategyType)
		db.Annotations = map[string]string{canary.AnnotationWave: "1"}
		agentDS := fixture.NewDaemonSet(ns, "agent")
		agentDS.Annotations = map[string]string{canary.AnnotationWave: "2"}
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
			Deployment(ns, "web", fixture.Replicas(2), wave("0")).Deployment(ns, "api", fixture.Replicas(2), wave("1")).
			StatefulSet(db).DaemonSet(agentDS).RolledOut(ns)
		f.WaitForStatefulSetRolledOut(ns, "db")
		f.WaitForDaemonSetRolledOut(ns, "agent")

		mode := "ambient"
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode)
		optIn(f, ns, "1-26", 10)

		// The ambient migration's first wave: web leaves its sidecar. A
		// pod of api, whose wave comes later, is deleted meanwhile (a
		// drain, an eviction): it must come back with its sidecar.
		f.EventuallyWithin("web's move to ambient", 3*time.Minute, func() (bool, string) {
			r, ok := moveRecord(f, ns, "web")
			return ok && r.Mode == canary.ModeAmbient, fmt.Sprint(r)
		})
		before := map[string]bool{}
		for _, p := range f.Pods(ns, map[string]string{"app": "api"}) {
			before[p.Name] = true
		}
		gone := slices.Sorted(maps.Keys(before))[0]
		require.NoError(t, f.Client.CoreV1().Pods(ns).Delete(f.Ctx, gone, metav1.DeleteOptions{}))
		f.Eventually("api's deleted pod to come back from its old template, Ready", func() (bool, string) {
			for _, p := range f.Pods(ns, map[string]string{"app": "api"}) {
				if before[p.Name] || p.Labels[mesh.LabelDataplaneMode] != "" {
					continue
				}
				if !fixture.PodReady(p) {
					return false, p.Name + " is not Ready"
				}
				assert.Equal(t, "1-26", canary.SidecarRevision(p.Annotations), "pod %s of a workload not moved yet keeps its sidecar", p.Name)
				assert.True(t, hasProxy(p), "pod %s runs istio-proxy", p.Name)
				assert.Empty(t, p.Annotations[mesh.AnnotationRedirection], "pod %s is never redirected", p.Name)
				return true, ""
			}
			return false, "no new pod yet"
		})

		st := waitForPhase(f, ns, canary.PhaseCompleted, 4*time.Minute)
		for st.Mode != canary.ModeAmbient {
			// The sidecar step completed first; the move to ambient follows.
			st = waitForPhase(f, ns, canary.PhaseCompleted, 4*time.Minute)
		}
		assert.Equal(t, "moved 4 workloads to ambient (1-26) in 3 waves", st.Reason)
		assert.True(t, st.NamespaceEnrolled)
		// The last wave (the DaemonSet, a pod a node) was held by each
		// node's ztunnel as HBONE, read from its config dump through the
		// apiserver's port-forward.
		sync, ok := verdictOf(st, "xds-sync")
		require.True(t, ok)
		assert.Equal(t, "3 of 3 ztunnels SYNCED with istiod 1-26; 3 of 3 pods held as HBONE by their node's ztunnel", sync.Reason)
		nsObj, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, mesh.DataplaneModeAmbient, nsObj.Labels[mesh.LabelDataplaneMode])
		assert.NotContains(t, nsObj.Labels, mesh.LabelRev)
		assert.NotContains(t, nsObj.Labels, "istio-injection")

		_, dbPods := f.WaitForStatefulSetRolledOut(ns, "db")
		_, agentPods := f.WaitForDaemonSetRolledOut(ns, "agent")
		webPods, _, err := f.DeploymentPods(ns, "web")
		require.NoError(t, err)
		apiPods, _, err := f.DeploymentPods(ns, "api")
		require.NoError(t, err)
		all := slices.Concat(webPods, apiPods, dbPods, agentPods)
		assert.Len(t, all, 2+2+2+3)
		f.Eventually("every pod in ambient, redirected and held by ztunnel as HBONE", func() (bool, string) {
			for _, p := range all {
				uid := "Kubernetes//Pod/" + p.Namespace + "/" + p.Name
				switch {
				case hasProxy(p):
					return false, p.Name + " runs a sidecar"
				case p.Labels[mesh.LabelDataplaneMode] != mesh.DataplaneModeAmbient:
					return false, p.Name + " is not labelled ambient"
				case p.Annotations[mesh.AnnotationRedirection] != mesh.RedirectionEnabled:
					p, _ = f.Client.CoreV1().Pods(ns).Get(f.Ctx, p.Name, metav1.GetOptions{})
					if p == nil || p.Annotations[mesh.AnnotationRedirection] != mesh.RedirectionEnabled {
						return false, "a pod is not redirected"
					}
				}
				for _, z := range zs {
					if got := z.Protocol(uid); got != "HBONE" {
						return false, fmt.Sprintf("%s holds %s as %q", z.ID(), p.Name, got)
					}
				}
			}
			return true, ""
		})
		// The pods in ambient still need 1-26: its ztunnels serve them.
		out, code := runCLIExit(t, f, "holders", "1-26", "-o", "json")
		assert.Equal(t, 3, code, out)
		var held canary.Holders
		require.NoError(t, json.Unmarshal([]byte(out), &held), out)
		var mine []string
		for _, h := range held.Ambient {
			if h.Namespace == ns {
				mine = append(mine, fmt.Sprintf("%s/%s %d pods", h.Kind, h.Name, len(h.Pods)))
			}
		}
		assert.Equal(t, []string{"DaemonSet/agent 3 pods", "Deployment/api 2 pods", "Deployment/web 2 pods", "StatefulSet/db 2 pods"}, mine)

		// Each workload written twice: onto 1-26's sidecar, then out of it.
		for _, w := range []string{"deployments " + ns + "/web", "deployments " + ns + "/api", "statefulsets " + ns + "/db", "daemonsets " + ns + "/agent"} {
			assert.Equal(t, 2, counter.get("PATCH "+w), w)
		}
	})

	t.Run("a wave whose ztunnel stops ACKing is rolled back onto the sidecar, its injection checked again", func(t *testing.T) {
		f := f.For(t)
		const ns = "amb-stale"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
			Deployment(ns, "a", fixture.Replicas(1)).Deployment(ns, "b", fixture.Replicas(1)).RolledOut(ns)
		for _, z := range zs {
			z.SetStatus(mesh.TypeAddress, statusv3.ConfigStatus_STALE)
		}
		t.Cleanup(func() {
			for _, z := range zs {
				z.SetStatus(mesh.TypeAddress, statusv3.ConfigStatus_SYNCED)
			}
		})
		mode := "ambient"
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode)
		optIn(f, ns, "1-26", 20)
		st := waitForPhase(f, ns, canary.PhaseRolledBack, 3*time.Minute)
		assert.Equal(t, canary.ModeAmbient, st.Mode)
		require.NotEmpty(t, st.Failures)
		assert.Contains(t, st.Failures[0].Reason, "STALE on WDS")
		r, ok := moveRecord(f, ns, "a")
		require.True(t, ok)
		assert.True(t, r.Rollback)
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, "a", metav1.GetOptions{})
		require.NoError(t, err)
		assert.NotContains(t, d.Spec.Template.Labels, mesh.LabelDataplaneMode)
		assert.NotContains(t, d.Spec.Template.Labels, "sidecar.istio.io/inject")
		f.Then().PodsOnRevision(ns, "a", "1-26")
		f.Then().PodsOnRevision(ns, "b", "1-26")
		assert.Equal(t, 2, counter.get("PATCH deployments "+ns+"/a"), "into ambient, and back")
		assert.Zero(t, counter.get("PATCH deployments "+ns+"/b"), "the later wave never started")
	})

	t.Run("a ztunnel that ACKs a pod it does not hold rolls the wave back, the pod named from its config dump", func(t *testing.T) {
		f := f.For(t)
		const ns = "amb-unheld"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
			Deployment(ns, "a", fixture.Replicas(1)).RolledOut(ns)
		for _, z := range zs {
			z.Forget(ns)
		}
		t.Cleanup(func() {
			for _, z := range zs {
				z.Forget("")
			}
		})
		mode := "ambient"
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode)
		optIn(f, ns, "1-26", 20)
		st := waitForPhase(f, ns, canary.PhaseRolledBack, 3*time.Minute)
		assert.Equal(t, canary.ModeAmbient, st.Mode)
		require.Len(t, st.Failures, 1)
		assert.Equal(t, "a", st.Failures[0].Workload)
		assert.Equal(t, "xds-sync", st.Failures[0].Gate)
		assert.Regexp(t, `^ztunnel-\S+ does not hold pod a-\S+$`, st.Failures[0].Reason, "syncz said SYNCED; the dump did not list the pod")
		f.Then().PodsOnRevision(ns, "a", "1-26")
		assert.Equal(t, 2, counter.get("PATCH deployments "+ns+"/a"), "into ambient, and back")
	})

	ambientPolicyAndLostStatus(t, f, counter)
}

// ambientPolicyAndLostStatus runs in the world of the move above, in
// namespaces of their own: the policy prechecks, and a lost status.
func ambientPolicyAndLostStatus(t *testing.T, f *fixture.Fixture, counter *apiCounter) {
	dyn, err := dynamic.NewForConfig(f.World.Cluster.Config)
	require.NoError(t, err)
	mode := "ambient"

	t.Run("a selector AuthorizationPolicy with L7 rules and a PeerAuthentication DISABLE block the move by name, before anything is written", func(t *testing.T) {
		f := f.For(t)
		const ns = "amb-policy"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).Deployment(ns, "a", fixture.Replicas(1)).RolledOut(ns)
		aps := dyn.Resource(schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}).Namespace(ns)
		pas := dyn.Resource(schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}).Namespace(ns)
		_, err := aps.Create(f.Ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
			"metadata": map[string]any{"name": "admin-paths", "namespace": ns},
			"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "a"}},
				"rules": []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"paths": []any{"/admin"}}}}}}},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = pas.Create(f.Ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
			"metadata": map[string]any{"name": "plaintext", "namespace": ns},
			"spec":     map[string]any{"mtls": map[string]any{"mode": "DISABLE"}},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode)
		optIn(f, ns, "1-26", 30)
		st := waitForPhase(f, ns, canary.PhaseBlocked, time.Minute)
		assert.Equal(t, canary.BlockedPrecheck, st.BlockedKind)
		assert.Equal(t, "precheck failed: PeerAuthentication amb-policy/plaintext sets mTLS mode DISABLE: ambient always uses mTLS between mesh workloads, and ignores it; remove it, or set PERMISSIVE; "+
			"AuthorizationPolicy amb-policy/admin-paths selects workloads by spec.selector and holds what ztunnel cannot enforce (to.operation.paths): once the pods leave their sidecar, ztunnel denies all their traffic (an ALLOW) or drops its HTTP conditions (a DENY: wider, or void when it has no other); move it to targetRefs on a waypoint first", st.Reason)
		assert.Zero(t, counter.get("PATCH deployments "+ns+"/a"), "nothing is written before the first wave")
		f.Eventually("an Event naming the policy", func() (bool, string) {
			evs := strings.Join(eventsFor(f, "Namespace", ns, ns), "\n")
			return strings.Contains(evs, "amb-policy/admin-paths"), evs
		})

		// The policies moved away (to a waypoint's targetRefs, say), the move goes on.
		require.NoError(t, aps.Delete(f.Ctx, "admin-paths", metav1.DeleteOptions{}))
		require.NoError(t, pas.Delete(f.Ctx, "plaintext", metav1.DeleteOptions{}))
		st = waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
		assert.Equal(t, canary.ModeAmbient, st.Mode)
		assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/a"))
	})

	t.Run("a status lost mid-wave is rebuilt from the records, and no workload is restarted twice", func(t *testing.T) {
		f := f.For(t)
		const ns = "amb-lost"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
			Deployment(ns, "a", fixture.Replicas(1)).Deployment(ns, "b", fixture.Replicas(1)).Deployment(ns, "c", fixture.Replicas(1)).RolledOut(ns)
		release := holdNew(f, ns, "a")
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &mode)
		optIn(f, ns, "1-26", 40)
		f.EventuallyWithin("a's move to ambient", time.Minute, func() (bool, string) {
			r, ok := moveRecord(f, ns, "a")
			return ok && r.Mode == canary.ModeAmbient && r.Wave == 1, fmt.Sprint(r)
		})
		f.When().AnnotateNamespace(ns, canary.AnnotationStatus, nil)
		f.EventuallyWithin("the status rebuilt from the records", time.Minute, func() (bool, string) {
			st := status(f, ns)
			return st != nil && st.Mode == canary.ModeAmbient && st.Wave == 1 && strings.HasPrefix(st.Reason, "adopted from"), fmt.Sprint(st)
		})
		release()
		st := waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
		assert.Equal(t, canary.ModeAmbient, st.Mode)
		assert.True(t, st.NamespaceEnrolled)
		for _, w := range []string{"a", "b", "c"} {
			assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/"+w), w)
		}
	})
}

// hasProxy reports whether Istio injected the pod: an istio-proxy
// container, or its sidecar status.
func hasProxy(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == mesh.ProxyContainer {
			return true
		}
	}
	_, st := p.Annotations[canary.AnnotationSidecar]
	return st
}
