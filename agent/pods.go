package agent

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshwave/meshwave/canary"
)

// CachedPod is what the caches keep of a pod: its metadata, of its
// annotations only those meshwave reads, and the few fields of its spec
// and status the gates and the planner read. A corev1.Pod is a struct of
// 1,240 bytes, nearly all of them spec and status fields a slimmed pod
// leaves empty; a CachedPod is 352, most of them its metadata.
type CachedPod struct {
	metav1.ObjectMeta
	// Node is spec.nodeName.
	Node string
	// Phase is status.phase.
	Phase corev1.PodPhase
	// IP is status.podIP.
	IP string
	// Ready tells whether the Ready condition is True.
	Ready bool
	// Revision is the revision in the sidecar.istio.io/status annotation
	// (canary.SidecarRevision), read once as the pod is cached: every
	// reconcile of its namespace reads it. "" when the pod was not
	// injected or the annotation is unreadable.
	Revision string
	// Waiting is why the first container that waits, init containers
	// first, does (CrashLoopBackOff, ImagePullBackOff); "" when none does.
	Waiting string
	// Containers are the names and images of an istiod pod's containers,
	// whose image tag is its revision's proxy version; nil for other pods.
	Containers []ContainerImage
	// shared keeps alive the pool's entry of the labels and annotations
	// the pod shares with others; nil when they are its own.
	shared *sharedMeta
}

// GetObjectKind names no kind, as a decoded object's type metadata does
// not. With DeepCopyObject it makes a CachedPod the runtime.Object client-go
// takes a transformed object for where it checks its caches
// (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR, KUBE_CACHE_MUTATION_DETECTOR).
func (p *CachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the pod with labels and annotations of its own,
// outside the pool.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Containers = slices.Clone(p.Containers)
	if p.shared != nil {
		out.shared = &sharedMeta{labels: out.Labels, annotations: out.Annotations}
	}
	return &out
}

// ContainerImage is a container's name and image.
type ContainerImage struct {
	Name, Image string
}

// slimPod keeps the pod fields the gates and the planner read, with the
// strings pods share interned, and of its annotations those keep names.
func slimPod(p *corev1.Pod, keep map[string]bool) *CachedPod {
	out := &CachedPod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: intern(p.Namespace), UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: internMap(p.Labels), Annotations: keptAnnotations(p.Annotations, keep),
			OwnerReferences:   internOwners(p.OwnerReferences),
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Node:    intern(p.Spec.NodeName),
		Phase:   corev1.PodPhase(intern(string(p.Status.Phase))),
		IP:      p.Status.PodIP,
		Ready:   ready(p.Status.Conditions),
		Waiting: waiting(p.Status),
	}
	out.Revision = intern(canary.SidecarRevision(out.Annotations))
	if rev, ok := p.Annotations[canary.LabelRev]; ok && p.Labels["app"] == "ztunnel" {
		// Istio's ztunnel chart names its pods' revision in this
		// annotation (every injected pod carries one too, not kept).
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[canary.LabelRev] = intern(rev)
	}
	if p.Labels["app"] == "istiod" {
		for _, c := range p.Spec.Containers {
			out.Containers = append(out.Containers, ContainerImage{Name: c.Name, Image: c.Image})
		}
	}
	return out
}

// keptAnnotations are the annotations keep names, interned; nil when
// there are none.
func keptAnnotations(annotations map[string]string, keep map[string]bool) map[string]string {
	var out map[string]string
	for k, v := range annotations {
		if keep[k] {
			if out == nil {
				out = map[string]string{}
			}
			out[intern(k)] = intern(v)
		}
	}
	return out
}

// ready tells whether a pod's last Ready condition is True.
func ready(conditions []corev1.PodCondition) bool {
	ok := false
	for _, c := range conditions {
		if c.Type == corev1.PodReady {
			ok = c.Status == corev1.ConditionTrue
		}
	}
	return ok
}

// waiting is the reason of the first container that waits for one, init
// containers first.
func waiting(s corev1.PodStatus) string {
	for _, statuses := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses} {
		for _, cs := range statuses {
			if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
				return intern(cs.State.Waiting.Reason)
			}
		}
	}
	return ""
}
