package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/canary"
)

// The other clusters of a fleet are read through kubeconfig Secrets in the
// agent's own namespace, as Istio reads its remote clusters: each Secret
// labelled meshwave.io/remote-cluster=true (or, when asked, Istio's
// istio/multiCluster=true) holds one kubeconfig per data key, the key
// naming the cluster. For each cluster of the rings, the agent watches the
// namespaces' metadata there (their meshwave.io/status), and nothing else;
// it never writes to another cluster.
const (
	LabelRemoteCluster      = "meshwave.io/remote-cluster"
	labelIstioMultiCluster  = "istio/multiCluster"
	remoteNamespacesRefresh = 0
)

var namespacesResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// fleetClusters keeps a namespace watch on each other cluster of the
// rings, from the kubeconfig Secrets that name it.
type fleetClusters struct {
	client    kubernetes.Interface
	namespace string
	self      string
	wanted    map[string]bool
	istio     bool
	// changed is told the name of a namespace that changed in another
	// cluster: the namespace of that name here may go on.
	changed func(name string)

	mu      sync.Mutex
	remotes map[string]*remoteCluster
	ctx     context.Context
}

// remoteCluster is the watch of one other cluster's namespaces.
type remoteCluster struct {
	kubeconfig []byte
	source     string
	cancel     context.CancelFunc
	informer   cache.SharedIndexInformer
	health     *transportHealth
	err        string
}

func newFleetClusters(client kubernetes.Interface, namespace string, f FleetConfig, changed func(string)) *fleetClusters {
	wanted := map[string]bool{}
	for _, c := range f.Others() {
		wanted[c] = true
	}
	return &fleetClusters{client: client, namespace: namespace, self: f.Cluster, wanted: wanted, istio: f.IstioRemoteSecrets,
		changed: changed, remotes: map[string]*remoteCluster{}}
}

// start watches the Secrets, and through them the clusters, until ctx ends.
func (fc *fleetClusters) start(ctx context.Context) {
	fc.mu.Lock()
	fc.ctx = ctx
	fc.mu.Unlock()
	selectors := []string{LabelRemoteCluster + "=true"}
	if fc.istio {
		selectors = append(selectors, labelIstioMultiCluster+"=true")
	}
	var secretInformers []cache.SharedIndexInformer
	for _, sel := range selectors {
		factory := informers.NewSharedInformerFactoryWithOptions(fc.client, 0, informers.WithNamespace(fc.namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
		inf := factory.Core().V1().Secrets().Informer()
		secretInformers = append(secretInformers, inf)
		factory.Start(ctx.Done())
	}
	resync := func() {
		var secrets []*corev1.Secret
		for _, inf := range secretInformers {
			for _, obj := range inf.GetStore().List() {
				if s, ok := obj.(*corev1.Secret); ok {
					secrets = append(secrets, s)
				}
			}
		}
		fc.reconcile(secrets)
	}
	for _, inf := range secretInformers {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { resync() },
			UpdateFunc: func(any, any) { resync() },
			DeleteFunc: func(any) { resync() },
		})
	}
}

// reconcile starts, restarts and stops the cluster watches the Secrets
// call for. A cluster two Secrets name is read from the first by name
// (meshwave's own before Istio's).
func (fc *fleetClusters) reconcile(secrets []*corev1.Secret) {
	slices.SortFunc(secrets, func(a, b *corev1.Secret) int {
		ai, bi := a.Labels[LabelRemoteCluster] == "true", b.Labels[LabelRemoteCluster] == "true"
		switch {
		case ai && !bi:
			return -1
		case bi && !ai:
			return 1
		}
		return bytes.Compare([]byte(a.Name), []byte(b.Name))
	})
	found := map[string]*corev1.Secret{}
	configs := map[string][]byte{}
	for _, s := range secrets {
		for cluster, kubeconfig := range s.Data {
			if fc.wanted[cluster] && found[cluster] == nil {
				found[cluster], configs[cluster] = s, kubeconfig
			}
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.ctx == nil {
		return
	}
	for cluster, r := range fc.remotes {
		if cfg, ok := configs[cluster]; !ok || !bytes.Equal(cfg, r.kubeconfig) {
			r.cancel()
			delete(fc.remotes, cluster)
		}
	}
	for _, cluster := range slices.Sorted(maps.Keys(configs)) {
		if _, ok := fc.remotes[cluster]; ok {
			continue
		}
		fc.remotes[cluster] = fc.watch(cluster, "Secret "+fc.namespace+"/"+found[cluster].Name, configs[cluster])
		fc.changed("")
	}
}

// watch starts the namespace watch of one cluster.
func (fc *fleetClusters) watch(cluster, source string, kubeconfig []byte) *remoteCluster {
	ctx, cancel := context.WithCancel(fc.ctx)
	r := &remoteCluster{kubeconfig: kubeconfig, source: source, cancel: cancel, health: &transportHealth{}}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		r.err = fmt.Sprintf("the kubeconfig in %s cannot be read: %v", source, err)
		return r
	}
	rc.Timeout = 30 * time.Second
	rc.Wrap(r.health.wrap)
	client, err := metadata.NewForConfig(rc)
	if err != nil {
		r.err = fmt.Sprintf("the kubeconfig in %s: %v", source, err)
		return r
	}
	r.informer = metadatainformer.NewFilteredMetadataInformer(client, namespacesResource, "", remoteNamespacesRefresh, cache.Indexers{}, nil).Informer()
	_ = r.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		r.health.failed(err)
	})
	_, _ = r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { fc.changed(nameOf(obj)) },
		UpdateFunc: func(_, obj any) { fc.changed(nameOf(obj)) },
		DeleteFunc: func(obj any) { fc.changed(nameOf(obj)) },
	})
	go r.informer.RunWithContext(ctx)
	klog.FromContext(ctx).Info("Watching the namespaces of another cluster of the fleet", "cluster", cluster, "secret", source)
	return r
}

func nameOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		return m.GetName()
	}
	return ""
}

// clusters is what the phase machine reads of the other clusters: each
// one's namespaces with their status, or why it cannot be read.
// A cluster no Secret names is left out (the machine says so).
func (fc *fleetClusters) clusters() map[string]canary.PeerCluster {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	out := map[string]canary.PeerCluster{}
	for cluster, r := range fc.remotes {
		switch {
		case r.err != "":
			out[cluster] = canary.PeerCluster{Err: r.err}
			continue
		case r.health.broken() != "":
			out[cluster] = canary.PeerCluster{Err: fmt.Sprintf("its apiserver did not answer through %s: %s", r.source, r.health.broken())}
			continue
		case !r.informer.HasSynced():
			out[cluster] = canary.PeerCluster{Err: fmt.Sprintf("its namespaces are not read yet through %s", r.source)}
			continue
		}
		p := canary.PeerCluster{Namespaces: map[string]canary.PeerNamespace{}}
		for _, obj := range r.informer.GetStore().List() {
			m, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				continue
			}
			_, opted := m.Annotations[canary.AnnotationTargetRevision]
			n := canary.PeerNamespace{OptedIn: opted, Labels: canary.PeerLabels(m.Labels)}
			st, _, err := canary.ParseStatus(m.Annotations)
			if err != nil {
				n.StatusErr = err.Error()
			} else {
				n.Status = st
			}
			p.Namespaces[m.Name] = n
		}
		out[cluster] = p
	}
	return out
}

// transportHealth remembers whether the last request to a cluster failed:
// a watch's cache keeps the last state it saw, so once the apiserver stops
// answering, what it holds is no longer known to be true.
type transportHealth struct {
	mu  sync.Mutex
	err string
}

func (h *transportHealth) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		switch {
		case err != nil:
			h.failed(err)
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			h.failed(fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status))
		default:
			h.mu.Lock()
			h.err = ""
			h.mu.Unlock()
		}
		return resp, err
	})
}

func (h *transportHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err.Error()
}

func (h *transportHealth) broken() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
