package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// selfHeal stands in for Argo CD's self-heal: every second it puts back
// what git says of the namespace's istio.io/rev label and of the
// Deployment's pod template annotations, as an apply from git would (the
// Deployment's own metadata annotations are not in git and stay).
func selfHeal(ctx context.Context, f *fixture.Fixture, ns, deployment, label string, template map[string]string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n, err := f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.Labels[mesh.LabelRev] != label {
			n.Labels[mesh.LabelRev] = label
			_, _ = f.Client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{FieldManager: "argocd-controller"})
		}
		if d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, deployment, metav1.GetOptions{}); err == nil && len(d.Spec.Template.Annotations) != len(template) {
			d.Spec.Template.Annotations = template
			_, _ = f.Client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{FieldManager: "argocd-controller"})
		}
	}
}

// TestAGitOpsSelfHealIsReportedAndNeverFought runs a migration of a
// namespace Argo CD owns while a stand-in for its self-heal puts the
// namespace's label and the canary's template back every second. meshwave
// warns in the precheck, reports the template revert once (Event, status,
// metric) without restarting the canary again, puts the label back twice,
// and on the third revert leaves the label and pauses. The canary's pods
// created while the label was switched back may fail the injection gate
// first, and the failure policy Pause then stops the wave: either way the
// namespace pauses and nothing is restarted twice.
func TestAGitOpsSelfHealIsReportedAndNeverFought(t *testing.T) {
	f := fixture.New(t, world.Options{})
	argo := func(app string) fixture.DeploymentOption {
		return fixture.Labels(map[string]string{canary.LabelArgoInstance: app})
	}
	f.Given().
		Namespace("shop", map[string]string{mesh.LabelRev: "1-25", canary.LabelArgoInstance: "platform"}, nil).
		Deployment("shop", "cart", argo("shop")).
		Deployment("shop", "web", argo("shop")).
		RolledOut("shop")
	d, err := f.Client.AppsV1().Deployments("shop").Get(f.Ctx, "cart", metav1.GetOptions{})
	require.NoError(t, err)
	gitTemplate := d.Spec.Template.Annotations

	optIn(f, "shop", "1-26", 10)
	cfg := testConfig(f)
	cfg.CanarySize = 1
	cfg.FailurePolicy = string(canary.PolicyPause)
	cfg.DelayBetweenWaves = agent.Duration(10 * time.Minute) // web stays for later: only the canary moves here
	counter := newAPICounter()
	reg := prometheus.NewRegistry()
	startAgentWithOptions(t, f, cfg, counter, "agent-1", func(o *agent.Options) { o.Registerer = reg })
	ctx, stop := context.WithCancel(f.Ctx)
	t.Cleanup(stop)
	go selfHeal(ctx, f, "shop", "cart", "1-25", gitTemplate)

	waitForPhase(f, "shop", canary.PhasePaused, 2*time.Minute)
	hand := "hand the label over: set istio.io/rev=1-26 in git and let meshwave run the waves, or add /metadata/labels/istio.io~1rev to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option"
	var labelEvents []string
	f.EventuallyWithin("the template revert to be reported", time.Minute, func() (bool, string) {
		evs := eventsFor(f, "Deployment", "shop", "cart")
		for _, e := range evs {
			if strings.HasPrefix(e, "TemplateReverted: ") {
				return true, ""
			}
		}
		return false, strings.Join(evs, "\n")
	})
	f.EventuallyWithin("three label reverts", time.Minute, func() (bool, string) {
		labelEvents = nil
		for _, e := range eventsFor(f, "Namespace", "", "shop") {
			if strings.HasPrefix(e, "LabelReverted: ") {
				labelEvents = append(labelEvents, e)
			}
		}
		return len(labelEvents) >= 3, strings.Join(labelEvents, "\n")
	})
	require.Len(t, labelEvents, 3, "two put-backs, then it is left")
	assert.Equal(t, "LabelReverted: istio.io/rev on namespace shop was switched away from 1-26 3 times by Argo CD application platform: meshwave leaves it at 1-25 rather than fight, and pods created now get that revision; "+hand+", then remove meshwave.io/paused", labelEvents[2])
	assert.Equal(t, "LabelReverted: namespace shop carries istio.io/rev=1-25 while meshwave owns its label at 1-26; it is applied by Argo CD application platform. Put back to 1-26 (1 of 3 times before meshwave stops and pauses); "+hand, labelEvents[0])
	assert.Contains(t, eventsFor(f, "Namespace", "", "shop"), "PrecheckWarning: namespace shop is applied by Argo CD application platform: if its istio.io/rev label is in git, a sync switches it back to 1-25 after meshwave switches it. Hand the label over: set istio.io/rev=1-26 in git and let meshwave run the waves, or add /metadata/labels/istio.io~1rev to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option")

	st := status(f, "shop")
	assert.Equal(t, canary.PhasePaused, st.Phase, st.Reason)
	reverts := map[string]int{}
	for _, r := range st.Reverts {
		reverts[r.Object+" "+r.Owner] = r.Count
	}
	assert.Equal(t, map[string]int{"Namespace/shop argocd/platform": 3, "cart argocd/shop": 1}, reverts)
	found := false
	for _, w := range st.Warnings {
		found = found || strings.HasPrefix(w, "deployment cart's template no longer carries the kubectl.kubernetes.io/restartedAt stamp of its move to 1-26 in wave 1")
	}
	assert.True(t, found, "the status warns about the template: %q", st.Warnings)

	// Nothing is fought any more: a few more seconds of self-heal change
	// nothing.
	time.Sleep(4 * time.Second)
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1-25", n.Labels[mesh.LabelRev], "meshwave left the label to its owner")
	assert.Equal(t, map[string]int{"PATCH deployments shop/cart": 1}, counter.writes("PATCH deployments"), "the canary was restarted once, its template revert notwithstanding")
	_, recorded := moveRecord(f, "shop", "cart")
	assert.True(t, recorded)

	got := map[string]float64{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "meshwave_gitops_reverts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			got[strings.TrimSpace(key)] = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{
		"kind=label namespace=shop owner=argocd/platform": 3,
		"kind=template namespace=shop owner=argocd/shop":  1,
	}, got)
	counter.report(t)
}
