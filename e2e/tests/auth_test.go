package tests

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// syncIDs asks one revision's istiods with meshwave's gRPC client and the
// given token, and returns the proxy ids they list, sorted.
func syncIDs(t *testing.T, f *fixture.Fixture, rev, tokenPath string) []string {
	t.Helper()
	client := analysis.GRPCSyncz{Port: f.World.Mesh.Ports().GRPCTLS, TokenFile: tokenPath, RootNamespace: f.World.Mesh.RootNamespace(), Timeout: 10 * time.Second}
	var ids []string
	for _, ip := range f.World.Mesh.Istiod(rev).ReplicaAddrs() {
		proxies, err := client.Syncz(f.Ctx, analysis.Istiod{IP: ip, Revision: rev}, "")
		require.NoError(t, err)
		for _, p := range proxies {
			ids = append(ids, p.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// TestAnAgentOutsideTheRootNamespaceSeesWhatIstiodAllows runs meshwave as
// the service account ops/meshwave. istiod 1-27 lists ops in
// DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES (set through Istio's chart, so its
// Deployment carries it); 1-25 and 1-26 do not, and show ops only its own
// namespace's proxies, which is none. The namespace moved to 1-27
// completes. The one moved to 1-26 is never passed: the gate says what it
// cannot see and why, and the namespace pauses. meshwave's chart refuses
// the release in ops while an istiod Deployment does not list it. Once
// istiod 1-25 and 1-26 list ops too (their Deployments changed, their pods
// replaced), the chart installs and the paused namespace completes.
func TestAnAgentOutsideTheRootNamespaceSeesWhatIstiodAllows(t *testing.T) {
	allowOps := map[string]string{"DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES": "ops"}
	revs := append(world.DefaultRevisions(), mesh.Revision{Name: "1-27", Env: allowOps})
	f := fixture.New(t, world.Options{NoPrometheus: true, Revisions: revs})
	f.Given().Namespace("orders", map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment("orders", "app").
		Namespace("payments", map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment("payments", "app", fixture.Replicas(1)).
		RolledOut("orders").RolledOut("payments")
	opsToken := tokenFile(f, f.IstioCATokenIn("ops", "meshwave"))
	rootToken := tokenFile(f, f.IstioCAToken("meshwave"))

	// What istiod itself shows each identity, before meshwave does
	// anything: the root namespace every proxy, ops none.
	all := append(f.ProxyIDs("orders", "app"), f.ProxyIDs("payments", "app")...)
	sort.Strings(all)
	f.Eventually("istiod 1-25 to show the root namespace every proxy", func() (bool, string) {
		ids := syncIDs(t, f, "1-25", rootToken)
		return strings.Join(ids, ",") == strings.Join(all, ","), strings.Join(ids, ",")
	})
	assert.Empty(t, syncIDs(t, f, "1-25", opsToken), "istiod 1-25 shows ops nothing of orders or payments")

	cfg := testConfig(f)
	cfg.Gates.Sync.TokenFile = opsToken
	cfg.Gates.Sync.Timeout = agent.Duration(4 * time.Second)
	cfg.Concurrency = 2
	optIn(f, "orders", "1-27", 10)
	optIn(f, "payments", "1-26", 20)
	startAgent(t, f, cfg, newAPICounter(), "agent-ops")

	st := waitForPhase(f, "orders", canary.PhaseCompleted, time.Minute)
	sync, ok := verdictOf(st, analysis.GateSync)
	require.True(t, ok)
	assert.Equal(t, "2 of 2 proxies SYNCED with istiod 1-27", sync.Reason)

	st = waitForPhase(f, "payments", canary.PhasePaused, time.Minute)
	pods, _, err := f.DeploymentPods("payments", "app")
	require.NoError(t, err)
	require.Len(t, pods, 1)
	assert.Equal(t, "wave 1 paused: xds-sync inconclusive 3 times: 0 of 1 proxies SYNCED with istiod 1-26; "+pods[0].Name+".payments is not connected to istiod 1-26; "+
		"meshwave asks as namespace ops and istiod listed no proxy outside it: outside the root namespace istio-system, "+
		"istiod shows a caller only its own namespace's proxies unless DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists it, so those of payments may be hidden", st.Reason)
	assert.Equal(t, []string{pods[0].Name + ".payments"}, syncIDs(t, f, "1-26", rootToken), "the proxy is there, SYNCED, for whoever may see it")

	// meshwave's chart, reading the cluster, names the istiod that would
	// hide the proxies.
	chart := filepath.Join(repoRoot(t), "charts", "meshwave")
	render := func() (string, error) {
		_, stderr, err := runHelm(t, "template", "meshwave", chart, "--namespace", "ops", "--dry-run=server",
			"--kubeconfig", f.World.Cluster.Kubeconfig, "--set", "istiod.debugEndpointAuthAllowedNamespaces={ops}")
		return stderr, err
	}
	stderr, err := render()
	require.Error(t, err)
	assert.Contains(t, stderr, `istiod Deployment istio-system/istiod-1-25 does not list "ops" in DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES (it is ""), `+
		`so it would show meshwave only the proxies of "ops": set it there (with Istio's chart: --set pilot.env.DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES=ops), `+
		`or install meshwave with --namespace istio-system`)

	// The mesh's operator allows ops on 1-25 and 1-26, as Istio's chart
	// would with pilot.env: the istiod pods are replaced.
	for _, rev := range []string{"1-25", "1-26"} {
		before := f.IstiodPods(rev)
		patch := `{"spec":{"template":{"spec":{"containers":[{"name":"discovery","env":[{"name":"DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES","value":"ops"}]}]}}}}`
		_, err := f.Client.AppsV1().Deployments("istio-system").Patch(f.Ctx, "istiod-"+rev, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		f.WaitForRolledOut("istio-system", "istiod-"+rev)
		f.WaitForIstiodReady(rev, true)
		require.NotEqual(t, before, f.IstiodPods(rev))
	}
	stderr, err = render()
	require.NoError(t, err, stderr)
	f.Eventually("istiod 1-26 to show ops the payments proxy", func() (bool, string) {
		ids := syncIDs(t, f, "1-26", opsToken)
		return strings.Join(ids, ",") == pods[0].Name+".payments", strings.Join(ids, ",")
	})
	f.When().AnnotateNamespace("payments", canary.AnnotationPaused, nil)
	st = waitForPhase(f, "payments", canary.PhaseCompleted, time.Minute)
	sync, ok = verdictOf(st, analysis.GateSync)
	require.True(t, ok)
	assert.Equal(t, "1 of 1 proxies SYNCED with istiod 1-26", sync.Reason)
}

// TestTheHTTPModeIsRefusedOutsideTheRootNamespace runs on the simulated
// istiod, the one case here that the real istiod cannot produce: istiod
// answers every caller from 127.0.0.0/8 on its HTTP port without asking who
// it is (isRequestFromLocalhost), and every caller in the local world is on
// loopback. The simulator answers as istiod's allowAuthenticatedOrLocalhost
// answers a remote caller: 401 without an istio-ca token, 403 to a namespace
// that is neither the root nor listed in DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES.
// The gate never passes such a wave; it says why istiod refused.
func TestTheHTTPModeIsRefusedOutsideTheRootNamespace(t *testing.T) {
	revs := append(world.DefaultRevisions(), mesh.Revision{Name: "1-27", Env: map[string]string{"DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES": "ops"}})
	f := fixture.New(t, world.Options{NoPrometheus: true, SimulatedIstiod: true, Revisions: revs})
	ip := func(rev string) string { return f.World.Mesh.Istiod(rev).ReplicaAddrs()[0] }
	for _, tc := range []struct {
		ns, target, token, want string
		phase                   canary.Phase
		keepToken               bool
	}{
		{"forbidden", "1-26", f.IstioCATokenIn("ops", "meshwave"), "403 Forbidden: istiod answers /debug/syncz only to its root namespace and the namespaces DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists", canary.PhasePaused, false},
		{"unauthenticated", "1-26", f.Token("meshwave"), "401 Unauthorized: istiod did not accept the token (it wants a service-account token with audience istio-ca)", canary.PhasePaused, false},
		{"cleartext-refused", "1-27", f.IstioCATokenIn("ops", "meshwave"), "401 Unauthorized: istiod wants a token, which meshwave sends over plain HTTP only with gates.sync.sendTokenInCleartext: true (or use mode grpc over TLS)", canary.PhasePaused, true},
		{"allowed", "1-27", f.IstioCATokenIn("ops", "meshwave"), "", canary.PhaseCompleted, false},
	} {
		t.Run(tc.ns, func(t *testing.T) {
			f.Given().Namespace(tc.ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(tc.ns, "app", fixture.Replicas(1)).RolledOut(tc.ns)
			cfg := testConfig(f)
			cfg.Gates.Sync.Mode, cfg.Gates.Sync.Port, cfg.Gates.Sync.TokenFile = "http", f.World.Mesh.Ports().HTTP, tokenFile(f, tc.token)
			// Over plain HTTP the token goes only when the configuration
			// says so; without it, a remote istiod refuses.
			cfg.Gates.Sync.SendTokenInCleartext = !tc.keepToken
			cfg.Concurrency = 10
			optIn(f, tc.ns, tc.target, 10)
			a := startAgent(t, f, cfg, newAPICounter(), "agent-"+tc.ns)
			st := waitForPhase(f, tc.ns, tc.phase, time.Minute)
			a.Kill()
			if tc.phase == canary.PhaseCompleted {
				sync, ok := verdictOf(st, analysis.GateSync)
				require.True(t, ok)
				assert.Equal(t, "1 of 1 proxies SYNCED with istiod 1-27", sync.Reason)
				return
			}
			assert.Equal(t, "wave 1 paused: xds-sync inconclusive 3 times: 0 of 1 proxies SYNCED with istiod "+tc.target+"; could not ask "+f.IstiodPods(tc.target)[0]+
				" ("+ip(tc.target)+"): GET http://"+ip(tc.target)+":15014/debug/syncz?namespace="+tc.ns+": "+tc.want, st.Reason)
		})
	}
}
