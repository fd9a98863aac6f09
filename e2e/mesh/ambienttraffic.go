package mesh

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AmbientRevision is the revision key of a pod in ambient mode (no
// sidecar, redirected to ztunnel) for SetBehavior: "reviews in ambient
// returns 30% 5xx" is staged as SetBehavior(reviews, AmbientRevision, ...).
const AmbientRevision = "ambient"

var (
	// ztunnel's inbound connection counters (its reporter="destination"
	// series), labelled by the ztunnel pod that reports them.
	tcpLabels             = []string{"reporter", "source_workload", "source_workload_namespace", "destination_workload", "destination_workload_namespace", "connection_security_policy", "namespace", "pod"}
	connectionsOpenedDesc = prometheus.NewDesc("istio_tcp_connections_opened_total", "Connections opened, as the simulated ztunnels report them.", tcpLabels, nil)
	connectionsFailedDesc = prometheus.NewDesc("istio_tcp_connections_failed_total", "Connections failed, as the simulated ztunnels report them.", tcpLabels, nil)
)

// recordAmbientLocked reports reqs requests to pod, a pod of dest in
// ambient, as Istio's ambient data plane does: behind a waypoint (its
// namespace's istio.io/use-waypoint, a Ready pod of it), the waypoint
// reports them with reporter="waypoint", as a sidecar would, errors and
// latency included; without one, the ztunnel of pod's node counts each
// as a connection opened, and an error as one failed too, as ztunnel
// counts them (it sees no response code).
func (t *Traffic) recordAmbientLocked(dest WorkloadRef, pod string, callers []WorkloadRef, reqs float64, b Behavior) {
	if len(callers) == 0 {
		callers = []WorkloadRef{{LoadGeneratorNamespace, LoadGenerator}}
	}
	share := reqs / float64(len(callers))
	if wp := t.waypointOf(dest.Namespace); wp != nil {
		for _, src := range callers {
			t.recordByLocked("waypoint", wp.Namespace, wp.Name, src, dest, share, b.ErrorRatio, b.LatencyMs)
		}
		return
	}
	z := t.ztunnelOf(dest.Namespace, pod)
	if z == nil {
		return // no ztunnel on its node: nothing reaches the pod
	}
	for _, src := range callers {
		for _, c := range []struct {
			code string
			n    float64
		}{{"opened", share}, {"failed", share * b.ErrorRatio}} {
			if c.n <= 0 {
				continue
			}
			k := seriesKey{reporter: "destination", source: src, destination: dest, code: c.code, pod: z.Name, podNamespace: z.Namespace}
			if ref := k.podRef(); t.incarnations[ref] == "" {
				t.incarnations[ref] = z.UID
			}
			t.connections[k] += c.n
		}
	}
}

// waypointOf is a Ready pod of the waypoint namespace's pods are behind,
// or nil.
func (t *Traffic) waypointOf(namespace string) *corev1.Pod {
	if t.namespaces == nil {
		return nil
	}
	ns, err := t.namespaces.Get(namespace)
	if err != nil || ns.Labels["istio.io/use-waypoint"] == "" {
		return nil
	}
	pods, err := t.pods.Pods(namespace).List(labels.SelectorFromSet(labels.Set{"gateway.networking.k8s.io/gateway-name": ns.Labels["istio.io/use-waypoint"]}))
	if err != nil {
		return nil
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podReady(p) {
			return p
		}
	}
	return nil
}

// ztunnelOf is the Ready ztunnel pod of the node pod runs on, or nil.
func (t *Traffic) ztunnelOf(namespace, pod string) *corev1.Pod {
	p, err := t.pods.Pods(namespace).Get(pod)
	if err != nil || p.Spec.NodeName == "" {
		return nil
	}
	zs, err := t.pods.Pods(t.root).List(labels.SelectorFromSet(labels.Set{"app": "ztunnel"}))
	if err != nil {
		return nil
	}
	for _, z := range zs {
		if z.Spec.NodeName == p.Spec.NodeName && z.DeletionTimestamp == nil && podReady(z) {
			return z
		}
	}
	return nil
}
