package tests

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// withDynamic gives the agent the dynamic client the compatibility
// prechecks read through, as `meshwave run` does.
func withDynamic(f *fixture.Fixture) func(*agent.Options) {
	return func(o *agent.Options) {
		dyn, err := dynamic.NewForConfig(f.World.Cluster.Config)
		require.NoError(f.T, err)
		o.Dynamic = dyn
	}
}

// TestCompatibilityPrechecksWarnAndStrictBlocks runs on Istio's own CRDs,
// which the world installs from Istio's base chart, with 1-25's images
// tagged 1.25.2 and 1-26's 1.26.1, so their proxies report those versions
// as ISTIO_VERSION. An EnvoyFilter in the root namespace whose proxyVersion
// matches 1.25 only, and a Telemetry whose selector no template carries, are
// warned about before the first wave, and the migration goes on; with
// prechecks.strict the next namespace is blocked by the same EnvoyFilter.
func TestCompatibilityPrechecksWarnAndStrictBlocks(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true, Revisions: []mesh.Revision{{Name: "1-25", ImageTag: "1.25.2"}, {Name: "1-26", ImageTag: "1.26.1"}}})
	rev125 := map[string]string{mesh.LabelRev: "1-25"}
	f.Given().Namespace("shop", rev125, nil).Namespace("media", rev125, nil).
		Deployment("shop", "cart").Deployment("shop", "web").Deployment("media", "player").
		RolledOut("shop").RolledOut("media")

	dyn, err := dynamic.NewForConfig(f.World.Cluster.Config)
	require.NoError(t, err)
	apply := func(gvr schema.GroupVersionResource, kind, ns, name string, spec map[string]any) {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "spec": spec}}
		u.SetNamespace(ns)
		u.SetName(name)
		_, err := dyn.Resource(gvr).Namespace(ns).Create(f.Ctx, u, metav1.CreateOptions{})
		require.NoError(t, err, "%s %s/%s", kind, ns, name)
	}
	apply(schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}, "EnvoyFilter", f.World.Mesh.RootNamespace(), "lua-125", map[string]any{
		"configPatches": []any{map[string]any{
			"applyTo": "HTTP_FILTER",
			"match": map[string]any{
				"context": "SIDECAR_INBOUND",
				"proxy":   map[string]any{"proxyVersion": `^1\.25`},
				"listener": map[string]any{"filterChain": map[string]any{"filter": map[string]any{
					"name": "envoy.filters.network.http_connection_manager"}}},
			},
			"patch": map[string]any{"operation": "INSERT_FIRST", "value": map[string]any{
				"name": "envoy.filters.http.lua",
				"typed_config": map[string]any{
					"@type":      "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
					"inlineCode": "function envoy_on_request(handle) end",
				},
			}},
		}},
	})
	apply(schema.GroupVersionResource{Group: "telemetry.istio.io", Version: "v1", Resource: "telemetries"}, "Telemetry", "shop", "payments", map[string]any{
		"selector":      map[string]any{"matchLabels": map[string]any{"team": "payments"}},
		"accessLogging": []any{map[string]any{"providers": []any{map[string]any{"name": "envoy"}}}},
	})

	lua := `EnvoyFilter istio-system/lua-125: proxyVersion "^1\\.25" matches 1-25's proxies (1.25.2) but not 1-26's (1.26.1): its patch stops applying to the moved workloads; widen the regex or add a patch for 1.26.1`
	telemetry := "Telemetry shop/payments: selector.matchLabels team=payments names labels no moved workload's template carries (team=payments absent): it applies to none of them; check the selector"

	optIn(f, "shop", "1-26", 10)
	a := startAgentWithOptions(t, f, testConfig(f), newAPICounter(), "agent-1", withDynamic(f))
	st := waitForPhase(f, "shop", canary.PhaseCompleted, 2*time.Minute)
	assert.Equal(t, []string{lua, telemetry}, st.Warnings)
	f.EventuallyWithin("the warnings as Events on namespace shop", 10*time.Second, func() (bool, string) {
		events := eventsFor(f, "Namespace", "shop", "shop")
		return slices.Contains(events, "PrecheckWarning: "+lua) && slices.Contains(events, "PrecheckWarning: "+telemetry), strings.Join(events, "\n")
	})
	a.Kill()

	// Strict: the root namespace's EnvoyFilter blocks media before its
	// first wave; media has no Telemetry.
	cfg := testConfig(f)
	cfg.Prechecks.Strict = true
	optIn(f, "media", "1-26", 10)
	startAgentWithOptions(t, f, cfg, newAPICounter(), "agent-2", withDynamic(f))
	st = waitForPhase(f, "media", canary.PhaseBlocked, time.Minute)
	assert.Equal(t, canary.BlockedPrecheck, st.BlockedKind)
	assert.Equal(t, "precheck failed: prechecks.strict: "+lua, st.Reason)
	assert.Equal(t, []string{lua}, st.Warnings)
	rev, ok := func() (string, bool) {
		n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, "media", metav1.GetOptions{})
		require.NoError(t, err)
		v, ok := n.Labels[mesh.LabelRev]
		return v, ok
	}()
	assert.True(t, ok)
	assert.Equal(t, "1-25", rev, "a blocked namespace is not switched")
}

// TestWithoutIstiosCRDsTheAgentMigratesWithThePrechecksOn runs on the
// simulated istiod, whose world installs none of Istio's CRDs (nor Sail's):
// discovery lists none of the kinds the prechecks read, no informer is
// started for them, and the migration completes without a warning.
func TestWithoutIstiosCRDsTheAgentMigratesWithThePrechecksOn(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true, SimulatedIstiod: true})
	_, err := f.Client.Discovery().ServerResourcesForGroupVersion("networking.istio.io/v1alpha3")
	require.Error(t, err, "the world serves no Istio CRD")
	f.Given().Namespace("shop", map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment("shop", "cart").Deployment("shop", "web").RolledOut("shop")
	optIn(f, "shop", "1-26", 10)
	counter := newAPICounter()
	startAgentWithOptions(t, f, testConfig(f), counter, "agent-1", withDynamic(f))
	st := waitForPhase(f, "shop", canary.PhaseCompleted, 2*time.Minute)
	assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", st.Reason)
	assert.Empty(t, st.Warnings)
}
