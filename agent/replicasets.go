package agent

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshwave/meshwave/canary"
)

// CachedReplicaSet is what the caches keep of a ReplicaSet: its name, UID
// and controller, which resolve a pod to its Deployment (a pod's
// controller reference is its ReplicaSet's only when it carries that
// ReplicaSet's UID, as the ReplicaSet's is its Deployment's), and the two
// annotations gather reads. A Deployment keeps its old ReplicaSets (ten
// by default), so there are often several times as many ReplicaSets as
// Deployments; an appsv1.ReplicaSet is a struct of 1,168 bytes, nearly
// all of them spec and status, and a CachedReplicaSet 264.
type CachedReplicaSet struct {
	metav1.ObjectMeta
	// Revision is its deployment.kubernetes.io/revision annotation: the
	// revision of its Deployment that it runs.
	Revision string
	// RestartedAt is its template's kubectl.kubernetes.io/restartedAt
	// annotation: it shows a restart that was rolled out even once the
	// Deployment's template no longer carries it (a GitOps sync put the
	// template back).
	RestartedAt string
}

// GetObjectKind names no kind, as a decoded object's type metadata does
// not; with DeepCopyObject it makes a CachedReplicaSet a runtime.Object,
// as CachedPod is one.
func (rs *CachedReplicaSet) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the ReplicaSet.
func (rs *CachedReplicaSet) DeepCopyObject() runtime.Object {
	out := *rs
	rs.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// slimReplicaSet keeps of a ReplicaSet what CachedReplicaSet holds, and
// its resourceVersion, by which its informer tells an update from a
// resync; nothing reads its labels, other annotations, selector or
// status. Its UID is interned: its pods' controller references
// (internOwners) hold the same string.
func slimReplicaSet(rs *appsv1.ReplicaSet) *CachedReplicaSet {
	return &CachedReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: rs.Name, Namespace: intern(rs.Namespace), UID: types.UID(intern(string(rs.UID))), ResourceVersion: rs.ResourceVersion,
			OwnerReferences: internOwners(controllerOnly(rs.OwnerReferences))},
		Revision:    intern(rs.Annotations[revisionAnno]),
		RestartedAt: intern(rs.Spec.Template.Annotations[canary.AnnotationRestartedAt]),
	}
}
