package agent

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Lister lists and gets the objects of an informer whose transform keeps
// them as T, a type of meshwave's own that client-go's listers do not
// read.
type Lister[T any] struct {
	indexer  cache.Indexer
	resource schema.GroupResource
}

// NewPodLister lists the pods of an indexer that holds CachedPods.
func NewPodLister(indexer cache.Indexer) Lister[*CachedPod] {
	return Lister[*CachedPod]{indexer: indexer, resource: corev1.Resource("pods")}
}

// NewReplicaSetLister lists the ReplicaSets of an indexer that holds
// CachedReplicaSets.
func NewReplicaSetLister(indexer cache.Indexer) Lister[*CachedReplicaSet] {
	return Lister[*CachedReplicaSet]{indexer: indexer, resource: appsv1.Resource("replicasets")}
}

// List lists the objects of every namespace that selector matches.
func (l Lister[T]) List(selector labels.Selector) ([]T, error) {
	var out []T
	err := cache.ListAll(l.indexer, selector, func(obj any) {
		out = append(out, obj.(T))
	})
	return out, err
}

// In lists and gets the objects of one namespace.
func (l Lister[T]) In(namespace string) NamespaceLister[T] {
	return NamespaceLister[T]{lister: l, namespace: namespace}
}

// NamespaceLister lists and gets the objects of one namespace.
type NamespaceLister[T any] struct {
	lister    Lister[T]
	namespace string
}

// List lists the namespace's objects that selector matches.
func (l NamespaceLister[T]) List(selector labels.Selector) ([]T, error) {
	var out []T
	err := cache.ListAllByNamespace(l.lister.indexer, l.namespace, selector, func(obj any) {
		out = append(out, obj.(T))
	})
	return out, err
}

// Get returns the namespace's object of that name, or a NotFound error.
func (l NamespaceLister[T]) Get(name string) (T, error) {
	obj, exists, err := l.lister.indexer.GetByKey(l.namespace + "/" + name)
	if err != nil || !exists {
		var none T
		if err == nil {
			err = apierrors.NewNotFound(l.lister.resource, name)
		}
		return none, err
	}
	return obj.(T), nil
}
