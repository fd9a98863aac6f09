package agent

import (
	"context"
	"maps"
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionreglisters "k8s.io/client-go/listers/admissionregistration/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/meshwave/meshwave/canary"
)

// Caches are the shared informers meshwave reads from. After they sync,
// the hot path makes no LIST or GET.
type Caches struct {
	factory      informers.SharedInformerFactory
	Namespaces   corelisters.NamespaceLister
	Deployments  appslisters.DeploymentLister
	ReplicaSets  Lister[*CachedReplicaSet]
	StatefulSets appslisters.StatefulSetLister
	DaemonSets   appslisters.DaemonSetLister
	// Revisions are the ControllerRevisions, of whose data only the
	// template's restart stamp is kept: the newest one a DaemonSet owns
	// names its current template.
	Revisions Lister[*CachedControllerRevision]
	Pods      Lister[*CachedPod]
	PDBs      policylisters.PodDisruptionBudgetLister
	Webhooks  admissionreglisters.MutatingWebhookConfigurationLister

	informers map[string]cache.SharedIndexInformer
	cancel    context.CancelFunc
	stop      <-chan struct{}

	// Jobs are the Jobs' metadata (*metav1.PartialObjectMetadata), which
	// names the CronJob that created each; nil unless WatchJobs was called.
	Jobs cache.GenericLister
	// metaFactory holds the metadata-only informers.
	metaFactory metadatainformer.SharedInformerFactory
	// compat reads the kinds of the compatibility prechecks; nil unless
	// WatchCompat was called.
	compat *compatCaches
	// peerMemo keeps the namespaces read as peers, and stamps marks the
	// changes of each namespace's workloads for it; nil for caches not
	// built by NewCaches, whose peers are read from their workloads each
	// time.
	peerMemo peerMemo
	stamps   *workloadStamps
	// facts keeps what decisions read from each cached workload object.
	facts workloadFacts
}

// NewCaches builds the informers. Their transform keeps only what
// meshwave reads, so that a cluster of 100k pods fits in a small cache:
// no managedFields, no pod or template specs, no selectors or
// conditions, no kubectl last applied configuration, of a pod's
// annotations only the sidecar status and the keys in persist, and of a
// ControllerRevision's data only its template's restart stamp.
func NewCaches(client kubernetes.Interface, resync time.Duration, persist []string) *Caches {
	keep := map[string]bool{canary.AnnotationSidecar: true, canary.AnnotationRedirection: true}
	for _, k := range persist {
		keep[k] = true
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(transform(keep)))
	c := &Caches{
		factory:      f,
		Namespaces:   f.Core().V1().Namespaces().Lister(),
		Deployments:  f.Apps().V1().Deployments().Lister(),
		ReplicaSets:  NewReplicaSetLister(f.Apps().V1().ReplicaSets().Informer().GetIndexer()),
		StatefulSets: f.Apps().V1().StatefulSets().Lister(),
		DaemonSets:   f.Apps().V1().DaemonSets().Lister(),
		Revisions:    NewRevisionLister(f.Apps().V1().ControllerRevisions().Informer().GetIndexer()),
		Pods:         NewPodLister(f.Core().V1().Pods().Informer().GetIndexer()),
		PDBs:         f.Policy().V1().PodDisruptionBudgets().Lister(),
		Webhooks:     f.Admissionregistration().V1().MutatingWebhookConfigurations().Lister(),
		informers: map[string]cache.SharedIndexInformer{
			"namespaces":   f.Core().V1().Namespaces().Informer(),
			"deployments":  f.Apps().V1().Deployments().Informer(),
			"replicasets":  f.Apps().V1().ReplicaSets().Informer(),
			"statefulsets": f.Apps().V1().StatefulSets().Informer(),
			"daemonsets":   f.Apps().V1().DaemonSets().Informer(),
			"revisions":    f.Apps().V1().ControllerRevisions().Informer(),
			"pods":         f.Core().V1().Pods().Informer(),
			"pdbs":         f.Policy().V1().PodDisruptionBudgets().Informer(),
			"webhooks":     f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer(),
		},
	}
	c.stamps = newWorkloadStamps()
	for _, name := range []string{"deployments", "statefulsets", "daemonsets"} {
		// An informer not started yet never fails to take a handler.
		_, _ = c.informers[name].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { c.stamps.added(namespaceOf(obj)) },
			UpdateFunc: func(old, obj any) {
				if stampsOnUpdate(old, obj) {
					c.stamps.changed(namespaceOf(obj))
				}
			},
			DeleteFunc: func(obj any) { c.stamps.deleted(namespaceOf(obj)) },
		})
	}
	return c
}

// namespaceOf is the namespace of an object or of a deletion's tombstone.
func namespaceOf(obj any) string {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return ""
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return ns
}

// stampsOnUpdate reports whether an update changes what a peer's records
// are read from (Caches.recordsOf, canary.PeerOf): its annotations (the
// move record, the skip) and whether a Deployment is paused. A rollout's
// status updates, and resyncs, do not.
func stampsOnUpdate(old, obj any) bool {
	o, err1 := meta.Accessor(old)
	n, err2 := meta.Accessor(obj)
	if err1 != nil || err2 != nil {
		return true
	}
	if !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) {
		return true
	}
	od, ok1 := old.(*appsv1.Deployment)
	nd, ok2 := obj.(*appsv1.Deployment)
	return ok1 != ok2 || ok1 && od.Spec.Paused != nd.Spec.Paused
}

// jobsResource is batch/v1 Jobs.
var jobsResource = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

// WatchJobs adds an informer of the Jobs' metadata, before Start: a pod's
// Job names its CronJob in its ownerReferences, and metadata alone keeps
// a Job in the cache at a few hundred bytes, without its pod template.
func (c *Caches) WatchJobs(client metadata.Interface, resync time.Duration) {
	c.metaFactory = metadatainformer.NewSharedInformerFactoryWithOptions(client, resync, metadatainformer.WithTransform(ownersOnly))
	jobs := c.metaFactory.ForResource(jobsResource)
	c.Jobs = jobs.Lister()
	c.informers["jobs"] = jobs.Informer()
}

// ownersOnly keeps of an object's metadata what names it and its owners.
func ownersOnly(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
			OwnerReferences: m.OwnerReferences,
		}}, nil
	}
	return obj, nil
}

// Start starts the informers; they run until ctx ends or Shutdown.
func (c *Caches) Start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.stop = ctx.Done()
	c.factory.Start(c.stop)
	if c.metaFactory != nil {
		c.metaFactory.Start(c.stop)
	}
	if c.compat != nil {
		c.compat.start(ctx)
	}
}

// WaitForSync blocks until every cache has synced or they are stopped.
func (c *Caches) WaitForSync() bool {
	for _, ok := range c.factory.WaitForCacheSync(c.stop) {
		if !ok {
			return false
		}
	}
	if c.metaFactory != nil {
		for _, ok := range c.metaFactory.WaitForCacheSync(c.stop) {
			if !ok {
				return false
			}
		}
	}
	if c.compat != nil {
		return c.compat.waitForSync()
	}
	return true
}

// Synced reports whether every informer has synced.
func (c *Caches) Synced() bool {
	for _, inf := range c.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return c.compat == nil || c.compat.synced()
}

// Shutdown stops the informers and waits for them.
func (c *Caches) Shutdown() {
	if c.cancel != nil {
		c.cancel()
	}
	c.factory.Shutdown()
	if c.metaFactory != nil {
		c.metaFactory.Shutdown()
	}
	if c.compat != nil {
		c.compat.factory.Shutdown()
	}
}

// transform returns the informers' transform: it keeps of each object
// what meshwave reads, so that what the caches hold grows with the
// cluster as little as it can. It runs on objects the informer has just
// decoded and owns, so it may take their maps and strings. It runs twice
// on an object a streaming list returns (into the reflector's store, then
// into the queue), so it keeps all of what it kept, and passes a
// CachedPod, CachedReplicaSet or CachedControllerRevision through as it
// is.
func transform(keepPodAnnotations map[string]bool) cache.TransformFunc {
	podMeta := newMetaPool()
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			return podMeta.share(slimPod(o, keepPodAnnotations)), nil
		case *appsv1.Deployment:
			return slimDeployment(o), nil
		case *appsv1.ReplicaSet:
			return slimReplicaSet(o), nil
		case *appsv1.StatefulSet:
			return slimStatefulSet(o), nil
		case *appsv1.DaemonSet:
			return slimDaemonSet(o), nil
		case *appsv1.ControllerRevision:
			return slimRevision(o), nil
		case *corev1.Namespace:
			o.ManagedFields = nil
			o.Annotations = withoutLastApplied(o.Annotations)
			return o, nil
		case *policyv1.PodDisruptionBudget:
			o.ManagedFields = nil
			return o, nil
		case *admissionregv1.MutatingWebhookConfiguration:
			o.ManagedFields = nil
			// An injector's caBundle is the root of trust its istiod
			// distributes (a fleet compares it); one copy is enough.
			kept := !strings.HasPrefix(o.Name, injectorPrefix)
			for i := range o.Webhooks {
				if !kept && strings.HasSuffix(o.Webhooks[i].Name, injectorWebhookSuffix) && len(o.Webhooks[i].ClientConfig.CABundle) > 0 {
					kept = true
					continue
				}
				o.Webhooks[i].ClientConfig.CABundle = nil
			}
			return o, nil
		}
		return obj, nil
	}
}

// slimWorkloadMeta keeps of a workload's metadata what names it (an
// Event on it names its UID and resourceVersion too), its generation,
// which the rollout gate compares with the status's observedGeneration,
// and its labels and annotations, which carry meshwave's settings and
// records and name a GitOps owner. Nothing reads a workload's owners,
// finalizers or timestamps, nor kubectl's last applied configuration.
func slimWorkloadMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, Labels: internMap(m.Labels), Annotations: internMap(withoutLastApplied(m.Annotations))}
}

// slimTemplate keeps of a pod template its labels, which selectors and
// a move's persisted settings are checked against, and its annotations,
// which carry the restart stamp and Istio's settings.
func slimTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: internMap(t.Labels), Annotations: internMap(t.Annotations)}}
}

// withoutLastApplied drops kubectl's last applied configuration, a copy
// of the whole object as applied that nothing in meshwave reads, from a
// freshly decoded object's annotations; nil when none remain.
func withoutLastApplied(annotations map[string]string) map[string]string {
	// Written only when there: a map shared with the object's source (a
	// fake clientset's tracker) is never written for nothing.
	if _, applied := annotations[corev1.LastAppliedConfigAnnotation]; applied {
		delete(annotations, corev1.LastAppliedConfigAnnotation)
		if len(annotations) == 0 {
			return nil
		}
		return annotations
	}
	if len(annotations) == 0 {
		return nil
	}
	return annotations
}

// slimDeployment keeps what workloadOf reads: no selector, strategy or
// conditions.
func slimDeployment(d *appsv1.Deployment) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: slimWorkloadMeta(d.ObjectMeta),
		Spec:       appsv1.DeploymentSpec{Replicas: d.Spec.Replicas, Paused: d.Spec.Paused, Template: slimTemplate(d.Spec.Template)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.Replicas,
			UpdatedReplicas: d.Status.UpdatedReplicas, ReadyReplicas: d.Status.ReadyReplicas, AvailableReplicas: d.Status.AvailableReplicas},
	}
}

// slimStatefulSet keeps what statefulSetWorkload reads: the update
// strategy, and the status with its revisions; no selector, claim
// templates or conditions.
func slimStatefulSet(s *appsv1.StatefulSet) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: slimWorkloadMeta(s.ObjectMeta),
		Spec: appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas, Template: slimTemplate(s.Spec.Template),
			UpdateStrategy: s.Spec.UpdateStrategy},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: s.Status.ObservedGeneration, Replicas: s.Status.Replicas,
			UpdatedReplicas: s.Status.UpdatedReplicas, ReadyReplicas: s.Status.ReadyReplicas, AvailableReplicas: s.Status.AvailableReplicas,
			CurrentRevision: s.Status.CurrentRevision, UpdateRevision: s.Status.UpdateRevision},
	}
}

// slimDaemonSet keeps what daemonSetWorkload and daemonPodCurrent read:
// the update strategy's type, the template generation annotation and the
// status's counts; no selector or conditions.
func slimDaemonSet(d *appsv1.DaemonSet) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: slimWorkloadMeta(d.ObjectMeta),
		Spec: appsv1.DaemonSetSpec{Template: slimTemplate(d.Spec.Template),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: d.Spec.UpdateStrategy.Type}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: d.Status.ObservedGeneration, DesiredNumberScheduled: d.Status.DesiredNumberScheduled,
			CurrentNumberScheduled: d.Status.CurrentNumberScheduled, UpdatedNumberScheduled: d.Status.UpdatedNumberScheduled,
			NumberReady: d.Status.NumberReady, NumberAvailable: d.Status.NumberAvailable},
	}
}

// controllerOnly keeps of an object's owners its controller, the one
// metav1.GetControllerOf reads; nil when it has none.
func controllerOnly(owners []metav1.OwnerReference) []metav1.OwnerReference {
	for _, o := range owners {
		if o.Controller != nil && *o.Controller {
			return []metav1.OwnerReference{{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID, Controller: o.Controller}}
		}
	}
	return nil
}
