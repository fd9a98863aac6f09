package agent

import (
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
)

// CachedControllerRevision is what the caches keep of a ControllerRevision,
// the StatefulSet's and DaemonSet's record of a template they rolled out:
// its controller, revision number and hash, which name a DaemonSet's
// current template, and of its data, the template's restart stamp. The
// data (a patch holding the whole pod template) is not kept, nor any
// label: the hash is a field, as a map of one label cost a revision
// about 300 bytes.
type CachedControllerRevision struct {
	metav1.ObjectMeta
	// Revision is its revision number: the newest a DaemonSet owns is its
	// current template.
	Revision int64
	// Hash is its controller-revision-hash label, which the pods of its
	// template carry.
	Hash string
	// RestartedAt is the kubectl.kubernetes.io/restartedAt annotation of
	// the template it holds, "" when it has none: as a ReplicaSet's
	// (CachedReplicaSet.RestartedAt), it shows a restart its controller
	// rolled out even once the workload's own template no longer carries
	// it (a sync that replaced the object from git).
	RestartedAt string
}

// GetObjectKind names no kind, as a decoded object's type metadata does
// not; with DeepCopyObject it makes a CachedControllerRevision a
// runtime.Object, as CachedReplicaSet is one.
func (r *CachedControllerRevision) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the revision.
func (r *CachedControllerRevision) DeepCopyObject() runtime.Object {
	out := *r
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// NewRevisionLister lists the ControllerRevisions of an indexer that holds
// CachedControllerRevisions.
func NewRevisionLister(indexer cache.Indexer) Lister[*CachedControllerRevision] {
	return Lister[*CachedControllerRevision]{indexer: indexer, resource: appsv1.Resource("controllerrevisions")}
}

// slimRevision keeps of a ControllerRevision what CachedControllerRevision
// holds, and its resourceVersion, by which its informer tells an update
// from a resync.
func slimRevision(r *appsv1.ControllerRevision) *CachedControllerRevision {
	return &CachedControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: intern(r.Namespace), ResourceVersion: r.ResourceVersion,
			OwnerReferences: internOwners(controllerOnly(r.OwnerReferences))},
		Revision:    r.Revision,
		Hash:        r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey],
		RestartedAt: intern(revisionRestartedAt(r.Data)),
	}
}

// revisionRestartedAt reads the restart stamp of the template a
// ControllerRevision's data holds. The StatefulSet and DaemonSet
// controllers both write it as a patch of the template:
// {"spec":{"template":{"$patch":"replace","metadata":{"annotations":{...}},...}}}.
// Data that does not read so (another controller's revision) has none.
func revisionRestartedAt(data runtime.RawExtension) string {
	raw := data.Raw
	if len(raw) == 0 && data.Object != nil {
		var err error
		if raw, err = json.Marshal(data.Object); err != nil {
			return ""
		}
	}
	var patch struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &patch) != nil {
		return ""
	}
	return patch.Spec.Template.Metadata.Annotations[canary.AnnotationRestartedAt]
}
