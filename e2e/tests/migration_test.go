package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

func waveAnnotation(v string) fixture.DeploymentOption {
	return fixture.Annotations(map[string]string{canary.AnnotationWave: v})
}

// TestTwoNamespacesMigrateInPriorityOrder moves shop (priority 10) and then
// media (priority 20) from 1-25 to 1-26 in canary waves, and checks the
// order from the move records and the Events, that the gateway is never
// touched, and that every pod ends on 1-26.
func TestTwoNamespacesMigrateInPriorityOrder(t *testing.T) {
	f := fixture.New(t, world.Options{})
	rev125 := map[string]string{mesh.LabelRev: "1-25"}
	f.Given().
		Namespace("shop", rev125, nil).
		Namespace("media", rev125, nil).
		Deployment("shop", "cart", waveAnnotation("0")).
		Deployment("shop", "catalog", waveAnnotation("1")).
		Deployment("shop", "checkout", waveAnnotation("1")).
		Deployment("shop", "orders", waveAnnotation("2")).
		Deployment("shop", "web").
		Deployment("shop", "ingress", fixture.Gateway()).
		Deployment("media", "encoder").
		Deployment("media", "player").
		RolledOut("shop").RolledOut("media")
	gatewayPods, _, err := f.DeploymentPods("shop", "ingress")
	require.NoError(t, err)

	optIn(f, "media", "1-26", 20)
	optIn(f, "shop", "1-26", 10)
	cfg := testConfig(f)
	cfg.CanarySize, cfg.BatchSize = 1, 2

	// The plan, before anything moves.
	plan := runCLI(t, f, "plan")
	assert.Equal(t, strings.TrimLeft(`
NAMESPACE  PRIORITY  TARGET  WAVE  WORKLOAD  PATCH
shop       10        1-26    1     cart      restartedAt
shop       10        1-26    2     catalog   restartedAt
shop       10        1-26    2     checkout  restartedAt
shop       10        1-26    3     orders    restartedAt
shop       10        1-26    4     web       restartedAt
media      20        1-26    1     encoder   restartedAt
media      20        1-26    2     player    restartedAt

LEFT OUT  WORKLOAD  REASON
shop      ingress   gateway (operator.istio.io/component=IngressGateways)
`, "\n"), plan)

	counter := newAPICounter()
	startAgent(t, f, cfg, counter, "agent-1")
	shop := waitForPhase(f, "shop", canary.PhaseCompleted, 3*time.Minute)
	media := waitForPhase(f, "media", canary.PhaseCompleted, 3*time.Minute)
	counter.report(t)

	assert.Equal(t, "moved 5 workloads to 1-26 in 4 waves", shop.Reason)
	assert.Equal(t, canary.Counts{Total: 6, Moved: 5, Skipped: 1}, shop.Counts)
	assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", media.Reason)
	assert.False(t, media.StartedAt.Before(*shop.CompletedAt), "media starts only after shop completed (concurrency 1)")

	// Waves, in order, from the records the agent wrote with each move.
	waves := map[string]int{"cart": 1, "catalog": 2, "checkout": 2, "orders": 3, "web": 4}
	at := map[string]time.Time{}
	for name, wave := range waves {
		r, ok := moveRecord(f, "shop", name)
		require.True(t, ok, "shop/%s has a move record", name)
		assert.Equal(t, wave, r.Wave, "wave of shop/%s", name)
		assert.Equal(t, "1-26", r.Revision)
		assert.Equal(t, "1-25", r.From)
		at[name] = r.At
	}
	assert.True(t, at["cart"].Before(at["catalog"]))
	assert.Equal(t, at["catalog"], at["checkout"], "one wave restarts together")
	assert.True(t, at["checkout"].Before(at["orders"]))
	assert.True(t, at["orders"].Before(at["web"]))
	enc, _ := moveRecord(f, "media", "encoder")
	player, _ := moveRecord(f, "media", "player")
	assert.Equal(t, 1, enc.Wave)
	assert.Equal(t, 2, player.Wave)
	assert.True(t, at["web"].Before(enc.At), "media's first move comes after shop's last")
	assert.True(t, enc.At.Before(player.At))

	var started []string
	for _, e := range eventsFor(f, "Namespace", "", "shop") {
		if strings.HasPrefix(e, "WaveStarted") {
			started = append(started, e)
		}
	}
	assert.Equal(t, []string{
		"WaveStarted: wave 1/4 (canary) started: cart",
		"WaveStarted: wave 2/4 started: catalog, checkout",
		"WaveStarted: wave 3/4 started: orders",
		"WaveStarted: wave 4/4 started: web",
	}, started)
	assert.Contains(t, eventsFor(f, "Namespace", "", "shop"), "Completed: moved 5 workloads to 1-26 in 4 waves")
	assert.Contains(t, eventsFor(f, "Deployment", "shop", "cart"), "Restarted: moving to 1-26 in wave 1")

	// The gateway is never restarted and keeps its 1-25 pods.
	_, hasRecord := moveRecord(f, "shop", "ingress")
	assert.False(t, hasRecord)
	gw, err := f.Client.AppsV1().Deployments("shop").Get(f.Ctx, "ingress", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, gw.Spec.Template.Annotations, canary.AnnotationRestartedAt)
	nowPods, _, err := f.DeploymentPods("shop", "ingress")
	require.NoError(t, err)
	assert.Equal(t, podNames(gatewayPods), podNames(nowPods))
	assert.Zero(t, counter.get("PATCH deployments shop/ingress"))
	assert.Contains(t, eventsFor(f, "Deployment", "shop", "ingress"), "Skipped: gateway (operator.istio.io/component=IngressGateways): never restarted by meshwave; migrate it after its namespace")

	// Every other pod runs 1-26, and each workload was patched once.
	then := f.Then()
	for ns, names := range map[string][]string{"shop": {"cart", "catalog", "checkout", "orders", "web"}, "media": {"encoder", "player"}} {
		for _, n := range names {
			then.PodsOnRevision(ns, n, "1-26")
			assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/"+n), "patches of %s/%s", ns, n)
		}
		n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "1-26", n.Labels[mesh.LabelRev])
	}
	// A wave costs its namespace a write when it starts and one when it
	// ends; the gates' progress in between is not written.
	t.Logf("namespace writes: shop %d for 4 waves, media %d for 2", counter.get("PATCH namespaces shop"), counter.get("PATCH namespaces media"))
	assert.Equal(t, 2*4, counter.get("PATCH namespaces shop"))
	// media also says, while it waits, whose turn it is, then whose slot.
	assert.LessOrEqual(t, counter.get("PATCH namespaces media"), 2*2+2)
	assert.Len(t, counter.writes("PATCH deployments"), 7)
}
