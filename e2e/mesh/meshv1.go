package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Mesh v1 names, from the runbook: its controller's pod webhook acts in
// namespaces labelled cpaas.io/serviceMesh=enabled and tags each pod of a
// MicroService with msname labels.
const (
	MeshV1NamespaceLabel = "cpaas.io/serviceMesh"
	LabelMsname          = "msname"
	LabelAsmMsname       = "asm.cpaas.io/msname"
	meshV1WebhookName    = "asm-controller-pod-webhook"
)

// MicroService is a Mesh v1 MicroService: the pods of its Deployment (those
// whose app label equals App, or that match Selector) get its sidecar
// settings at creation. The
// settings exist only on the pods, never in the Deployment's template, which
// is the problem the runbook's "Persist the Mesh v1 pod settings" solves.
type MicroService struct {
	Namespace string
	// Name is what the msname labels carry.
	Name string
	// App is the value of the pods' app label. Mesh v1 adds the label to
	// pods that lack it.
	App string
	// Selector, when set, matches the pods instead of the app label.
	Selector map[string]string
	// Sidecar adds sidecar.istio.io/inject: "true".
	Sidecar bool
	// Annotations are the sidecar settings, e.g.
	// sidecar.istio.io/proxyCPU or traffic.sidecar.istio.io/excludeOutboundPorts.
	Annotations map[string]string
}

// MeshV1 is the simulated Mesh v1 pod webhook. It is installed only when a
// scenario asks for it, and it runs before the sidecar injectors because the
// apiserver calls mutating webhooks in the order of their configuration
// names ("asm-…" sorts before "istio-…").
type MeshV1 struct {
	mu       sync.RWMutex
	services map[string]MicroService // namespace/app
}

func newMeshV1() *MeshV1 { return &MeshV1{services: map[string]MicroService{}} }

// AddMicroService registers ms; pods created afterwards get its settings.
func (m *MeshV1) AddMicroService(ms MicroService) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.services[ms.Namespace+"/"+ms.App] = ms
}

func (m *MeshV1) register(ctx context.Context, client kubernetes.Interface, url string, caBundle []byte) error {
	mwc := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: meshV1WebhookName, Labels: map[string]string{"app": "asm-controller"}},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "pod.asm.cpaas.io",
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: ptr.To(url + "/meshv1"), CABundle: caBundle},
			Rules:                   []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create}, Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       selector(in_(MeshV1NamespaceLabel, "enabled")),
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	return createOrReplaceMWC(ctx, client, mwc)
}

func (m *MeshV1) serve(w http.ResponseWriter, r *http.Request) {
	serveAdmission(w, r, func(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		var pod corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			return nil, fmt.Errorf("decode pod: %w", err)
		}
		ms, ok := m.find(req.Namespace, pod.Labels)
		if !ok {
			return &admissionv1.AdmissionResponse{Allowed: true}, nil
		}
		return patchResponse(applyMicroService(&pod, ms))
	})
}

func (m *MeshV1) find(ns string, podLabels map[string]string) (MicroService, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if ms, ok := m.services[ns+"/"+podLabels["app"]]; ok && podLabels["app"] != "" {
		return ms, true
	}
	for _, ms := range m.services {
		if ms.Namespace != ns || len(ms.Selector) == 0 {
			continue
		}
		match := true
		for k, v := range ms.Selector {
			if podLabels[k] != v {
				match = false
			}
		}
		if match {
			return ms, true
		}
	}
	return MicroService{}, false
}

// applyMicroService adds what the Mesh v1 webhook adds: the MicroService's
// settings as annotations (never overriding the pod's own), the inject
// annotation, the app label when missing, and the msname labels.
func applyMicroService(pod *corev1.Pod, ms MicroService) *corev1.Pod {
	out := pod.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for k, v := range ms.Annotations {
		if _, ok := out.Annotations[k]; !ok {
			out.Annotations[k] = v
		}
	}
	if ms.Sidecar {
		if _, ok := out.Annotations[KeyInject]; !ok {
			out.Annotations[KeyInject] = "true"
		}
	}
	if _, ok := out.Labels["app"]; !ok && ms.App != "" {
		out.Labels["app"] = ms.App
	}
	out.Labels[LabelMsname] = ms.Name
	out.Labels[LabelAsmMsname] = ms.Name
	return out
}
