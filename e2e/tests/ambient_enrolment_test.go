package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
)

// TestPodLabelsEnrolAWorkloadInAmbientWhileItsNamespaceKeepsItsSidecars
// proves, against Istio's own injector and istiod, the mechanism the move
// to ambient is designed on (docs/ambient.md): the namespace keeps
// istio.io/rev, and a moved workload's pod template carries
// sidecar.istio.io/inject=false and istio.io/dataplane-mode=ambient.
//   - The moved workload's pods run no sidecar, istio-cni enrols them, and
//     istiod gives them to ztunnel with protocol HBONE.
//   - A waiting workload's pod deleted mid-migration (a drain, an
//     eviction) comes back with its sidecar from the namespace's revision,
//     never enrolled: no pod changes mode ahead of its wave.
func TestPodLabelsEnrolAWorkloadInAmbientWhileItsNamespaceKeepsItsSidecars(t *testing.T) {
	f := ambientWorld(t)
	cni, err := f.World.Mesh.StartCNI(f.Ctx)
	require.NoError(t, err)
	t.Cleanup(cni.Stop)
	z := installZtunnel(f, "1-26")[0] // every ztunnel holds every workload

	const ns = "shop"
	ambient := func(d *appsv1.Deployment) {
		d.Spec.Template.Labels["sidecar.istio.io/inject"] = "false"
		d.Spec.Template.Labels[mesh.LabelDataplaneMode] = mesh.DataplaneModeAmbient
	}
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).
		Deployment(ns, "moved", ambient).Deployment(ns, "waiting").RolledOut(ns)

	uid := func(p *corev1.Pod) string { return "Kubernetes//Pod/" + p.Namespace + "/" + p.Name }
	hasSidecar := func(p *corev1.Pod) bool {
		for _, c := range p.Spec.Containers {
			if c.Name == mesh.ProxyContainer {
				return true
			}
		}
		_, st := p.Annotations["sidecar.istio.io/status"]
		return st
	}
	// expect waits until every pod of the Deployment is in the mode asked.
	expect := func(name string, enrolled bool) {
		f.Eventually(fmt.Sprintf("%s's pods enrolled %v", name, enrolled), func() (bool, string) {
			pods, _, err := f.DeploymentPods(ns, name)
			if err != nil {
				return false, err.Error()
			}
			for _, p := range pods {
				redirected := p.Annotations[mesh.AnnotationRedirection] == mesh.RedirectionEnabled
				want := "TCP"
				if enrolled {
					want = "HBONE"
				}
				switch {
				case hasSidecar(p) == enrolled:
					return false, fmt.Sprintf("%s: sidecar %v", p.Name, hasSidecar(p))
				case redirected != enrolled:
					return false, fmt.Sprintf("%s: redirected %v", p.Name, redirected)
				case z.Protocol(uid(p)) != want:
					return false, fmt.Sprintf("%s: ztunnel holds it as %q", p.Name, z.Protocol(uid(p)))
				}
			}
			return len(pods) > 0, "no pod"
		})
	}
	expect("moved", true)
	expect("waiting", false)
	f.Then().PodsOnRevision(ns, "waiting", "1-26")

	// ztunnel's own config dump, as ztunnel-config workloads reads it.
	resp, err := http.Get("http://" + z.Addr() + "/config_dump")
	require.NoError(t, err)
	var dump struct {
		Workloads []mesh.ZtunnelWorkload `json:"workloads"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&dump))
	resp.Body.Close()
	listed := map[string]mesh.ZtunnelWorkload{}
	for _, w := range dump.Workloads {
		listed[w.UID] = w
	}
	for name, protocol := range map[string]string{"moved": "HBONE", "waiting": "TCP"} {
		pods, _, err := f.DeploymentPods(ns, name)
		require.NoError(t, err)
		for _, p := range pods {
			require.Contains(t, listed, uid(p))
			assert.Equal(t, mesh.ZtunnelWorkload{UID: uid(p), Name: p.Name, Namespace: ns, Node: p.Spec.NodeName, Protocol: protocol, Status: "Healthy"}, listed[uid(p)])
		}
	}

	pods, _, err := f.DeploymentPods(ns, "waiting")
	require.NoError(t, err)
	gone := pods[0]
	require.NoError(t, f.Client.CoreV1().Pods(ns).Delete(f.Ctx, gone.Name, metav1.DeleteOptions{}))
	f.Eventually("waiting's deleted pod to be replaced, every pod Ready", func() (bool, string) {
		pods, d, err := f.DeploymentPods(ns, "waiting")
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if p.Name == gone.Name {
				return false, "still there"
			}
			if !fixture.PodReady(p) {
				return false, p.Name + " is not Ready"
			}
		}
		return fixture.RolledOut(d, pods), fmt.Sprintf("%+v", d.Status)
	})
	expect("waiting", false)
	// Every pod of waiting back on 1-26's sidecar, judged by the pods
	// themselves: the Deployment's status may dip once more after its new
	// pod is Ready, as its controller catches up with the deletion.
	f.Eventually("waiting's pods Ready on 1-26's sidecars", func() (bool, string) {
		pods, _, err := f.DeploymentPods(ns, "waiting")
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if st, injected := mesh.ParseSidecarStatus(p); !injected || st.Revision != "1-26" || !hasSidecar(p) || !fixture.PodReady(p) {
				return false, p.Name + " is not Ready on 1-26's sidecar"
			}
		}
		return len(pods) == 2, fmt.Sprintf("%d pods", len(pods))
	})
}

// TestTheRealIstiodDeploysAWaypointForAGatewayOfItsRevision applies the
// Gateway API CRDs of the module Istio requires, and a Gateway of class
// istio-waypoint in a namespace of the ambient revision: istiod's own
// deployment controller makes its Deployment and Service, named after
// it, and reports the Gateway Programmed once its pod is up.
func TestTheRealIstiodDeploysAWaypointForAGatewayOfItsRevision(t *testing.T) {
	f := ambientWorld(t)
	require.NoError(t, f.World.Mesh.InstallGatewayAPI(f.Ctx))
	const ns = "shop"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil)
	dyn, err := dynamic.NewForConfig(f.World.Cluster.Config)
	require.NoError(t, err)
	gateways := dyn.Resource(schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}).Namespace(ns)
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "waypoint", "namespace": ns},
		"spec": map[string]any{"gatewayClassName": "istio-waypoint",
			"listeners": []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}}},
	}}
	f.Eventually("the Gateway to be created (its CRD established)", func() (bool, string) {
		_, err := gateways.Create(f.Ctx, gw, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	f.Eventually("istiod to deploy the waypoint", func() (bool, string) {
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, "waypoint", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if _, err := f.Client.CoreV1().Services(ns).Get(f.Ctx, "waypoint", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas > 0, fmt.Sprintf("ready replicas %d", d.Status.ReadyReplicas)
	})
	f.Eventually("the Gateway to be Programmed", func() (bool, string) {
		g, err := gateways.Get(f.Ctx, "waypoint", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(g.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Programmed" {
				return m["status"] == "True", fmt.Sprint(m)
			}
		}
		return false, fmt.Sprint(conds)
	})
}
