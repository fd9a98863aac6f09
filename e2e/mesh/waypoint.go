package mesh

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// waypointRevision is the revision a waypoint's pod connects to, as
// istiod's deployment controller renders it (the waypoint template of
// istio-discovery): a pod of class istio-waypoint annotated istio.io/rev,
// whose istio-proxy runs "proxy waypoint". False for any other pod.
func waypointRevision(pod *corev1.Pod) (string, bool) {
	if pod.Labels["gateway.networking.k8s.io/gateway-class-name"] != "istio-waypoint" {
		return "", false
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == ProxyContainer && slices.Equal(c.Args[:min(2, len(c.Args))], []string{"proxy", "waypoint"}) {
			rev := pod.Annotations[LabelRev]
			if rev == "" {
				rev = "default"
			}
			return rev, true
		}
	}
	return "", false
}
