package agent

import (
	"bytes"
	"context"
	"k8s.io/apimachinery/pkg/labels"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshwave/meshwave/canary"
)

// The pods that run in ambient mode through a revision's ztunnels hold
// the revision as much as its sidecars: meshwave holders lists them, by
// workload, with their nodes.
func TestHoldersListThePodsInAmbientThroughTheRevisionsZtunnels(t *testing.T) {
	onNode := func(p *corev1.Pod, node string, labels map[string]string) *corev1.Pod {
		p.Spec.NodeName = node
		for k, v := range labels {
			p.Labels[k] = v
		}
		return p
	}
	annotated := func(p *corev1.Pod, k, v string) *corev1.Pod {
		p.Annotations = map[string]string{k: v}
		return p
	}
	redirected := func(p *corev1.Pod) *corev1.Pod {
		return annotated(p, canary.AnnotationRedirection, "enabled")
	}
	hostNetwork := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.HostNetwork = true
		return p
	}
	ambient := map[string]string{canary.LabelDataplaneMode: canary.DataplaneAmbient}
	rs := owned("apps/v1", "ReplicaSet", "web-5d8f9")
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{canary.LabelDataplaneMode: canary.DataplaneAmbient}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "amb"}},
		annotated(onNode(injectedPod("istio-system", "ztunnel-a", "", corev1.PodRunning, owned("apps/v1", "DaemonSet", "ztunnel")), "n1", map[string]string{"app": "ztunnel"}), canary.LabelRev, "1-26"),
		onNode(injectedPod("istio-system", "ztunnel-b", "", corev1.PodRunning, owned("apps/v1", "DaemonSet", "ztunnel")), "n2", map[string]string{"app": "ztunnel", canary.LabelRev: "1-27"}),
		// Enrolled by their namespace, or by their own label, and
		// redirected by istio-cni.
		redirected(onNode(injectedPod("shop", "web-5d8f9-a", "", corev1.PodRunning, rs), "n1", nil)),
		redirected(onNode(injectedPod("amb", "db-0", "", corev1.PodRunning, owned("apps/v1", "StatefulSet", "db")), "n1", ambient)),
		// Enrolled, but never redirected: a pod on the host's network
		// (istio-cni skips it) and one istio-cni has not reached yet.
		hostNetwork(onNode(injectedPod("shop", "node-exporter-x", "", corev1.PodRunning, owned("apps/v1", "DaemonSet", "node-exporter")), "n1", nil)),
		onNode(injectedPod("shop", "fresh", "", corev1.PodRunning, nil), "n1", nil),
		// Through another revision's ztunnel; opted out; with a sidecar; done.
		redirected(onNode(injectedPod("shop", "web-5d8f9-b", "", corev1.PodRunning, rs), "n2", nil)),
		onNode(injectedPod("shop", "legacy", "", corev1.PodRunning, nil), "n1", map[string]string{canary.LabelDataplaneMode: "none"}),
		onNode(injectedPod("amb", "api-1", "1-26", corev1.PodRunning, nil), "n1", ambient),
		onNode(injectedPod("amb", "job-x", "", corev1.PodSucceeded, nil), "n1", ambient),
	}
	got, err := HoldersNow(context.Background(), fake.NewClientset(objs...), metadataClient(), DefaultConfig(), "1-26")
	require.NoError(t, err)
	assert.Equal(t, 2, got.AmbientPods)
	assert.Equal(t, []canary.AmbientHolder{
		{Namespace: "amb", Kind: "StatefulSet", Name: "db", Pods: []string{"db-0"}, Nodes: []string{"n1"}},
		{Namespace: "shop", Kind: "ReplicaSet", Name: "web-5d8f9", Pods: []string{"web-5d8f9-a"}, Nodes: []string{"n1"}},
	}, got.Ambient)
	var out bytes.Buffer
	require.NoError(t, RenderHolders(&out, got, "table"))
	assert.Equal(t, `revision 1-26: 1 pod in 1 workload still runs its proxy; 2 pods in 2 workloads run in ambient through its ztunnels

NAMESPACE  OWNER      PODS  STATE   WHY
amb        Pod/api-1  1     cannot  `+got.Holders[0].Reason+`

IN AMBIENT  OWNER                 PODS  NODES
amb         StatefulSet/db        1     n1
shop        ReplicaSet/web-5d8f9  1     n1
`, out.String())
}

// A ztunnel pod that ended (evicted: phase Failed) and still sits on its
// node beside the live ztunnel of another revision serves none of the
// node's pods: they run through the live one, and hold its revision.
// Which of the two a node's pods are counted under must not hang on the
// order the cache lists them in: counted under the dead one, the live
// revision reads as holding no pod, meshwave holders exits 0 for it, and
// removing it leaves the pods without a data plane.
func TestAnEndedZtunnelLeftOnANodeServesNoneOfItsPods(t *testing.T) {
	ztunnel := func(name, rev string, phase corev1.PodPhase) *corev1.Pod {
		p := injectedPod("istio-system", name, "", phase, owned("apps/v1", "DaemonSet", "ztunnel-"+rev))
		p.Spec.NodeName = "n1"
		p.Labels["app"] = "ztunnel"
		p.Annotations = map[string]string{canary.LabelRev: rev}
		return p
	}
	web := injectedPod("amb", "web-1", "", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "web-5d8f9"))
	web.Spec.NodeName = "n1"
	web.Labels[canary.LabelDataplaneMode] = canary.DataplaneAmbient
	web.Annotations = map[string]string{canary.AnnotationRedirection: canary.RedirectionEnabled}
	c := cachesOf(t, transform(map[string]bool{canary.AnnotationSidecar: true, canary.AnnotationRedirection: true}),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "amb"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
		ztunnel("ztunnel-live", "1-26", corev1.PodRunning),
		ztunnel("ztunnel-evicted", "1-25", corev1.PodFailed),
		web)
	pods, err := c.Pods.List(labels.Everything())
	require.NoError(t, err)
	seen := map[string]int{}
	live, dead := map[int]int{}, map[int]int{}
	for range 64 {
		_, n, err := c.ambientHolders("istio-system", "1-26")
		require.NoError(t, err)
		live[n]++
		_, n, err = c.ambientHolders("istio-system", "1-25")
		require.NoError(t, err)
		dead[n]++
		require.NoError(t, c.countAmbient(pods, "istio-system", func(_, rev string) { seen[rev]++ }))
	}
	assert.Equal(t, map[int]int{1: 64}, live, "meshwave holders 1-26 lists the pod, every time (pods counted: times)")
	assert.Equal(t, map[int]int{0: 64}, dead, "meshwave holders 1-25, whose ztunnel ended, lists none, every time (pods counted: times)")
	assert.Equal(t, map[string]int{"1-26": 64}, seen, "meshwave_revision_holders{reason=ambient} counts the pod under the live ztunnel's revision, every scrape")
}
