// Package podfixture builds a pod as the apiserver serves it once Istio's
// injector and the kubelet are done with it, for the benchmarks and tests
// that measure what the agent keeps of a cluster's pods.
package podfixture

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// InjectedPod is pod i of the ReplicaSet app-hash of Deployment app in
// namespace ns, as Istio's injector (revision 1-25) leaves it: the app,
// istio-init and istio-proxy with the args, env, mounts, volumes and
// security context the sidecar template writes, its labels and the
// sidecar.istio.io/status annotation. It has no status, owner, node or
// server-set fields: each caller adds those it needs.
func InjectedPod(ns, app, hash string, i int) *corev1.Pod {
	env := []corev1.EnvVar{
		{Name: "PILOT_CERT_PROVIDER", Value: "istiod"}, {Name: "CA_ADDR", Value: "istiod-1-25.istio-system.svc:15012"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "INSTANCE_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "SERVICE_ACCOUNT", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
		{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "ISTIO_CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "PROXY_CONFIG", Value: `{"discoveryAddress":"istiod-1-25.istio-system.svc:15012","tracing":{"zipkin":{"address":"zipkin.istio-system:9411"}}}`},
		{Name: "ISTIO_META_POD_PORTS", Value: `[{"containerPort":8080,"protocol":"TCP"}]`},
		{Name: "ISTIO_META_APP_CONTAINERS", Value: "app"}, {Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
		{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "ISTIO_META_CLUSTER_ID", Value: "Kubernetes"}, {Name: "ISTIO_META_NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "ISTIO_META_INTERCEPTION_MODE", Value: "REDIRECT"}, {Name: "ISTIO_META_WORKLOAD_NAME", Value: app},
		{Name: "ISTIO_META_OWNER", Value: "kubernetes://apis/apps/v1/namespaces/" + ns + "/deployments/" + app},
		{Name: "ISTIO_META_MESH_ID", Value: "cluster.local"}, {Name: "TRUST_DOMAIN", Value: "cluster.local"},
	}
	mounts := []corev1.VolumeMount{
		{Name: "workload-socket", MountPath: "/var/run/secrets/workload-spiffe-uds"},
		{Name: "credential-socket", MountPath: "/var/run/secrets/credential-uds"},
		{Name: "workload-certs", MountPath: "/var/run/secrets/workload-spiffe-credentials"},
		{Name: "istiod-ca-cert", MountPath: "/var/run/secrets/istio"},
		{Name: "istio-data", MountPath: "/var/lib/istio/data"},
		{Name: "istio-envoy", MountPath: "/etc/istio/proxy"},
		{Name: "istio-token", MountPath: "/var/run/secrets/tokens"},
		{Name: "istio-podinfo", MountPath: "/etc/istio/pod"},
	}
	empty := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%s-%05d", app, hash, i), Namespace: ns,
			Labels: map[string]string{"app": app, "pod-template-hash": hash, "security.istio.io/tlsMode": "istio",
				"service.istio.io/canonical-name": app, "service.istio.io/canonical-revision": "latest", "istio.io/rev": "1-25"},
			Annotations: map[string]string{
				"sidecar.istio.io/status":                 `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"1-25"}`,
				"kubectl.kubernetes.io/default-container": "app",
				"istio.io/rev":                            "1-25",
				"prometheus.io/path":                      "/stats/prometheus", "prometheus.io/port": "15020", "prometheus.io/scrape": "true",
			},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			InitContainers: []corev1.Container{{Name: "istio-init", Image: "docker.io/istio/proxyv2:1.25.0",
				Args:      []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT", "-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020", "--log_output_level=default:info"},
				Resources: res}},
			Containers: []corev1.Container{
				{Name: "app", Image: "registry.example/" + app + ":1.0", Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}, Resources: res},
				{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.25.0",
					Args:  []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local", "--proxyLogLevel=warning", "--proxyComponentLogLevel=misc:error", "--log_output_level=default:info"},
					Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090, Protocol: corev1.ProtocolTCP}},
					Env:   env, VolumeMounts: mounts, Resources: res,
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: intstr.FromInt32(15021)}}, PeriodSeconds: 15},
					SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1337), RunAsGroup: ptr.To[int64](1337), RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true),
						AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}},
			},
			Volumes: []corev1.Volume{empty("workload-socket"), empty("credential-socket"), empty("workload-certs"), empty("istio-data"),
				{Name: "istio-envoy", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				{Name: "istio-podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}}}}},
				{Name: "istio-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "istio-ca", ExpirationSeconds: ptr.To[int64](43200), Path: "istio-token"}}}}}},
				{Name: "istiod-ca-cert", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "istio-ca-root-cert"}}}},
			},
		},
	}
}

// RunningStatus is the status the kubelet writes for p once its
// containers run, since at: Ready, with pod IP ip (none when ip is "").
func RunningStatus(p *corev1.Pod, ip string, at metav1.Time) corev1.PodStatus {
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at}}
	var cs []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		cs = append(cs, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:0123456789abcdef", Ready: true, Started: ptr.To(true),
			ContainerID: "containerd://" + strings.Repeat("ab", 32), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}})
	}
	s := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready, HostIP: "10.0.0.1",
		StartTime: &at, ContainerStatuses: cs, QOSClass: corev1.PodQOSBurstable,
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-init", Image: "docker.io/istio/proxyv2:1.25.0", Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}
	if ip != "" {
		s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	return s
}
