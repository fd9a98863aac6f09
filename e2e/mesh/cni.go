package mesh

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The labels and the annotation of ambient enrolment (istio.io/api's
// label and annotation packages; see docs/ambient-facts.md).
const (
	LabelDataplaneMode       = "istio.io/dataplane-mode"
	DataplaneModeAmbient     = "ambient"
	DataplaneModeNone        = "none"
	AnnotationRedirection    = "ambient.istio.io/redirection"
	RedirectionEnabled       = "enabled"
	annotationSidecarStatus  = "sidecar.istio.io/status"
	cniExcludedNamespace     = "kube-system"
	cniReconcileRetryBackoff = time.Second
)

// CNI simulates the istio-cni node agent of every node, in ambient mode:
// it enrols the pods its default enablement selectors match (istio-cni's
// CompiledEnablementSelectors.Matches: a pod labelled
// istio.io/dataplane-mode=ambient, or a pod of a namespace so labelled
// that is not labelled none), never a pod with a sidecar, a host-network
// pod or one of kube-system, and marks each enrolled pod with
// ambient.istio.io/redirection=enabled, as the real agent does last once
// traffic is redirected to ztunnel. A pod that stops matching loses the
// annotation. Withhold keeps it from the pods of a namespace, as a node
// agent that cannot reach ztunnel would.
type CNI struct {
	m        *Mesh
	cancel   context.CancelFunc
	done     sync.WaitGroup
	pods     corev1listers.PodLister
	ns       corev1listers.NamespaceLister
	queue    workqueue.TypedRateLimitingInterface[types.NamespacedName]
	mu       sync.Mutex
	withheld map[string]bool
}

// StartCNI starts the simulated istio-cni node agents; Stop ends them.
func (m *Mesh) StartCNI(ctx context.Context) (*CNI, error) {
	cctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(m.client, 0)
	c := &CNI{m: m, cancel: cancel, pods: factory.Core().V1().Pods().Lister(), ns: factory.Core().V1().Namespaces().Lister(),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]()),
		withheld: map[string]bool{}}
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			c.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := factory.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if n, ok := obj.(*corev1.Namespace); ok {
				c.requeueNamespace(n.Name)
			}
		},
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(cctx.Done())
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			factory.Shutdown()
			return nil, context.Cause(ctx)
		}
	}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		for c.next(cctx) {
		}
	}()
	go func() {
		<-cctx.Done()
		c.queue.ShutDown()
		factory.Shutdown()
	}()
	return c, nil
}

// Stop ends the node agents.
func (c *CNI) Stop() {
	c.cancel()
	c.done.Wait()
}

// Withhold keeps the redirection from the pods of namespace until the
// returned function is called.
func (c *CNI) Withhold(namespace string) (clear func()) {
	c.mu.Lock()
	c.withheld[namespace] = true
	c.mu.Unlock()
	c.requeueNamespace(namespace)
	return func() {
		c.mu.Lock()
		delete(c.withheld, namespace)
		c.mu.Unlock()
		c.requeueNamespace(namespace)
	}
}

func (c *CNI) requeueNamespace(ns string) {
	pods, err := c.pods.Pods(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		c.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
}

func (c *CNI) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		c.queue.AddAfter(key, cniReconcileRetryBackoff)
		return true
	}
	c.queue.Forget(key)
	return true
}

// Enrolled reports whether the node agent would enrol pod in a namespace
// labelled nsLabels.
func Enrolled(pod *corev1.Pod, nsLabels map[string]string) bool {
	if pod.Spec.HostNetwork || pod.Namespace == cniExcludedNamespace {
		return false
	}
	if _, sidecar := pod.Annotations[annotationSidecarStatus]; sidecar {
		return false
	}
	mode := pod.Labels[LabelDataplaneMode]
	return mode == DataplaneModeAmbient || (mode != DataplaneModeNone && nsLabels[LabelDataplaneMode] == DataplaneModeAmbient)
}

func (c *CNI) reconcile(ctx context.Context, key types.NamespacedName) error {
	pod, err := c.pods.Pods(key.Namespace).Get(key.Name)
	if err != nil {
		return nil // gone
	}
	ns, err := c.ns.Get(key.Namespace)
	if err != nil {
		return err
	}
	c.mu.Lock()
	withheld := c.withheld[key.Namespace]
	c.mu.Unlock()
	running := pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != ""
	want := running && !withheld && Enrolled(pod, ns.Labels)
	has := pod.Annotations[AnnotationRedirection] == RedirectionEnabled
	if want == has {
		return nil
	}
	var value any
	if want {
		value = RedirectionEnabled
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationRedirection: value}}})
	if err != nil {
		return err
	}
	_, err = c.m.client.CoreV1().Pods(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "istio-cni"})
	return err
}
