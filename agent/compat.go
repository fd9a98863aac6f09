package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/canary"
)

// The kinds the compatibility prechecks read. Each is watched only once
// the cluster serves it: Istio's CRDs and Sail's are optional.
var (
	envoyFiltersResource = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}
	telemetriesResource  = schema.GroupVersionResource{Group: "telemetry.istio.io", Version: "v1", Resource: "telemetries"}
	sailIstiosResource   = schema.GroupVersionResource{Group: "sailoperator.io", Version: "v1", Resource: "istios"}
	// The security kinds the move to ambient's prechecks read.
	peerAuthenticationsResource   = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
	authorizationPoliciesResource = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	// The Gateway API's gateways, for a move to ambient's waypoint.
	gatewaysResource = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	// The subset routing a move to ambient warns of.
	virtualServicesResource  = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	destinationRulesResource = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}
	compatResources          = []schema.GroupVersionResource{envoyFiltersResource, telemetriesResource, sailIstiosResource,
		peerAuthenticationsResource, authorizationPoliciesResource, gatewaysResource, virtualServicesResource, destinationRulesResource}
)

// compatRecheck is how often discovery is asked again for the kinds whose
// CRD was missing: one installed later is then watched within a minute.
const compatRecheck = time.Minute

// compatCaches are dynamic informers of the compatibility kinds, each
// started when discovery first lists its resource. Until then its kind
// reads as empty: a cluster without the CRDs gathers nothing, and no
// informer fails to sync.
type compatCaches struct {
	discovery discovery.DiscoveryInterface
	factory   dynamicinformer.DynamicSharedInformerFactory
	recheck   time.Duration

	mu        sync.Mutex
	listers   map[schema.GroupVersionResource]cache.GenericLister
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
	handlers  []cache.ResourceEventHandler
	stop      <-chan struct{}
	// unknown are the kinds discovery could not answer for at its last
	// asking: whether they hold anything cannot be told.
	unknown map[schema.GroupVersionResource]error
}

// WatchCompat adds the compatibility kinds, before Start: each is watched
// once disc lists it.
func (c *Caches) WatchCompat(client dynamic.Interface, disc discovery.DiscoveryInterface, resync time.Duration) {
	c.compat = &compatCaches{
		discovery: disc,
		factory:   dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, resync, "", nil),
		recheck:   compatRecheck,
		listers:   map[schema.GroupVersionResource]cache.GenericLister{},
		informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
	}
}

// onChange registers a handler on every compatibility informer, those
// started later included.
func (cc *compatCaches) onChange(h cache.ResourceEventHandler) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.handlers = append(cc.handlers, h)
	for _, inf := range cc.informers {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// start watches the kinds the cluster serves now, and asks again every
// recheck for the others until all are watched or stop closes.
func (cc *compatCaches) start(ctx context.Context) {
	cc.mu.Lock()
	cc.stop = ctx.Done()
	cc.mu.Unlock()
	if cc.ensure(ctx) {
		return
	}
	go func() {
		tick := time.NewTicker(cc.recheck)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if cc.ensure(ctx) {
					return // every kind is watched
				}
			}
		}
	}()
}

// ensure starts an informer for each served kind not yet watched, and
// reports whether every kind is watched.
func (cc *compatCaches) ensure(ctx context.Context) bool {
	all := true
	for _, gvr := range compatResources {
		cc.mu.Lock()
		_, watched := cc.informers[gvr]
		cc.mu.Unlock()
		if watched {
			continue
		}
		served, err := cc.served(gvr)
		cc.mu.Lock()
		if cc.unknown == nil {
			cc.unknown = map[schema.GroupVersionResource]error{}
		}
		if err != nil {
			cc.unknown[gvr] = err
		} else {
			delete(cc.unknown, gvr)
		}
		cc.mu.Unlock()
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot tell whether the cluster serves a kind the prechecks read; asking again later", "resource", gvr.String(), "err", err.Error())
		}
		if !served {
			all = false
			continue
		}
		cc.watch(ctx, gvr)
	}
	return all
}

// served asks discovery whether the cluster serves gvr. A group version it
// does not know is a plain no.
func (cc *compatCaches) served(gvr schema.GroupVersionResource) (bool, error) {
	list, err := cc.discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

func (cc *compatCaches) watch(ctx context.Context, gvr schema.GroupVersionResource) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	gi := cc.factory.ForResource(gvr)
	inf := gi.Informer()
	if err := inf.SetTransform(slimCompat(gvr)); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot slim a precheck informer's objects", "resource", gvr.String())
	}
	for _, h := range cc.handlers {
		if _, err := inf.AddEventHandler(h); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot watch a kind the prechecks read", "resource", gvr.String())
		}
	}
	cc.informers[gvr], cc.listers[gvr] = inf, gi.Lister()
	cc.factory.Start(cc.stop)
	klog.FromContext(ctx).Info("Watching a kind the prechecks read", "resource", gvr.String())
}

// synced reports whether every started informer has synced.
func (cc *compatCaches) synced() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, inf := range cc.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// waitForSync waits for the informers started so far.
func (cc *compatCaches) waitForSync() bool {
	cc.mu.Lock()
	stop, infs := cc.stop, make([]cache.InformerSynced, 0, len(cc.informers))
	for _, inf := range cc.informers {
		infs = append(infs, inf.HasSynced)
	}
	cc.mu.Unlock()
	return cache.WaitForCacheSync(stop, infs...)
}

func (cc *compatCaches) list(gvr schema.GroupVersionResource, namespace string) []*unstructured.Unstructured {
	cc.mu.Lock()
	lister, ok := cc.listers[gvr]
	inf := cc.informers[gvr]
	cc.mu.Unlock()
	if !ok || !inf.HasSynced() {
		return nil
	}
	var objs []any
	if namespace == "" {
		list, err := lister.List(labels.Everything())
		if err != nil {
			return nil
		}
		for _, o := range list {
			objs = append(objs, o)
		}
	} else {
		list, err := lister.ByNamespace(namespace).List(labels.Everything())
		if err != nil {
			return nil
		}
		for _, o := range list {
			objs = append(objs, o)
		}
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetNamespace() != out[j].GetNamespace() {
			return out[i].GetNamespace() < out[j].GetNamespace()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

// slimCompat keeps of each object its identity and the spec fields the
// prechecks read: an EnvoyFilter's patches (Lua code, Wasm config) stay
// out of memory.
func slimCompat(gvr schema.GroupVersionResource) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
		out.SetName(u.GetName())
		out.SetNamespace(u.GetNamespace())
		out.SetUID(u.GetUID())
		out.SetResourceVersion(u.GetResourceVersion())
		keep := func(path ...string) {
			if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, path...); found {
				_ = unstructured.SetNestedField(out.Object, v, path...)
			}
		}
		switch gvr {
		case envoyFiltersResource:
			keep("spec", "workloadSelector")
			// The informer may slim an object twice (a watch-list's
			// initial events): a slim one keeps what it has.
			keep("spec", "proxyVersions")
			patches, _, _ := unstructured.NestedSlice(u.Object, "spec", "configPatches")
			var versions []any
			for _, p := range patches {
				pm, _ := p.(map[string]any)
				v, _, _ := unstructured.NestedString(pm, "match", "proxy", "proxyVersion")
				versions = append(versions, v)
			}
			if versions != nil {
				_ = unstructured.SetNestedSlice(out.Object, versions, "spec", "proxyVersions")
			}
		case telemetriesResource:
			keep("spec", "selector")
		case sailIstiosResource:
			keep("spec", "updateStrategy")
			keep("status", "activeRevisionName")
		case peerAuthenticationsResource:
			keep("spec", "selector")
			keep("spec", "mtls")
			keep("spec", "portLevelMtls")
		case virtualServicesResource, destinationRulesResource:
			// Only the subsets' names stay (a slim object keeps its own).
			keep("spec", "subsetNames")
			if names := subsetNames(gvr, u.Object); len(names) > 0 {
				_ = unstructured.SetNestedStringSlice(out.Object, names, "spec", "subsetNames")
			}
		case gatewaysResource:
			// Its listeners and addresses stay out: the waypoint step
			// reads its class, revision and Programmed condition.
			kept := map[string]string{}
			for _, k := range []string{canary.LabelRev, canary.LabelWaypointFor} {
				if v, ok := u.GetLabels()[k]; ok {
					kept[k] = v
				}
			}
			if len(kept) > 0 {
				out.SetLabels(kept)
			}
			keep("spec", "gatewayClassName")
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if cm, _ := c.(map[string]any); cm != nil && cm["type"] == "Programmed" {
					slim := map[string]any{"type": "Programmed", "status": cm["status"], "reason": cm["reason"], "message": cm["message"]}
					_ = unstructured.SetNestedSlice(out.Object, []any{slim}, "status", "conditions")
				}
			}
		case authorizationPoliciesResource:
			// The whole spec, labels and annotations: a policy
			// meshwave.io/delete-replaced-policies deletes is kept as a
			// copy to create again, and its replacement is known by its
			// rules. Policies are few and small.
			keep("spec")
			out.SetLabels(u.GetLabels())
			out.SetAnnotations(u.GetAnnotations())
			if l7 := canary.L7Features(u.Object); len(l7) > 0 {
				_ = unstructured.SetNestedStringSlice(out.Object, l7, "spec", "l7")
			}
			if l7 := canary.L7Features(u.Object); len(l7) > 0 {
				_ = unstructured.SetNestedStringSlice(out.Object, l7, "spec", "l7")
			}
		}
		return out, nil
	}
}

// gatherCompat reads the compatibility kinds for namespace ns: its own
// EnvoyFilters and the root namespace's, its Telemetries, and every Sail
// Istio resource.
func (cc *compatCaches) gather(ns, rootNamespace string) canary.Compat {
	var out canary.Compat
	if cc == nil {
		// Not watched at all: nothing can be said of the policies.
		out.Unread = []string{"peerauthentications and authorizationpolicies: the agent has no dynamic client to watch them"}
		return out
	}
	namespaces := []string{ns}
	if rootNamespace != ns {
		namespaces = []string{rootNamespace, ns}
	}
	for _, n := range namespaces {
		for _, u := range cc.list(envoyFiltersResource, n) {
			f := canary.EnvoyFilter{Namespace: u.GetNamespace(), Name: u.GetName()}
			f.WorkloadSelector, _, _ = unstructured.NestedStringMap(u.Object, "spec", "workloadSelector", "labels")
			versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "proxyVersions")
			for _, v := range versions {
				if s, ok := v.(string); ok && s != "" {
					f.ProxyVersions = append(f.ProxyVersions, s)
				}
			}
			out.EnvoyFilters = append(out.EnvoyFilters, f)
		}
	}
	for _, u := range cc.list(telemetriesResource, ns) {
		t := canary.Telemetry{Namespace: u.GetNamespace(), Name: u.GetName()}
		t.MatchLabels, _, _ = unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		out.Telemetries = append(out.Telemetries, t)
	}
	for _, n := range namespaces {
		for _, u := range cc.list(peerAuthenticationsResource, n) {
			pa := canary.PeerAuthentication{Namespace: u.GetNamespace(), Name: u.GetName()}
			pa.MatchLabels, _, _ = unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
			pa.Mode, _, _ = unstructured.NestedString(u.Object, "spec", "mtls", "mode")
			pa.MeshWide = n == rootNamespace && n != ns && len(pa.MatchLabels) == 0
			ports, _, _ := unstructured.NestedMap(u.Object, "spec", "portLevelMtls")
			for _, port := range slices.Sorted(maps.Keys(ports)) {
				if m, _ := ports[port].(map[string]any); m != nil && m["mode"] == "DISABLE" {
					pa.DisabledPorts = append(pa.DisabledPorts, port)
				}
			}
			out.PeerAuthentications = append(out.PeerAuthentications, pa)
		}
		for _, u := range cc.list(authorizationPoliciesResource, n) {
			ap := canary.AuthorizationPolicy{Namespace: u.GetNamespace(), Name: u.GetName()}
			ap.MatchLabels, _, _ = unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
			_, ref, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "targetRef")
			refs, _, _ := unstructured.NestedSlice(u.Object, "spec", "targetRefs")
			ap.TargetRefs = ref || len(refs) > 0
			ap.L7, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "l7")
			ap.MeshWide = n == rootNamespace && n != ns && len(ap.MatchLabels) == 0 && !ap.TargetRefs
			ap.RootNamespace = n == rootNamespace
			readReplacement(u, &ap)
			out.AuthorizationPolicies = append(out.AuthorizationPolicies, ap)
		}
	}
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		kind string
	}{{destinationRulesResource, "DestinationRule"}, {virtualServicesResource, "VirtualService"}} {
		for _, u := range cc.list(r.gvr, ns) {
			if names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "subsetNames"); len(names) > 0 {
				out.SubsetRoutes = append(out.SubsetRoutes, canary.SubsetRoute{Kind: r.kind, Namespace: u.GetNamespace(), Name: u.GetName(), Subsets: names})
			}
		}
	}
	for _, u := range cc.list(gatewaysResource, ns) {
		g := canary.Gateway{Namespace: u.GetNamespace(), Name: u.GetName(), Revision: u.GetLabels()[canary.LabelRev], For: u.GetLabels()[canary.LabelWaypointFor]}
		g.Class, _, _ = unstructured.NestedString(u.Object, "spec", "gatewayClassName")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		g.ProgrammedWhy = "no Programmed condition"
		for _, c := range conds {
			if cm, _ := c.(map[string]any); cm != nil && cm["type"] == "Programmed" {
				g.Programmed = cm["status"] == "True"
				g.ProgrammedWhy = fmt.Sprintf("%v: %v", cm["reason"], cm["message"])
			}
		}
		out.Gateways = append(out.Gateways, g)
	}
	cc.mu.Lock()
	_, out.GatewayAPI = cc.informers[gatewaysResource]
	if err, ok := cc.unknown[gatewaysResource]; ok && !out.GatewayAPI {
		out.Unread = append(out.Unread, fmt.Sprintf("%s: %v", gatewaysResource.Resource, err))
	} else if inf, watched := cc.informers[gatewaysResource]; watched && !inf.HasSynced() {
		out.Unread = append(out.Unread, gatewaysResource.Resource+": not read yet")
	}
	for _, gvr := range []schema.GroupVersionResource{peerAuthenticationsResource, authorizationPoliciesResource} {
		if err, ok := cc.unknown[gvr]; ok {
			out.Unread = append(out.Unread, fmt.Sprintf("%s: %v", gvr.Resource, err))
		} else if inf, watched := cc.informers[gvr]; watched && !inf.HasSynced() {
			out.Unread = append(out.Unread, gvr.Resource+": not read yet")
		}
	}
	cc.mu.Unlock()
	for _, u := range cc.list(sailIstiosResource, "") {
		is := canary.SailIstio{Name: u.GetName()}
		is.UpdateStrategy, _, _ = unstructured.NestedString(u.Object, "spec", "updateStrategy", "type")
		if g, found, err := unstructured.NestedInt64(u.Object, "spec", "updateStrategy", "inactiveRevisionDeletionGracePeriodSeconds"); found && err == nil {
			is.GracePeriodSeconds = &g
		}
		out.SailIstios = append(out.SailIstios, is)
	}
	return out
}

// subsetNames are the subsets a DestinationRule defines, or a
// VirtualService's routes (http, tcp, tls) send to, each once in order.
func subsetNames(gvr schema.GroupVersionResource, obj map[string]any) []string {
	var out []string
	add := func(name any) {
		if s, ok := name.(string); ok && s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if gvr == destinationRulesResource {
		subsets, _, _ := unstructured.NestedSlice(obj, "spec", "subsets")
		for _, s := range subsets {
			if m, ok := s.(map[string]any); ok {
				add(m["name"])
			}
		}
		return out
	}
	for _, kind := range []string{"http", "tcp", "tls"} {
		routes, _, _ := unstructured.NestedSlice(obj, "spec", kind)
		for _, r := range routes {
			rm, _ := r.(map[string]any)
			dests, _ := rm["route"].([]any)
			for _, d := range dests {
				dm, _ := d.(map[string]any)
				dest, _ := dm["destination"].(map[string]any)
				add(dest["subset"])
			}
		}
	}
	return out
}

// readReplacement reads what tells a policy's replacement, and the copy
// meshwave.io/delete-replaced-policies keeps of it: its UID, action and
// rules, its targetRefs as Kind/name, the policies its meshwave.io/replaces
// names, and the policy as it would be created again (the l7 list the
// informer adds is meshwave's, not the policy's).
func readReplacement(u *unstructured.Unstructured, ap *canary.AuthorizationPolicy) {
	ap.UID = string(u.GetUID())
	ap.Action, _, _ = unstructured.NestedString(u.Object, "spec", "action")
	if ap.Action == "" {
		ap.Action = "ALLOW"
	}
	if ap.Action == "CUSTOM" {
		// A CUSTOM policy's decision is its provider's.
		provider, _, _ := unstructured.NestedString(u.Object, "spec", "provider", "name")
		ap.Action += "/" + provider
	}
	// A dry-run policy only logs what it would decide (istio.io/dry-run).
	ap.DryRun = u.GetAnnotations()["istio.io/dry-run"] == "true"
	if rules, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "rules"); found {
		if raw, err := json.Marshal(rules); err == nil {
			ap.Rules = string(raw)
		}
	}
	var refs []any
	if one, found, _ := unstructured.NestedMap(u.Object, "spec", "targetRef"); found {
		refs = append(refs, one)
	}
	many, _, _ := unstructured.NestedSlice(u.Object, "spec", "targetRefs")
	for _, r := range append(refs, many...) {
		if m, _ := r.(map[string]any); m != nil {
			kind, _ := m["kind"].(string)
			name, _ := m["name"].(string)
			ap.Refs = append(ap.Refs, kind+"/"+name)
		}
	}
	for _, name := range strings.Split(u.GetAnnotations()[canary.AnnotationReplaces], ",") {
		if name = strings.TrimSpace(name); name != "" {
			ap.Replaces = append(ap.Replaces, name)
		}
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	delete(spec, "l7")
	metadata := map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()}
	if l := u.GetLabels(); len(l) > 0 {
		metadata["labels"] = l
	}
	if a := u.GetAnnotations(); len(a) > 0 {
		metadata["annotations"] = a
	}
	if raw, err := json.Marshal(map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": metadata, "spec": spec}); err == nil {
		ap.Copy = string(raw)
	}
}
