package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planNamespaceCases are the planner's rules, each a case of
// TestPlanNamespace with canary 1 and batches of 2.
var planNamespaceCases = []planNamespaceCase{
	{
		name:  "deployments are ordered by wave annotation then name, the first wave is the canary, and waves never mix two values",
		ws:    []Workload{deploy("e"), deploy("d", waveAnn("1")), deploy("c", waveAnn("1")), deploy("b", waveAnn("1")), deploy("a", waveAnn("0"))},
		waves: [][]string{{"a"}, {"b", "c"}, {"d"}, {"e"}},
	},
	{
		name:  "the canary takes only the first of several deployments sharing the lowest wave",
		ws:    []Workload{deploy("x"), deploy("y"), deploy("z")},
		waves: [][]string{{"x"}, {"y", "z"}},
	},
	{
		name:     "after the first wave, waves are batch-sized",
		ws:       []Workload{deploy("x"), deploy("y"), deploy("z")},
		wavesRun: 1,
		waves:    [][]string{{"x", "y"}, {"z"}},
	},
	{
		name: "gateway deployments are never planned",
		ws: []Workload{
			deploy("app"),
			deploy("ingress", label("operator.istio.io/component", "IngressGateways")),
			deploy("asm", func(w *Workload) { w.TemplateAnnotations[AnnotationTemplates] = "asm-gateway" }),
			deploy("egress", label("istio", "egressgateway")),
			deploy("managed", label("gateway.istio.io/managed", "istio.io-gateway-controller")),
		},
		waves: [][]string{{"app"}},
		excluded: []Exclusion{
			{"asm", "gateway (inject.istio.io/templates=asm-gateway)"},
			{"egress", "gateway (istio=egressgateway)"},
			{"ingress", "gateway (operator.istio.io/component=IngressGateways)"},
			{"managed", "gateway (gateway.istio.io/managed)"},
		},
	},
	{
		name:     "skipped, uninjected and already-moved deployments are left out with their reason",
		ws:       []Workload{deploy("a"), deploy("b", ann(AnnotationSkip, "true")), deploy("c", notInjected()), deploy("d", onRevision("1-26"))},
		waves:    [][]string{{"a"}},
		excluded: []Exclusion{{"b", "meshwave.io/skip is true"}, {"c", "no injected pod"}, {"d", "already on 1-26"}},
	},
	{
		name: "a deployment half on the target is still planned",
		ws: []Workload{deploy("a", func(w *Workload) {
			w.Pods[0].Revision = "1-26"
		})},
		waves: [][]string{{"a"}},
	},
	{
		name: "within a wave value, Deployments go first, then StatefulSets, then DaemonSets; the wave annotation overrides",
		ws: []Workload{
			deploy("agent", kind(KindDaemonSet)), deploy("db", kind(KindStatefulSet)), deploy("zed"), deploy("api"),
			deploy("cache", kind(KindStatefulSet), waveAnn("0")), deploy("web"),
		},
		wavesRun: 1,
		waves:    [][]string{{"StatefulSet/cache"}, {"api", "web"}, {"zed", "StatefulSet/db"}, {"DaemonSet/agent"}},
	},
	{
		name: "a StatefulSet with a partition is left out with the reason, naming its kind; OnDelete ones are planned",
		ws: []Workload{
			deploy("db", kind(KindStatefulSet), func(w *Workload) { w.Partition = 2 }),
			deploy("ledger", kind(KindStatefulSet), func(w *Workload) { w.OnDelete = true }),
			deploy("logs", kind(KindDaemonSet), func(w *Workload) { w.OnDelete = true }),
			deploy("queue", kind(KindStatefulSet)),
		},
		wavesRun: 1,
		waves:    [][]string{{"StatefulSet/ledger", "StatefulSet/queue"}, {"DaemonSet/logs"}},
		excluded: []Exclusion{
			{"StatefulSet/db", "statefulset partition 2 keeps the pods below ordinal 2 on their old template: a restart would not reach them"},
		},
	},
	{
		name: "terminating pods do not count",
		ws: []Workload{deploy("a", func(w *Workload) {
			w.Pods[0].Revision = "1-26"
			w.Pods[1].Terminating = true
		})},
		excluded: []Exclusion{{"a", "already on 1-26"}},
		waves:    [][]string{},
	},
}

type planNamespaceCase struct {
	name     string
	ws       []Workload
	wavesRun int
	waves    [][]string
	excluded []Exclusion
}

func TestPlanNamespace(t *testing.T) {
	sizes := WaveSizes{CanarySize: 1, BatchSize: 2}
	for _, tt := range planNamespaceCases {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanNamespace("shop", tt.ws, "1-26", "", tt.wavesRun, sizes)
			assert.Equal(t, tt.waves, waveNames(p))
			assert.Equal(t, tt.excluded, p.Excluded)
		})
	}
}

func TestPlanNamespaceCountsThisMigrationsMovesAsMoved(t *testing.T) {
	moved := deploy("a", onRevision("1-26"), ann(AnnotationMove, `{"revision":"1-26","wave":1,"at":"2026-11-29T12:00:00Z","migration":"1-26@2026-11-29T12:00:00Z"}`))
	earlier := deploy("b", onRevision("1-26"), ann(AnnotationMove, `{"revision":"1-26","wave":1,"at":"2026-01-01T00:00:00Z","migration":"1-26@2026-01-01T00:00:00Z"}`))
	p := PlanNamespace("shop", []Workload{moved, earlier, deploy("c")}, "1-26", "1-26@2026-11-29T12:00:00Z", 1, WaveSizes{})
	assert.Equal(t, []string{"a"}, p.Moved)
	assert.Equal(t, []Exclusion{{"b", "already on 1-26"}}, p.Excluded)
	assert.Equal(t, [][]string{{"c"}}, waveNames(p))
}

func TestPlanWavesOrdersNamespacesByPriorityThenName(t *testing.T) {
	mk := func(ns, prio string) PlanInput {
		s := snap(deploy("a"))
		s.Namespace.Name = ns
		if prio != "" {
			s.Namespace.Annotations[AnnotationPriority] = prio
		}
		return PlanInput{Snapshot: s}
	}
	plans := PlanWaves([]PlanInput{mk("media", "20"), mk("zoo", ""), mk("shop", "10"), mk("alpha", "20")}, WaveSizes{})
	var got []string
	for _, p := range plans {
		got = append(got, p.Namespace)
	}
	assert.Equal(t, []string{"shop", "alpha", "media", "zoo"}, got)
}

func TestPlanWavesReportsAnUnresolvableTarget(t *testing.T) {
	s := snap(deploy("a"))
	s.Namespace.Annotations[AnnotationTargetRevision] = "1-99"
	plans := PlanWaves([]PlanInput{{Snapshot: s}}, WaveSizes{})
	assert.Empty(t, plans[0].Waves)
	assert.Equal(t, `meshwave.io/target-revision on namespace shop: "1-99" is not an installed revision or tag (no MutatingWebhookConfiguration istio-sidecar-injector-1-99 or istio-revision-tag-1-99 exists)`, plans[0].Excluded[0].Reason)
}

func TestPlanWavesResolvesTags(t *testing.T) {
	s := snap(deploy("a"))
	s.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	plans := PlanWaves([]PlanInput{{Snapshot: s}}, WaveSizes{})
	assert.Equal(t, "1-26", plans[0].TargetRevision)
	assert.Equal(t, [][]string{{"a"}}, waveNames(plans[0]))
}

func TestGatewaysAreRecognisedWhereverIstioMarksThem(t *testing.T) {
	tmplLabel := func(k, v string) wopt { return func(w *Workload) { w.TemplateLabels[k] = v } }
	tmplAnn := func(k, v string) wopt { return func(w *Workload) { w.TemplateAnnotations[k] = v } }
	tests := []struct {
		name   string
		marker wopt
		reason string
	}{
		{"the operator component on the Deployment", label("operator.istio.io/component", "IngressGateways"), "gateway (operator.istio.io/component=IngressGateways)"},
		{"the operator component on the pod template only", tmplLabel("operator.istio.io/component", "EgressGateways"), "gateway (operator.istio.io/component=EgressGateways)"},
		{"the gateway injection template", tmplAnn(AnnotationTemplates, "gateway"), "gateway (inject.istio.io/templates=gateway)"},
		{"Istio's gateway label on the pod template", tmplLabel("istio", "ingressgateway"), "gateway (istio=ingressgateway)"},
		{"a Gateway API gateway's pods", tmplLabel("gateway.networking.k8s.io/gateway-name", "public"), "gateway (gateway.networking.k8s.io/gateway-name)"},
		{"a gateway managed by istiod", tmplLabel("gateway.istio.io/managed", "istio.io-gateway-controller"), "gateway (gateway.istio.io/managed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanNamespace("shop", []Workload{deploy("gw", tt.marker)}, "1-26", "", 0, WaveSizes{})
			assert.Empty(t, p.Waves)
			assert.Equal(t, []Exclusion{{"gw", tt.reason}}, p.Excluded)
		})
	}
	p := PlanNamespace("shop", []Workload{deploy("app", tmplLabel("istio", "app"))}, "1-26", "", 0, WaveSizes{})
	assert.Equal(t, [][]string{{"app"}}, waveNames(p), "an ordinary workload is planned")
}

func TestTheStatusCountsEveryKindApart(t *testing.T) {
	s := snap(deploy("api"), deploy("web"), deploy("db", kind(KindStatefulSet)), deploy("logs", kind(KindDaemonSet), ann(AnnotationSkip, "true")))
	d := Decide(Input{Snapshot: s, Now: t0, Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	assert.Equal(t, Counts{Total: 4, Pending: 2, Moving: 1, Skipped: 1}, d.Status.Counts)
	assert.Equal(t, map[Kind]Counts{
		KindDeployment:  {Total: 2, Pending: 1, Moving: 1},
		KindStatefulSet: {Total: 1, Pending: 1},
		KindDaemonSet:   {Total: 1, Skipped: 1},
	}, d.Status.Kinds)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	back, _, err := ParseStatus(map[string]string{AnnotationStatus: raw})
	require.NoError(t, err, "the status reads back")
	assert.Equal(t, d.Status.Kinds, back.Kinds)

	only := Decide(Input{Snapshot: snap(deploy("api")), Now: t0, Config: DefaultConfig()})
	assert.Nil(t, only.Status.Kinds, "a namespace of Deployments only keeps the status it always had")

	bad := *d.Status
	bad.Kinds = map[Kind]Counts{"Job": {Total: 1}, KindStatefulSet: {Moved: -1}}
	raw, err = bad.Encode()
	require.NoError(t, err)
	_, _, err = ParseStatus(map[string]string{AnnotationStatus: raw})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `kinds "Job" is not Deployment, StatefulSet or DaemonSet`)
	assert.Contains(t, err.Error(), "kinds.StatefulSet.moved")
}

// A namespace that waits for a slot to continue a migration on record
// (its target removed half-way and set again) is planned as it runs once
// admitted: it goes on at wave 2 with b and c, then moves d and e in wave
// 3, not a fresh migration's canary.
func TestThePlanOfANamespaceWaitingToContinueItsMigrationIsTheOneItRuns(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("d"), deploy("e"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	s.decide(nil) // wave 2: b, c restarted
	require.Equal(t, 2, s.status.Wave)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	require.Equal(t, PhaseStopped, s.status.Phase)

	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	s.decide(nil)
	require.Equal(t, PhasePending, s.status.Phase)
	plan := func() NamespacePlan {
		r := Read(s.snap, s.status, nil, s.cfg, s.now)
		return PlanWaves([]PlanInput{{Snapshot: s.snap, Status: s.status, Reading: &r}}, s.cfg.Sizes)[0]
	}
	waiting := plan()

	s.snap.Peers = nil
	s.decide(nil)
	require.Equal(t, PhaseMigrating, s.status.Phase)
	require.Equal(t, 2, s.status.Wave, "the migration on record goes on at wave 2")
	running := plan()
	require.Equal(t, 3, running.FirstWave())
	require.Equal(t, [][]string{{"d", "e"}}, waveNames(running))

	assert.Equal(t, running.FirstWave(), waiting.FirstWave(), "the waves are numbered as the decision will run them")
	assert.Equal(t, waveNames(running), waveNames(waiting), "the plan names the waves the decision will run")
}
