package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// replacementShop gathers namespace shop's compat from a waypoint Gateway
// and the given AuthorizationPolicies, as the agent's caches read them.
func replacementShop(t *testing.T, policies ...*unstructured.Unstructured) canary.Compat {
	t.Helper()
	return replacementIn(t, "shop", policies...)
}

// replacementIn is replacementShop for namespace ns.
func replacementIn(t *testing.T, ns string, policies ...*unstructured.Unstructured) canary.Compat {
	t.Helper()
	gw := withStatus(withLabels(unstructuredObj(gatewaysResource, "Gateway", ns, "waypoint", map[string]any{
		"gatewayClassName": "istio-waypoint",
		"listeners":        []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}},
	}), map[string]string{canary.LabelRev: "1-26"}), map[string]any{"conditions": []any{
		map[string]any{"type": "Programmed", "status": "True", "reason": "Programmed", "message": "ok"},
	}})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		envoyFiltersResource: "EnvoyFilterList", telemetriesResource: "TelemetryList", sailIstiosResource: "IstioList",
		peerAuthenticationsResource: "PeerAuthenticationList", authorizationPoliciesResource: "AuthorizationPolicyList",
		gatewaysResource: "GatewayList", virtualServicesResource: "VirtualServiceList", destinationRulesResource: "DestinationRuleList",
	})
	require.NoError(t, dyn.Tracker().Create(gatewaysResource, gw, ns))
	for _, p := range policies {
		require.NoError(t, dyn.Tracker().Create(authorizationPoliciesResource, p, p.GetNamespace()))
	}
	c := NewCaches(fake.NewClientset(), 0, nil)
	c.WatchCompat(dyn, &servedKinds{served: map[schema.GroupVersionResource]bool{gatewaysResource: true, authorizationPoliciesResource: true, peerAuthenticationsResource: true}}, 0)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Shutdown() })
	c.Start(ctx)
	require.True(t, c.WaitForSync())
	snap, err := c.Gather(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, "istio-system")
	require.NoError(t, err)
	return snap.Compat
}

var cartAdminRules = []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"paths": []any{"/admin"}}}}}}

// A targetRefs policy that enforces nothing (istio.io/dry-run: "true": the
// waypoint only logs what it would decide), or a CUSTOM one that hands the
// request to another ext-authz provider, replaces nothing: the selector
// policy that enforces the rules keeps blocking the move.
func TestAReplacementThatDoesNotEnforceTheSameDecisionsReplacesNothing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		selector    *unstructured.Unstructured
		replacement *unstructured.Unstructured
	}{
		{"a dry-run replacement",
			unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "cart-admin", map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": "cart"}}, "rules": cartAdminRules}),
			func() *unstructured.Unstructured {
				u := unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "cart-admin-waypoint", map[string]any{
					"targetRefs": []any{map[string]any{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "waypoint"}},
					"rules":      cartAdminRules})
				u.SetAnnotations(map[string]string{"istio.io/dry-run": "true"})
				return u
			}()},
		{"a CUSTOM replacement of another provider",
			unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "cart-admin", map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": "cart"}}, "action": "CUSTOM",
				"provider": map[string]any{"name": "strict-ext-authz"}, "rules": cartAdminRules}),
			unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "cart-admin-waypoint", map[string]any{
				"targetRefs": []any{map[string]any{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "waypoint"}},
				"action":     "CUSTOM", "provider": map[string]any{"name": "allow-all-ext-authz"}, "rules": cartAdminRules})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compat := replacementShop(t, tc.selector, tc.replacement)
			require.Len(t, compat.AuthorizationPolicies, 2)
			snap := waypointShop(compat)
			snap.Namespace.Annotations[canary.AnnotationDeleteReplacedPolicies] = "true"
			now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			d := canary.Decide(canary.Input{Snapshot: snap, Now: now, Config: canary.Config{DelayBetweenWaves: time.Minute}})
			require.NotNil(t, d.Status)
			assert.Nil(t, d.ReplacedPolicies, "cart-admin is taken as replaced by %s, which does not enforce its decisions", tc.replacement.GetName())
			assert.Equal(t, canary.PhaseBlocked, d.Status.Phase, "cart moves into ambient, its policy to be deleted: %s", d.Status.Reason)
		})
	}
}

// A decision that only deletes (or restores) replaced policies goes
// through the namespace first, fenced with the resourceVersion it was
// decided from, as restarts and evictions do: one made from a namespace
// no longer current (a cache that lags, a deposed leader) deletes nothing.
func TestAPolicyDeleteDecidedFromABehindNamespaceIsFenced(t *testing.T) {
	policy := unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "shop", "cart-admin", map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "cart"}}, "rules": cartAdminRules})
	policy.SetUID("uid-cart-admin")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		authorizationPoliciesResource: "AuthorizationPolicyList"}, policy)
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), func(c *Controller) { c.dynamic = dyn })
	apiserverResourceVersions(client)
	ns, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	stale := ns.DeepCopy()
	_, err = client.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"payments"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	dyn.ClearActions()

	err = c.act(ctx, stale, nil, canary.Decision{DeletePolicies: []canary.PolicyRef{{Namespace: "shop", Name: "cart-admin", UID: "uid-cart-admin", Why: "replaced"}}})
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("AuthorizationPolicy cart-admin was deleted by a decision made from namespace resourceVersion %s, no longer the current one", stale.ResourceVersion)
		}
	}
	assert.True(t, apierrors.IsConflict(errors.Unwrap(err)), "the stale decision meets a conflict: %v", err)
}

// A port-forward that hangs: the apiserver (or a proxy in front of it)
// accepts the connection and never answers the upgrade. The read gives up
// at its timeout; client-go's dialers take no context, so the dial itself
// stays until the server lets go. The gate asks every interval: each
// round must not add one more connection to the apiserver.
func TestAPortForwardThatHangsHoldsOneConnectionAZtunnelAtMost(t *testing.T) {
	var mu sync.Mutex
	open := 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		open++
		mu.Unlock()
		defer func() {
			mu.Lock()
			open--
			mu.Unlock()
		}()
		select { // never answers the upgrade
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	stillOpen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return open
	}

	d := portForwardDumps{config: &rest.Config{Host: srv.URL}, timeout: 200 * time.Millisecond, dialing: &sync.Map{}}
	z := analysis.ZtunnelPod{Pod: "ztunnel-abc", Namespace: "istio-system", Ready: true}
	start := time.Now()
	_, err := d.Workloads(context.Background(), z)
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second, "the read is bounded by its timeout")
	require.Eventually(t, func() bool { return stillOpen() == 1 }, 3*time.Second, 20*time.Millisecond)
	for range 3 {
		_, err = d.Workloads(context.Background(), z)
		assert.EqualError(t, err, "port-forward to istio-system/ztunnel-abc: the one a read before opened has not been answered yet")
	}
	assert.Equal(t, 1, stillOpen(), "one hanging dial a ztunnel, however many reads")

	// Once the apiserver lets go, the next read dials again.
	close(release)
	require.Eventually(t, func() bool {
		_, err := d.Workloads(context.Background(), z)
		return err != nil && !strings.Contains(err.Error(), "has not been answered yet")
	}, 5*time.Second, 50*time.Millisecond)
}

// A selector policy of the root namespace applies in every namespace to
// what it selects: when the root namespace itself moves, its policy is
// never deleted for its own workloads, since every other namespace's
// sidecars still need it.
func TestAMeshWidePolicyIsNeverDeletedWhenTheRootNamespaceMoves(t *testing.T) {
	root := unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "istio-system", "cart-admin", map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "cart"}}, "rules": cartAdminRules})
	replacement := unstructuredObj(authorizationPoliciesResource, "AuthorizationPolicy", "istio-system", "cart-admin-waypoint", map[string]any{
		"targetRefs": []any{map[string]any{"kind": "Gateway", "group": "gateway.networking.k8s.io", "name": "waypoint"}},
		"rules":      cartAdminRules})
	compat := replacementIn(t, "istio-system", root, replacement)
	require.Len(t, compat.AuthorizationPolicies, 2)
	snap := waypointShop(compat)
	snap.Namespace.Name = "istio-system"
	for i := range snap.Workloads {
		snap.Workloads[i].Namespace = "istio-system"
	}
	snap.Namespace.Annotations[canary.AnnotationDeleteReplacedPolicies] = "true"
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	in := canary.Input{Snapshot: snap, Now: now, Config: canary.Config{DelayBetweenWaves: time.Minute}}
	d := canary.Decide(in)
	require.NotNil(t, d.Status)
	assert.Nil(t, d.ReplacedPolicies, "the root namespace's cart-admin, which holds every namespace's app=cart sidecars, is copied to be deleted (phase %s: %s)", d.Status.Phase, d.Status.Reason)
}
