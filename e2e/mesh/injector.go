package mesh

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Label and annotation keys the injector reads and writes, as Istio names
// them.
const (
	LabelRev            = "istio.io/rev"
	LabelTag            = "istio.io/tag"
	LabelInjection      = "istio-injection"
	KeyInject           = "sidecar.istio.io/inject"
	AnnotationStatus    = "sidecar.istio.io/status"
	AnnotationTemplates = "inject.istio.io/templates"
	ProxyContainer      = "istio-proxy"
)

// SidecarStatus is the JSON Istio writes into sidecar.istio.io/status. The
// lists name every entry of the pod spec, not only the ones Istio added.
type SidecarStatus struct {
	InitContainers   []string `json:"initContainers"`
	Containers       []string `json:"containers"`
	Volumes          []string `json:"volumes"`
	ImagePullSecrets []string `json:"imagePullSecrets"`
	Revision         string   `json:"revision"`
}

// injector is the sidecar injection webhook shared by every revision. Each
// revision's MutatingWebhookConfiguration points at its own path, so the
// apiserver's selectors decide which revision injects a pod, as in a real
// cluster.
type injector struct {
	client    kubernetes.Interface
	server    *http.Server
	url       string
	caBundle  []byte
	meshV1    *MeshV1
	mu        sync.RWMutex
	revisions map[string]Revision
}

func startInjector(client kubernetes.Interface, host string, meshV1 *MeshV1) (*injector, error) {
	cert, err := newServingCert(net.ParseIP(host))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("injector listen: %w", err)
	}
	in := &injector{
		client:    client,
		url:       "https://" + l.Addr().String(),
		caBundle:  cert.caBundle,
		meshV1:    meshV1,
		revisions: map[string]Revision{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/inject/", in.serveInject)
	mux.HandleFunc("/meshv1", meshV1.serve)
	in.server = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.tls}, MinVersion: tls.VersionTLS12}}
	go func() { _ = in.server.ServeTLS(l, "", "") }()
	return in, nil
}

func (in *injector) stop() { _ = in.server.Close() }

// register installs istio-sidecar-injector-<rev> with Istio's selectors.
func (in *injector) register(ctx context.Context, rev Revision) error {
	in.mu.Lock()
	in.revisions[rev.Name] = rev
	in.mu.Unlock()
	webhooks := []admissionregv1.MutatingWebhook{
		in.webhook("rev.namespace.sidecar-injector.istio.io", rev.Name,
			selector(exists(LabelInjection, false), in_(LabelRev, rev.Name)),
			selector(notIn(KeyInject, "false"))),
		in.webhook("rev.object.sidecar-injector.istio.io", rev.Name,
			selector(exists(LabelRev, false), exists(LabelInjection, false)),
			selector(notIn(KeyInject, "false"), in_(LabelRev, rev.Name))),
	}
	if rev.Default {
		webhooks = append(webhooks,
			in.webhook("namespace.sidecar-injector.istio.io", rev.Name,
				selector(in_(LabelInjection, "enabled")),
				selector(notIn(KeyInject, "false"))),
			in.webhook("object.sidecar-injector.istio.io", rev.Name,
				selector(exists(LabelInjection, false), exists(LabelRev, false)),
				selector(in_(KeyInject, "true"), exists(LabelRev, false))),
		)
	}
	mwc := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "istio-sidecar-injector-" + rev.Name,
			Labels: map[string]string{LabelRev: rev.Name, "app": "sidecar-injector", "operator.istio.io/component": "Pilot"},
		},
		Webhooks: webhooks,
	}
	return createOrReplaceMWC(ctx, in.client, mwc)
}

// registerTag installs istio-revision-tag-<tag>: the same rev.* webhooks,
// keyed on the tag's name, labelled with the revision it points at and
// calling the injector of injectRev (the same revision, unless a scenario
// stages a broken tag).
func (in *injector) registerTag(ctx context.Context, tag, rev, injectRev string) error {
	mwc := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "istio-revision-tag-" + tag,
			Labels: map[string]string{LabelTag: tag, LabelRev: rev, "app": "sidecar-injector"},
		},
		Webhooks: []admissionregv1.MutatingWebhook{
			in.webhook("rev.namespace.sidecar-injector.istio.io", injectRev,
				selector(exists(LabelInjection, false), in_(LabelRev, tag)),
				selector(notIn(KeyInject, "false"))),
			in.webhook("rev.object.sidecar-injector.istio.io", injectRev,
				selector(exists(LabelRev, false), exists(LabelInjection, false)),
				selector(notIn(KeyInject, "false"), in_(LabelRev, tag))),
		},
	}
	return createOrReplaceMWC(ctx, in.client, mwc)
}

func (in *injector) webhook(name, rev string, ns, obj *metav1.LabelSelector) admissionregv1.MutatingWebhook {
	return admissionregv1.MutatingWebhook{
		Name: name,
		ClientConfig: admissionregv1.WebhookClientConfig{
			URL:      ptr.To(in.url + "/inject/" + rev),
			CABundle: in.caBundle,
		},
		Rules: []admissionregv1.RuleWithOperations{{
			Operations: []admissionregv1.OperationType{admissionregv1.Create},
			Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}},
		FailurePolicy:           ptr.To(admissionregv1.Fail),
		SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		NamespaceSelector:       ns,
		ObjectSelector:          obj,
		ReinvocationPolicy:      ptr.To(admissionregv1.NeverReinvocationPolicy),
		TimeoutSeconds:          ptr.To[int32](10),
	}
}

func createOrReplaceMWC(ctx context.Context, client kubernetes.Interface, mwc *admissionregv1.MutatingWebhookConfiguration) error {
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err := api.Create(ctx, mwc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := api.Get(ctx, mwc.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		mwc.ResourceVersion = old.ResourceVersion
		_, err = api.Update(ctx, mwc, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("install webhook configuration %s: %w", mwc.Name, err)
	}
	return nil
}

func (in *injector) serveInject(w http.ResponseWriter, r *http.Request) {
	revName := strings.TrimPrefix(r.URL.Path, "/inject/")
	in.mu.RLock()
	rev, ok := in.revisions[revName]
	in.mu.RUnlock()
	if !ok {
		http.Error(w, "unknown revision "+revName, http.StatusNotFound)
		return
	}
	serveAdmission(w, r, func(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		var pod corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			return nil, fmt.Errorf("decode pod: %w", err)
		}
		if pod.Namespace == "" {
			pod.Namespace = req.Namespace
		}
		if !injectionRequired(&pod, rev) {
			return &admissionv1.AdmissionResponse{Allowed: true}, nil
		}
		return patchResponse(inject(&pod, rev))
	})
}

// injectionRequired applies Istio's per-pod policy after the selectors
// matched: host-network pods are never injected, the label beats the
// annotation of the same name, and under the "disabled" policy only an
// explicit "true" injects.
func injectionRequired(pod *corev1.Pod, rev Revision) bool {
	if pod.Spec.HostNetwork || pod.Annotations[AnnotationStatus] != "" {
		return false
	}
	value, set := pod.Labels[KeyInject]
	if !set {
		value, set = pod.Annotations[KeyInject]
	}
	explicit, err := strconv.ParseBool(value)
	if set && err == nil {
		return explicit
	}
	return rev.InjectionPolicy != PolicyDisabled
}

// inject returns the pod as Istio's sidecar template would leave it: the
// native sidecar istio-proxy, its volumes, and the status annotation.
func inject(pod *corev1.Pod, rev Revision) *corev1.Pod {
	out := pod.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	// In a real cluster the ServiceAccount admission plugin has set this
	// before any webhook runs; the local world runs without that plugin, and
	// the projected istio-token volume is invalid without it.
	if out.Spec.ServiceAccountName == "" {
		out.Spec.ServiceAccountName = "default"
	}
	gateway := strings.Contains(out.Annotations[AnnotationTemplates], "gateway")
	if gateway {
		// The gateway template turns the container named istio-proxy into
		// the proxy itself rather than adding a sidecar.
		for i := range out.Spec.Containers {
			if out.Spec.Containers[i].Name == ProxyContainer {
				out.Spec.Containers[i].Image = proxyImage(rev)
			}
		}
	} else {
		out.Spec.InitContainers = append([]corev1.Container{proxyContainer(out, rev)}, out.Spec.InitContainers...)
		if _, ok := out.Annotations["kubectl.kubernetes.io/default-container"]; !ok && len(out.Spec.Containers) > 0 {
			out.Annotations["kubectl.kubernetes.io/default-container"] = out.Spec.Containers[0].Name
		}
	}
	for _, v := range istioVolumes() {
		out.Spec.Volumes = append(out.Spec.Volumes, v)
	}
	out.Labels["security.istio.io/tlsMode"] = "istio"
	if _, ok := out.Labels["service.istio.io/canonical-name"]; !ok {
		out.Labels["service.istio.io/canonical-name"] = canonicalName(out)
	}
	if _, ok := out.Labels["service.istio.io/canonical-revision"]; !ok {
		out.Labels["service.istio.io/canonical-revision"] = firstNonEmpty(out.Labels["version"], "latest")
	}
	out.Annotations[LabelRev] = rev.Name
	status := SidecarStatus{Revision: rev.Name}
	for _, c := range out.Spec.InitContainers {
		status.InitContainers = append(status.InitContainers, c.Name)
	}
	for _, c := range out.Spec.Containers {
		status.Containers = append(status.Containers, c.Name)
	}
	for _, v := range out.Spec.Volumes {
		status.Volumes = append(status.Volumes, v.Name)
	}
	for _, s := range out.Spec.ImagePullSecrets {
		status.ImagePullSecrets = append(status.ImagePullSecrets, s.Name)
	}
	raw, _ := json.Marshal(status)
	out.Annotations[AnnotationStatus] = string(raw)
	return out
}

func proxyImage(rev Revision) string { return "docker.io/istio/proxyv2:" + rev.Version }

// proxyContainer builds istio-proxy, sized by the pod's proxy annotations as
// Istio's template does, with Istio's defaults where they are absent.
func proxyContainer(pod *corev1.Pod, rev Revision) corev1.Container {
	a := pod.Annotations
	q := func(key, def string) resource.Quantity {
		if v, err := resource.ParseQuantity(a[key]); err == nil && a[key] != "" {
			return v
		}
		return resource.MustParse(def)
	}
	logLevel := firstNonEmpty(a["sidecar.istio.io/logLevel"], "warning")
	return corev1.Container{
		Name:  ProxyContainer,
		Image: proxyImage(rev),
		Args: []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local",
			"--proxyLogLevel=" + logLevel, "--log_output_level=default:info"},
		Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090, Protocol: corev1.ProtocolTCP}},
		Env: []corev1.EnvVar{
			{Name: "PILOT_CERT_PROVIDER", Value: "istiod"},
			{Name: "CA_ADDR", Value: "istiod-" + rev.Name + ".istio-system.svc:15012"},
			{Name: "ISTIO_META_CLUSTER_ID", Value: "Kubernetes"},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("sidecar.istio.io/proxyCPU", "100m"), corev1.ResourceMemory: q("sidecar.istio.io/proxyMemory", "128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q("sidecar.istio.io/proxyCPULimit", "2000m"), corev1.ResourceMemory: q("sidecar.istio.io/proxyMemoryLimit", "1Gi")},
		},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: intOrString(15021)}}, PeriodSeconds: 15},
		RestartPolicy:  ptr.To(corev1.ContainerRestartPolicyAlways),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "istiod-ca-cert", MountPath: "/var/run/secrets/istio"},
			{Name: "istio-data", MountPath: "/var/lib/istio/data"},
			{Name: "istio-envoy", MountPath: "/etc/istio/proxy"},
			{Name: "istio-token", MountPath: "/var/run/secrets/tokens"},
			{Name: "istio-podinfo", MountPath: "/etc/istio/pod"},
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](1337),
			RunAsGroup:               ptr.To[int64](1337),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func istioVolumes() []corev1.Volume {
	emptyDir := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	return []corev1.Volume{
		emptyDir("workload-socket"), emptyDir("credential-socket"), emptyDir("workload-certs"),
		{Name: "istio-envoy", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		emptyDir("istio-data"),
		{Name: "istio-podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
		}}}},
		{Name: "istio-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "istio-ca", ExpirationSeconds: ptr.To[int64](43200), Path: "istio-token"},
		}}}}},
		{Name: "istiod-ca-cert", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "istio-ca-root-cert"}}}},
	}
}

func canonicalName(pod *corev1.Pod) string {
	for _, k := range []string{"service.istio.io/canonical-name", "app.kubernetes.io/name", "app"} {
		if v := pod.Labels[k]; v != "" {
			return v
		}
	}
	return workloadName(pod)
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// serveAdmission decodes an AdmissionReview, calls admit and writes the
// review back with the response.
func serveAdmission(w http.ResponseWriter, r *http.Request, admit func(*admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "malformed AdmissionReview", http.StatusBadRequest)
		return
	}
	resp, err := admit(review.Request)
	if err != nil {
		resp = &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Message: err.Error(), Code: http.StatusBadRequest}}
	}
	resp.UID = review.Request.UID
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// patchResponse answers with a JSON patch that replaces the parts of the pod
// an admission webhook may change. RFC 6902 "add" on an existing member
// replaces it, so whole-field adds are exact whatever the pod had.
func patchResponse(pod *corev1.Pod) (*admissionv1.AdmissionResponse, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{
		{"add", "/metadata/labels", pod.Labels},
		{"add", "/metadata/annotations", pod.Annotations},
	}
	if pod.Spec.InitContainers != nil {
		ops = append(ops, op{"add", "/spec/initContainers", pod.Spec.InitContainers})
	}
	ops = append(ops, op{"add", "/spec/containers", pod.Spec.Containers})
	if pod.Spec.ServiceAccountName != "" {
		ops = append(ops, op{"add", "/spec/serviceAccountName", pod.Spec.ServiceAccountName})
	}
	if pod.Spec.Volumes != nil {
		ops = append(ops, op{"add", "/spec/volumes", pod.Spec.Volumes})
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: raw, PatchType: ptr.To(admissionv1.PatchTypeJSONPatch)}, nil
}

// ParseSidecarStatus reads the revision out of a pod's sidecar status. It
// returns "" when the pod was not injected.
func ParseSidecarStatus(pod *corev1.Pod) (SidecarStatus, bool) {
	raw, ok := pod.Annotations[AnnotationStatus]
	if !ok {
		return SidecarStatus{}, false
	}
	var s SidecarStatus
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return SidecarStatus{}, false
	}
	return s, true
}
