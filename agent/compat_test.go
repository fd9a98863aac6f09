package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshwave/meshwave/canary"
)

// servedKinds is a discovery client that lists only the kinds it is told,
// which a test may change while the agent runs.
type servedKinds struct {
	discovery.DiscoveryInterface
	mu     sync.Mutex
	served map[schema.GroupVersionResource]bool
	asked  int
	// broken answers every question about its group versions with an error.
	broken map[string]error
}

func (s *servedKinds) serve(gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served[gvr] = true
}

func (s *servedKinds) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	if err := s.broken[gv]; err != nil {
		return nil, err
	}
	out := &metav1.APIResourceList{GroupVersion: gv}
	for gvr := range s.served {
		if gvr.GroupVersion().String() == gv {
			out.APIResources = append(out.APIResources, metav1.APIResource{Name: gvr.Resource, Namespaced: gvr != sailIstiosResource})
		}
	}
	if len(out.APIResources) == 0 {
		// As the apiserver answers for a group no CRD serves.
		return fake.NewClientset().Discovery().ServerResourcesForGroupVersion(gv)
	}
	return out, nil
}

func unstructuredObj(gvr schema.GroupVersionResource, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "spec": spec}}
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func withLabels(u *unstructured.Unstructured, l map[string]string) *unstructured.Unstructured {
	u.SetLabels(l)
	return u
}

func withStatus(u *unstructured.Unstructured, status map[string]any) *unstructured.Unstructured {
	u.Object["status"] = status
	return u
}

func compatObjects() []runtime.Object {
	return []runtime.Object{
		unstructuredObj(envoyFiltersResource, "EnvoyFilter", "istio-system", "lua", map[string]any{
			"configPatches": []any{
				map[string]any{"applyTo": "HTTP_FILTER", "match": map[string]any{"proxy": map[string]any{"proxyVersion": `^1\.25`}},
					"patch": map[string]any{"operation": "INSERT_BEFORE", "value": map[string]any{"inlineCode": "function envoy_on_request(h) end"}}},
				map[string]any{"applyTo": "CLUSTER"},
			},
		}),
		unstructuredObj(envoyFiltersResource, "EnvoyFilter", "shop", "cart", map[string]any{
			"workloadSelector": map[string]any{"labels": map[string]any{"app": "cart"}},
			"configPatches":    []any{map[string]any{"match": map[string]any{"proxy": map[string]any{"proxyVersion": `^1\.2`}}}},
		}),
		unstructuredObj(envoyFiltersResource, "EnvoyFilter", "media", "elsewhere", map[string]any{
			"configPatches": []any{map[string]any{"match": map[string]any{"proxy": map[string]any{"proxyVersion": `^1\.8`}}}},
		}),
		unstructuredObj(telemetriesResource, "Telemetry", "shop", "payments", map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"team": "payments"}},
		}),
		unstructuredObj(peerAuthenticationsResource, "PeerAuthentication", "istio-system", "mesh", map[string]any{
			"mtls": map[string]any{"mode": "STRICT"},
		}),
		unstructuredObj(peerAuthenticationsResource, "PeerAuthentication", "shop", "legacy", map[string]any{
			"selector":      map[string]any{"matchLabels": map[string]any{"app": "legacy"}},
			"mtls":          map[string]any{"mode": "PERMISSIVE"},
			"portLevelMtls": map[string]any{"9000": map[string]any{"mode": "DISABLE"}, "9001": map[string]any{"mode": "STRICT"}},
		}),
		unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "paths", map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "cart"}},
			"rules":    []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"paths": []any{"/admin"}, "ports": []any{"8080"}}}}}},
		}),
		func() *unstructured.Unstructured {
			u := unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "at-waypoint", map[string]any{
				"targetRefs": []any{map[string]any{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "waypoint"}},
				"rules":      []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"methods": []any{"GET"}}}}}},
			})
			u.SetAnnotations(map[string]string{canary.AnnotationReplaces: "paths, older"})
			return u
		}(),
		unstructuredObj(destinationRulesResource, "DestinationRule", "shop", "reviews", map[string]any{
			"host":    "reviews",
			"subsets": []any{map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}}, map[string]any{"name": "v2", "labels": map[string]any{"version": "v2"}}},
		}),
		unstructuredObj(destinationRulesResource, "DestinationRule", "shop", "tls-only", map[string]any{"host": "ratings", "trafficPolicy": map[string]any{}}),
		unstructuredObj(virtualServicesResource, "VirtualService", "shop", "reviews", map[string]any{
			"hosts": []any{"reviews"},
			"http": []any{map[string]any{"route": []any{
				map[string]any{"destination": map[string]any{"host": "reviews", "subset": "v2"}, "weight": int64(90)},
				map[string]any{"destination": map[string]any{"host": "reviews", "subset": "v1"}, "weight": int64(10)},
			}}},
			"tcp": []any{map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": "reviews", "subset": "v2"}}}}},
		}),
		unstructuredObj(virtualServicesResource, "VirtualService", "media", "elsewhere", map[string]any{
			"http": []any{map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": "x", "subset": "v9"}}}}},
		}),
		unstructuredObj(sailIstiosResource, "Istio", "", "default", map[string]any{
			"updateStrategy": map[string]any{"type": "RevisionBased", "inactiveRevisionDeletionGracePeriodSeconds": int64(600)},
		}),
	}
}

// gatewayObjects are created by resource: the fake client would guess
// "gatewaies" from the kind.
func gatewayObjects() []runtime.Object {
	return []runtime.Object{
		withStatus(withLabels(unstructuredObj(gatewaysResource, "Gateway", "shop", "waypoint", map[string]any{
			"gatewayClassName": "istio-waypoint",
			"listeners":        []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}},
		}), map[string]string{canary.LabelRev: "1-26", "team": "shop"}), map[string]any{"conditions": []any{
			map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"},
			map[string]any{"type": "Programmed", "status": "False", "reason": "Pending", "message": "Deployment waypoint is not ready"},
		}}),
		unstructuredObj(gatewaysResource, "Gateway", "media", "elsewhere", map[string]any{"gatewayClassName": "istio-waypoint"}),
	}
}

func newCompatCaches(t *testing.T, disc *servedKinds, recheck time.Duration) (*Caches, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		envoyFiltersResource: "EnvoyFilterList", telemetriesResource: "TelemetryList", sailIstiosResource: "IstioList",
		peerAuthenticationsResource: "PeerAuthenticationList", authorizationPoliciesResource: "AuthorizationPolicyList",
		gatewaysResource: "GatewayList", virtualServicesResource: "VirtualServiceList", destinationRulesResource: "DestinationRuleList",
	}, compatObjects()...)
	for _, o := range gatewayObjects() {
		u := o.(*unstructured.Unstructured)
		require.NoError(t, dyn.Tracker().Create(gatewaysResource, u, u.GetNamespace()))
	}
	c := NewCaches(fake.NewClientset(), 0, nil)
	c.WatchCompat(dyn, disc, 0)
	c.compat.recheck = recheck
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Shutdown() })
	c.Start(ctx)
	require.True(t, c.WaitForSync())
	return c, dyn
}

func gatherShop(t *testing.T, c *Caches) canary.Compat {
	t.Helper()
	snap, err := c.Gather(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, "istio-system")
	require.NoError(t, err)
	return snap.Compat
}

func TestWithoutTheCRDsThePrecheckKindsAreNeverListed(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{}}
	c, dyn := newCompatCaches(t, disc, time.Hour)
	assert.True(t, c.Synced())
	assert.Equal(t, canary.Compat{}, gatherShop(t, c))
	assert.Empty(t, dyn.Actions(), "no LIST or WATCH of a kind the cluster does not serve")
	disc.mu.Lock()
	defer disc.mu.Unlock()
	assert.Equal(t, len(compatResources), disc.asked, "discovery is asked once per kind before the first recheck")
}

func TestTheServedPrecheckKindsAreGatheredSlim(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{envoyFiltersResource: true, telemetriesResource: true}}
	c, dyn := newCompatCaches(t, disc, time.Hour)
	assert.Equal(t, canary.Compat{
		EnvoyFilters: []canary.EnvoyFilter{
			{Namespace: "istio-system", Name: "lua", ProxyVersions: []string{`^1\.25`}},
			{Namespace: "shop", Name: "cart", WorkloadSelector: map[string]string{"app": "cart"}, ProxyVersions: []string{`^1\.2`}},
		},
		Telemetries: []canary.Telemetry{{Namespace: "shop", Name: "payments", MatchLabels: map[string]string{"team": "payments"}}},
	}, gatherShop(t, c), "the root namespace's filters and the namespace's own; no Sail resource, its CRD is absent")
	listed := map[string]bool{}
	for _, a := range dyn.Actions() {
		listed[a.GetVerb()+" "+a.GetResource().Resource] = true
	}
	assert.Equal(t, map[string]bool{"list envoyfilters": true, "watch envoyfilters": true, "list telemetries": true, "watch telemetries": true}, listed)

	// The cache keeps no patch body.
	objs, err := c.compat.listers[envoyFiltersResource].ByNamespace("istio-system").List(labels.Everything())
	require.NoError(t, err)
	_, found, _ := unstructured.NestedFieldNoCopy(objs[0].(*unstructured.Unstructured).Object, "spec", "configPatches")
	assert.False(t, found)

	// Slimming a slim object changes nothing.
	again, err := slimCompat(envoyFiltersResource)(objs[0])
	require.NoError(t, err)
	assert.Equal(t, objs[0], again)
}

func TestAPrecheckKindWhoseCRDArrivesLaterIsWatchedThen(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{}}
	c, _ := newCompatCaches(t, disc, 20*time.Millisecond)
	assert.Empty(t, gatherShop(t, c).SailIstios)
	disc.serve(sailIstiosResource)
	grace := int64(600)
	require.Eventually(t, func() bool { return c.Synced() && len(gatherShop(t, c).SailIstios) == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, []canary.SailIstio{{Name: "default", UpdateStrategy: "RevisionBased", GracePeriodSeconds: &grace}}, gatherShop(t, c).SailIstios)
}

func TestARevisionsProxyVersionIsItsIstiodsImageTagOrItsName(t *testing.T) {
	istiod := func(name, rev, image string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "istio-system", Labels: map[string]string{"app": "istiod", canary.LabelRev: rev}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: image}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	injector := func(rev string) *admissionregv1.MutatingWebhookConfiguration {
		return &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-" + rev, Labels: map[string]string{canary.LabelRev: rev}}}
	}
	client := fake.NewClientset(injector("1-25"), injector("1-26"), injector("stable"),
		istiod("istiod-1-25-a", "1-25", "docker.io/istio/pilot:1.25.2-distroless"),
		istiod("istiod-1-26-a", "1-26", "registry.local:5000/istio/pilot:latest"),
		istiod("istiod-stable-a", "stable", "docker.io/istio/pilot:1.26.1"))
	c := NewCaches(client, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); c.Shutdown() }()
	c.Start(ctx)
	require.True(t, c.WaitForSync())
	m, err := c.mesh("istio-system")
	require.NoError(t, err)
	assert.Equal(t, canary.Revision{Name: "1-25", Istiods: 1, ReadyIstiods: 1, ProxyVersion: "1.25.2", VersionFrom: "istiod image docker.io/istio/pilot:1.25.2-distroless"}, m.Revisions["1-25"])
	assert.Equal(t, canary.Revision{Name: "1-26", Istiods: 1, ReadyIstiods: 1, ProxyVersion: "1.26", VersionFrom: "revision name 1-26"}, m.Revisions["1-26"], "a tag that is no version falls back to the name")
	assert.Equal(t, canary.Revision{Name: "stable", Istiods: 1, ReadyIstiods: 1, ProxyVersion: "1.26.1", VersionFrom: "istiod image docker.io/istio/pilot:1.26.1"}, m.Revisions["stable"])
}

func TestThePoliciesThatChangeMeaningInAmbientAreGatheredWithWhatZtunnelCannotEnforce(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{peerAuthenticationsResource: true, authorizationPoliciesResource: true}}
	c, _ := newCompatCaches(t, disc, time.Hour)
	got := gatherShop(t, c)
	assert.Equal(t, []canary.PeerAuthentication{
		{Namespace: "istio-system", Name: "mesh", Mode: "STRICT", MeshWide: true},
		{Namespace: "shop", Name: "legacy", MatchLabels: map[string]string{"app": "legacy"}, Mode: "PERMISSIVE", DisabledPorts: []string{"9000"}},
	}, got.PeerAuthentications)
	assert.Equal(t, []canary.AuthorizationPolicy{
		{Namespace: "shop", Name: "at-waypoint", TargetRefs: true, L7: []string{"to.operation.methods"},
			Action: "ALLOW", Rules: `[{"to":[{"operation":{"methods":["GET"]}}]}]`, Refs: []string{"Gateway/waypoint"}, Replaces: []string{"paths", "older"},
			Copy: `{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"annotations":{"meshwave.io/replaces":"paths, older"},"name":"at-waypoint","namespace":"shop"},` +
				`"spec":{"rules":[{"to":[{"operation":{"methods":["GET"]}}]}],"targetRefs":[{"group":"gateway.networking.k8s.io","kind":"Gateway","name":"waypoint"}]}}`},
		{Namespace: "shop", Name: "paths", MatchLabels: map[string]string{"app": "cart"}, L7: []string{"to.operation.paths"},
			Action: "ALLOW", Rules: `[{"to":[{"operation":{"paths":["/admin"],"ports":["8080"]}}]}]`,
			Copy: `{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"name":"paths","namespace":"shop"},` +
				`"spec":{"rules":[{"to":[{"operation":{"paths":["/admin"],"ports":["8080"]}}]}],"selector":{"matchLabels":{"app":"cart"}}}}`},
	}, got.AuthorizationPolicies, "the copy is the policy as a person wrote it, without the l7 list the cache adds")
	assert.Empty(t, got.Unread)
}

func TestPoliciesWhoseKindDiscoveryCannotAnswerForAreUnread(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{}, broken: map[string]error{"security.istio.io/v1": errors.New("the server is currently unable to handle the request")}}
	c, _ := newCompatCaches(t, disc, time.Hour)
	got := gatherShop(t, c)
	assert.Equal(t, []string{
		"peerauthentications: the server is currently unable to handle the request",
		"authorizationpolicies: the server is currently unable to handle the request",
	}, got.Unread)
}

func TestTheNamespacesGatewaysAreGatheredForItsWaypoint(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{gatewaysResource: true}}
	c, _ := newCompatCaches(t, disc, time.Hour)
	got := gatherShop(t, c)
	assert.True(t, got.GatewayAPI)
	assert.Equal(t, []canary.Gateway{{Namespace: "shop", Name: "waypoint", Class: "istio-waypoint", Revision: "1-26",
		ProgrammedWhy: "Pending: Deployment waypoint is not ready"}}, got.Gateways)
	assert.Empty(t, got.Unread)

	without, _ := newCompatCaches(t, &servedKinds{served: map[schema.GroupVersionResource]bool{}}, time.Hour)
	got = gatherShop(t, without)
	assert.False(t, got.GatewayAPI, "a cluster without the Gateway API's CRDs serves no gateways")
	assert.Empty(t, got.Gateways)
}

// A waypoint Gateway that serves no traffic a namespace's
// istio.io/use-waypoint can bind (istio.io/waypoint-for: workload or
// none: a pod that only inherits the namespace's label is not bound, and
// a Service needs service or all) carries nothing of the move to ambient:
// the move blocks on it as on any waypoint that cannot carry it.
func TestAWaypointForNoServiceTrafficBlocksTheMoveToAmbient(t *testing.T) {
	for _, waypointFor := range []string{"workload", "none"} {
		t.Run(waypointFor, func(t *testing.T) {
			gw := withStatus(withLabels(unstructuredObj(gatewaysResource, "Gateway", "shop", "waypoint", map[string]any{
				"gatewayClassName": "istio-waypoint",
				"listeners":        []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}},
			}), map[string]string{canary.LabelRev: "1-26", "istio.io/waypoint-for": waypointFor}), map[string]any{"conditions": []any{
				map[string]any{"type": "Programmed", "status": "True", "reason": "Programmed", "message": "ok"},
			}})
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
				envoyFiltersResource: "EnvoyFilterList", telemetriesResource: "TelemetryList", sailIstiosResource: "IstioList",
				peerAuthenticationsResource: "PeerAuthenticationList", authorizationPoliciesResource: "AuthorizationPolicyList",
				gatewaysResource: "GatewayList",
			})
			require.NoError(t, dyn.Tracker().Create(gatewaysResource, gw, "shop"))
			c := NewCaches(fake.NewClientset(), 0, nil)
			c.WatchCompat(dyn, &servedKinds{served: map[schema.GroupVersionResource]bool{gatewaysResource: true}}, 0)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(func() { cancel(); c.Shutdown() })
			c.Start(ctx)
			require.True(t, c.WaitForSync())
			compat := gatherShop(t, c)
			require.Len(t, compat.Gateways, 1)

			now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			d := canary.Decide(canary.Input{Snapshot: waypointShop(compat), Now: now, Config: canary.Config{DelayBetweenWaves: time.Minute}})
			require.NotNil(t, d.Status)
			assert.Equal(t, canary.PhaseBlocked, d.Status.Phase, d.Status.Reason)
			assert.Empty(t, d.UseWaypoint, "the namespace is not put behind a waypoint that binds none of its traffic")
		})
	}
}

// waypointShop is namespace shop asking to move its Deployment cart, on
// 1-26's sidecars, into ambient behind the waypoint "waypoint", whose one
// pod is Ready.
func waypointShop(compat canary.Compat) canary.Snapshot {
	pod := func(name string, labels, annotations map[string]string, rev string) canary.Pod {
		return canary.Pod{Name: name, Labels: labels, Annotations: annotations, Running: true, Ready: true, Current: true, Revision: rev}
	}
	status := canary.RolloutStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	cart := canary.Workload{Namespace: "shop", Name: "cart", ResourceVersion: "100", Replicas: 1, Generation: 1, Status: status,
		Labels: map[string]string{"app": "cart"}, Annotations: map[string]string{},
		TemplateLabels: map[string]string{"app": "cart"}, TemplateAnnotations: map[string]string{},
		Pods: []canary.Pod{pod("cart-1", map[string]string{"app": "cart"}, map[string]string{canary.AnnotationSidecar: `{"revision":"1-26"}`}, "1-26")}}
	wpLabels := map[string]string{canary.LabelGatewayName: "waypoint", canary.LabelDataplaneMode: "none", canary.LabelInject: "false"}
	wp := canary.Workload{Namespace: "shop", Name: "waypoint", ResourceVersion: "100", Replicas: 1, Generation: 1, Status: status,
		Labels: map[string]string{canary.LabelGatewayName: "waypoint"}, Annotations: map[string]string{},
		TemplateLabels: wpLabels, TemplateAnnotations: map[string]string{},
		Pods: []canary.Pod{pod("waypoint-1", wpLabels, map[string]string{}, "")}}
	compat.GatewayAPI = true
	return canary.Snapshot{
		Namespace: canary.Namespace{Name: "shop", Labels: map[string]string{canary.LabelRev: "1-26"}, Annotations: map[string]string{
			canary.AnnotationTargetRevision: "1-26", canary.AnnotationTargetMode: "ambient", canary.AnnotationWaypoint: "waypoint"}},
		Workloads: []canary.Workload{cart, wp},
		Mesh: canary.Mesh{Revisions: map[string]canary.Revision{
			"1-25": {Name: "1-25", Istiods: 1, ReadyIstiods: 1}, "1-26": {Name: "1-26", Istiods: 1, ReadyIstiods: 1}}},
		Compat: compat,
	}
}

func TestTheNamespacesSubsetRoutingIsGatheredByName(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{virtualServicesResource: true, destinationRulesResource: true}}
	c, _ := newCompatCaches(t, disc, time.Hour)
	got := gatherShop(t, c)
	assert.Equal(t, []canary.SubsetRoute{
		{Kind: "DestinationRule", Namespace: "shop", Name: "reviews", Subsets: []string{"v1", "v2"}},
		{Kind: "VirtualService", Namespace: "shop", Name: "reviews", Subsets: []string{"v2", "v1"}},
	}, got.SubsetRoutes, "a DestinationRule without subsets, and another namespace's, are left out")
}
