package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// templateAnnotations returns a Deployment's template annotations without
// the restart stamp.
func templateAnnotations(t *testing.T, f *fixture.Fixture, ns, name string) (map[string]string, map[string]string) {
	t.Helper()
	d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	out := map[string]string{}
	for k, v := range d.Spec.Template.Annotations {
		if k != canary.AnnotationRestartedAt {
			out[k] = v
		}
	}
	return out, d.Spec.Template.Labels
}

// TestMeshV1SettingsArePersistedAsTheRunbookDoes moves workloads whose
// sidecar settings exist only on their pods (added by the Mesh v1 webhook)
// and checks that each template gains exactly what the runbook's jq
// produces. It then decommissions Mesh v1 and restarts a workload: its new
// pods still get their sidecar and settings, from the template alone.
func TestMeshV1SettingsArePersistedAsTheRunbookDoes(t *testing.T) {
	f := fixture.New(t, world.Options{
		MeshV1:    true,
		Revisions: []mesh.Revision{{Name: "1-25", InjectionPolicy: mesh.PolicyDisabled}, {Name: "1-26", InjectionPolicy: mesh.PolicyDisabled}},
	})
	const ns = "legacy"
	f.Given().
		Namespace(ns, map[string]string{mesh.LabelRev: "1-25", mesh.MeshV1NamespaceLabel: "enabled"}, nil).
		MicroService(mesh.MicroService{Namespace: ns, Name: "frontend", App: "frontend", Sidecar: true, Annotations: map[string]string{
			"sidecar.istio.io/logLevel": "warning", "sidecar.istio.io/proxyCPU": "100m", "sidecar.istio.io/proxyCPULimit": "500m",
			"sidecar.istio.io/proxyMemory": "128Mi", "sidecar.istio.io/proxyMemoryLimit": "512Mi",
		}}).
		MicroService(mesh.MicroService{Namespace: ns, Name: "backend", App: "backend", Sidecar: true, Annotations: map[string]string{
			"sidecar.istio.io/proxyCPU": "50m", "traffic.sidecar.istio.io/excludeOutboundPorts": "12345",
		}}).
		MicroService(mesh.MicroService{Namespace: ns, Name: "worker", App: "worker", Selector: map[string]string{"workload": "worker"}, Sidecar: true, Annotations: map[string]string{
			"traffic.sidecar.istio.io/excludeInboundPorts": "8081", "traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/8",
		}}).
		MicroService(mesh.MicroService{Namespace: ns, Name: "tuned", App: "tuned", Sidecar: true, Annotations: map[string]string{
			"sidecar.istio.io/proxyCPU": "50m", "sidecar.istio.io/logLevel": "debug",
		}}).
		Deployment(ns, "frontend").
		Deployment(ns, "backend").
		Deployment(ns, "worker", fixture.WithoutAppLabel()).
		Deployment(ns, "tuned", fixture.TemplateAnnotations(map[string]string{"sidecar.istio.io/proxyCPU": "200m"})).
		Deployment(ns, "plain").
		RolledOut(ns)

	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	cfg := testConfig(f)
	cfg.BatchSize = 3
	startAgent(t, f, cfg, counter, "agent-1")
	st := waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
	assert.Equal(t, []canary.Exclusion{{Workload: "plain", Reason: "no injected pod"}}, st.Skipped)

	want := map[string]map[string]string{
		"frontend": {"sidecar.istio.io/inject": "true", "sidecar.istio.io/logLevel": "warning", "sidecar.istio.io/proxyCPU": "100m",
			"sidecar.istio.io/proxyCPULimit": "500m", "sidecar.istio.io/proxyMemory": "128Mi", "sidecar.istio.io/proxyMemoryLimit": "512Mi"},
		"backend": {"sidecar.istio.io/inject": "true", "sidecar.istio.io/proxyCPU": "50m", "traffic.sidecar.istio.io/excludeOutboundPorts": "12345"},
		"worker":  {"sidecar.istio.io/inject": "true", "traffic.sidecar.istio.io/excludeInboundPorts": "8081", "traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/8"},
		// The template's own proxyCPU stays; only what it lacks is added.
		"tuned": {"sidecar.istio.io/inject": "true", "sidecar.istio.io/proxyCPU": "200m", "sidecar.istio.io/logLevel": "debug"},
	}
	for name, annotations := range want {
		got, labels := templateAnnotations(t, f, ns, name)
		assert.Equal(t, annotations, got, "template annotations of %s", name)
		assert.NotContains(t, labels, mesh.LabelMsname, "no template gains msname")
		assert.NotContains(t, labels, mesh.LabelAsmMsname, "no template gains asm.cpaas.io/msname")
		assert.NotContains(t, labels, "sidecar.istio.io/inject", "inject stays an annotation")
		assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/"+name))
		f.Then().PodsOnRevision(ns, name, "1-26")
	}
	_, workerLabels := templateAnnotations(t, f, ns, "worker")
	assert.Equal(t, "worker", workerLabels["app"], "an app label is added where the template had none")
	plainAnn, _ := templateAnnotations(t, f, ns, "plain")
	assert.Empty(t, plainAnn, "a workload without a sidecar gets no patch")
	assert.Zero(t, counter.get("PATCH deployments "+ns+"/plain"))

	// Decommission Mesh v1, then restart: the settings now come from the
	// template alone.
	require.NoError(t, f.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(f.Ctx, "asm-controller-pod-webhook", metav1.DeleteOptions{}))
	// The apiserver calls a webhook until its own cache sees it deleted:
	// a pod created before then is still mutated. A dry-run pod of
	// frontend's says when it no longer is.
	f.Eventually("the Mesh v1 webhook gone from admission", func() (bool, string) {
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns, Labels: map[string]string{"app": "frontend"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "probe"}}}}
		got, err := f.Client.CoreV1().Pods(ns).Create(f.Ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		_, mutated := got.Labels[mesh.LabelMsname]
		return !mutated, fmt.Sprint(got.Labels)
	})
	f.When().RestartDeployment(ns, "frontend").WaitForRollout(ns, "frontend").Then().PodsOnRevision(ns, "frontend", "1-26")
	pods, _, err := f.DeploymentPods(ns, "frontend")
	require.NoError(t, err)
	for _, p := range pods {
		assert.NotContains(t, p.Labels, mesh.LabelMsname)
		var proxy corev1.Container
		for _, c := range p.Spec.InitContainers {
			if c.Name == mesh.ProxyContainer {
				proxy = c
			}
		}
		require.Equal(t, mesh.ProxyContainer, proxy.Name, "pod %s has an istio-proxy init container", p.Name)
		assert.Equal(t, resource.MustParse("100m"), proxy.Resources.Requests[corev1.ResourceCPU])
		assert.Equal(t, resource.MustParse("500m"), proxy.Resources.Limits[corev1.ResourceCPU])
		assert.Equal(t, resource.MustParse("512Mi"), proxy.Resources.Limits[corev1.ResourceMemory])
		assert.Contains(t, proxy.Args, "--proxyLogLevel=warning")
	}
}

// TestANamespaceWithoutInjectedPodsIsLeftAlone opts in a namespace whose
// workloads have no sidecar: it is reported, its label stays, and no
// Deployment is written.
func TestANamespaceWithoutInjectedPodsIsLeftAlone(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "otel"
	noSidecar := fixture.TemplateLabels(map[string]string{mesh.KeyInject: "false"})
	f.Given().
		Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "collector", noSidecar).
		Deployment(ns, "agent", noSidecar).
		RolledOut(ns)
	optIn(f, ns, "1-26", 10)
	counter := newAPICounter()
	startAgent(t, f, testConfig(f), counter, "agent-1")

	st := waitForPhase(f, ns, canary.PhaseBlocked, time.Minute)
	assert.Equal(t, "precheck failed: nothing to migrate: no workload has an injected pod; istio.io/rev stays 1-25", st.Reason)
	waitForEvent(f, "Namespace", "", ns, "PrecheckFailed: nothing to migrate")
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "1-25", n.Labels[mesh.LabelRev], "the label is never switched")
	for _, name := range []string{"collector", "agent"} {
		d, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, int64(1), d.Generation)
		assert.NotContains(t, d.Annotations, canary.AnnotationMove)
	}
	assert.Empty(t, counter.writes("PATCH deployments"))
	assert.Equal(t, map[string]int{"PATCH namespaces " + ns: 1}, counter.writes("PATCH namespaces"), "only the status is written")
}

// TestAReadinessTimeoutFailsTheWorkloadAndPauses holds the new pods of one
// workload unready. It fails with a reason after its own readiness timeout,
// the namespace pauses, and the next wave does not start; once the pods
// come up and the pause is lifted, the migration completes.
func TestAReadinessTimeoutFailsTheWorkloadAndPauses(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "slowns"
	f.Given().
		Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "fast", waveAnnotation("0")).
		Deployment(ns, "slow", waveAnnotation("1"), fixture.Annotations(map[string]string{canary.AnnotationReadinessTimeout: "4s"})).
		Deployment(ns, "later", waveAnnotation("2")).
		RolledOut(ns)
	release := holdNew(f, ns, "slow")
	optIn(f, ns, "1-26", 10)
	cfg := testConfig(f)
	cfg.FailurePolicy = string(canary.PolicyPause)
	counter := newAPICounter()
	startAgent(t, f, cfg, counter, "agent-1")

	st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	require.Len(t, st.Workloads, 1)
	failed := st.Workloads[0]
	assert.Equal(t, "slow", failed.Name)
	assert.Equal(t, canary.StateFailed, failed.State)
	assert.True(t, strings.HasPrefix(failed.Reason, "slow did not roll out within 4s: 1 of 2 replicas updated; pod slow-"), failed.Reason)
	assert.True(t, strings.HasSuffix(failed.Reason, " not ready"), failed.Reason)
	assert.Equal(t, "wave 2 failed: rollout fail: "+failed.Reason+"; paused by failure policy Pause", st.Reason)
	assert.Equal(t, canary.Counts{Total: 3, Pending: 1, Moved: 1, Failed: 1}, st.Counts)
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "true", n.Annotations[canary.AnnotationPaused], "meshwave sets the pause a person lifts")
	waitForEvent(f, "Deployment", ns, "slow", "WorkloadFailed: wave 2, rollout: slow did not roll out within 4s")
	waitForEvent(f, "Namespace", "", ns, "Paused: wave 2 failed")
	assert.Zero(t, counter.get("PATCH deployments "+ns+"/later"), "the next wave does not start")

	release()
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
	waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
	for _, name := range []string{"fast", "slow", "later"} {
		assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/"+name), "patches of %s", name)
	}
}

// TestPauseResumeAndAnAgentKilledMidWave pauses before the first wave and
// between waves through the annotation, and kills the agent while a wave
// is in flight. A new agent finishes the migration without patching any
// Deployment twice.
func TestPauseResumeAndAnAgentKilledMidWave(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "pr"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "a").Deployment(ns, "b").Deployment(ns, "c").Deployment(ns, "d").
		RolledOut(ns)
	paused := "true"
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, &paused)
	optIn(f, ns, "1-26", 10)
	cfg := testConfig(f)
	cfg.CanarySize, cfg.BatchSize = 1, 2
	counter := newAPICounter()
	first := startAgent(t, f, cfg, counter, "agent-1")

	st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	assert.Equal(t, "paused by meshwave.io/paused before the first wave", st.Reason)
	assert.Empty(t, counter.writes("PATCH deployments"))

	release := holdNew(f, ns, "b")
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
	f.Eventually("wave 2 (b, c) restarted", func() (bool, string) {
		rb, okb := moveRecord(f, ns, "b")
		rc, okc := moveRecord(f, ns, "c")
		return okb && okc && rb.Wave == 2 && rc.Wave == 2, ""
	})
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, &paused)
	first.Kill()

	startAgent(t, f, cfg, counter, "agent-2")
	release()
	st = waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	assert.Equal(t, "paused by meshwave.io/paused after wave 2", st.Reason)
	assert.Zero(t, counter.get("PATCH deployments "+ns+"/d"), "no new wave starts while paused")

	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
	st = waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
	assert.Equal(t, "moved 4 workloads to 1-26 in 3 waves", st.Reason)
	counter.report(t)
	assert.Equal(t, map[string]int{
		"PATCH deployments pr/a": 1, "PATCH deployments pr/b": 1, "PATCH deployments pr/c": 1, "PATCH deployments pr/d": 1,
	}, counter.writes("PATCH deployments"), "no Deployment is patched twice across the restart")
	lease, err := f.Client.CoordinationV1().Leases("istio-system").Get(f.Ctx, "meshwave", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "agent-2", *lease.Spec.HolderIdentity)
}

// TestInvalidAnnotationsBlockWithAnEventAndWriteNothing gives bad values to
// the wave, priority and readiness-timeout keys, and a target that names no
// revision: each namespace is Blocked with a reason naming the key, the
// value and what was expected, each bad value gets an Event, and no
// Deployment is written.
func TestInvalidAnnotationsBlockWithAnEventAndWriteNothing(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	rev := map[string]string{mesh.LabelRev: "1-25"}
	f.Given().
		Namespace("bad", rev, map[string]string{canary.AnnotationPriority: "high"}).
		Deployment("bad", "x", waveAnnotation("abc")).
		Deployment("bad", "y", fixture.Annotations(map[string]string{canary.AnnotationReadinessTimeout: "soon"})).
		Deployment("bad", "z").
		Namespace("nowhere", rev, nil).
		Deployment("nowhere", "app").
		RolledOut("bad").RolledOut("nowhere")
	target, missing := "1-26", "1-99"
	f.When().AnnotateNamespace("bad", canary.AnnotationTargetRevision, &target).
		AnnotateNamespace("nowhere", canary.AnnotationTargetRevision, &missing)
	counter := newAPICounter()
	startAgent(t, f, testConfig(f), counter, "agent-1")

	bad := waitForPhase(f, "bad", canary.PhaseBlocked, time.Minute)
	priorityErr := `meshwave.io/priority on namespace bad: "high" is not an integer between -1000000 and 1000000`
	waveErr := `meshwave.io/wave on deployment bad/x: "abc" is not a non-negative integer`
	timeoutErr := `meshwave.io/readiness-timeout on deployment bad/y: "soon" is not a positive Go duration such as "90s" or "10m"`
	assert.Equal(t, "invalid input: "+priorityErr+"; "+waveErr+"; "+timeoutErr, bad.Reason)
	waitForEvent(f, "Namespace", "", "bad", "InvalidAnnotation: "+priorityErr)
	waitForEvent(f, "Deployment", "bad", "x", "InvalidAnnotation: "+waveErr)
	waitForEvent(f, "Deployment", "bad", "y", "InvalidAnnotation: "+timeoutErr)

	nowhere := waitForPhase(f, "nowhere", canary.PhaseBlocked, time.Minute)
	targetErr := `meshwave.io/target-revision on namespace nowhere: "1-99" is not an installed revision or tag (no MutatingWebhookConfiguration istio-sidecar-injector-1-99 or istio-revision-tag-1-99 exists)`
	assert.Equal(t, "invalid input: "+targetErr, nowhere.Reason)
	waitForEvent(f, "Namespace", "", "nowhere", "InvalidAnnotation: "+targetErr)

	for _, ns := range []string{"bad", "nowhere"} {
		n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "1-25", n.Labels[mesh.LabelRev], "the label of %s is untouched", ns)
	}
	assert.Empty(t, counter.writes("PATCH deployments"), "zero writes to the Deployments")
	assert.Equal(t, map[string]int{"PATCH namespaces bad": 1, "PATCH namespaces nowhere": 1}, counter.writes("PATCH namespaces"), "only the statuses")

	// Fixing the values lets the namespace go.
	f.When().AnnotateNamespace("bad", canary.AnnotationPriority, nil).Do(func(f *fixture.Fixture) {
		for name, key := range map[string]string{"x": canary.AnnotationWave, "y": canary.AnnotationReadinessTimeout} {
			_, err := f.Client.AppsV1().Deployments("bad").Patch(f.Ctx, name, "application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"`+key+`":null}}}`), metav1.PatchOptions{})
			require.NoError(t, err)
		}
	})
	waitForPhase(f, "bad", canary.PhaseCompleted, time.Minute)
}

// TestATargetThatIsNotANameBlocksOnlyItsNamespace sets
// meshwave.io/target-revision to values that name no revision or tag, with
// the default concurrency of 1, one namespace each on one world, each with
// an agent of its own. A namespace that had not started is Blocked with a
// status that reads back and holds no slot, so the others go on; one
// half-way is blocked where it is, keeps its slot, and resumes once its
// target is set back, restarting nothing twice.
func TestATargetThatIsNotANameBlocksOnlyItsNamespace(t *testing.T) {
	shared := fixture.New(t, world.Options{NoPrometheus: true})
	rev := map[string]string{mesh.LabelRev: "1-25"}

	t.Run("a namespace whose target is empty or not a label value is blocked, and the next one completes", func(t *testing.T) {
		f := shared.For(t)
		const next = "next"
		targets := map[string]string{"empty": "", "notaname": "not a name!"}
		optOutWhenDone(t, f, "empty", "notaname", next)
		for ns := range targets {
			f.Given().Namespace(ns, rev, map[string]string{canary.AnnotationPriority: "10"}).Deployment(ns, "app", fixture.Replicas(1))
		}
		f.Given().Namespace(next, rev, nil).Deployment(next, "app", fixture.Replicas(1))
		for _, ns := range []string{"empty", "notaname", next} {
			f.WaitForNamespaceRolledOut(ns)
		}
		for ns, target := range targets {
			f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
		}
		optIn(f, next, "1-26", 20)
		counter := newAPICounter()
		startAgent(t, f, testConfig(f), counter, "agent-"+next)

		// The namespaces before it hold no slot and are not waiting for
		// one: it goes.
		st := waitForPhase(f, next, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", st.Reason)
		f.Then().PodsOnRevision(next, "app", "1-26")
		for ns, target := range targets {
			problem := fmt.Sprintf("meshwave.io/target-revision on namespace %s: %q is not a revision or tag name (a non-empty label value)", ns, target)
			st := waitForPhase(f, ns, canary.PhaseBlocked, time.Minute)
			n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
			require.NoError(t, err)
			_, ok, err := canary.ParseStatus(n.Annotations)
			require.NoError(t, err, "the status reads back")
			require.True(t, ok)
			assert.Equal(t, "invalid input: "+problem, st.Reason)
			assert.Equal(t, canary.BlockedInvalidInput, st.BlockedKind)
			assert.Empty(t, st.Target, "an unusable target is not written")
			assert.Equal(t, 0, st.Wave)
			assert.False(t, st.HoldsSlot())
			assert.Equal(t, "1-25", n.Labels[mesh.LabelRev], "the label of %s is untouched", ns)
			waitForEvent(f, "Namespace", "", ns, "InvalidAnnotation: ")
			assert.Equal(t, []string{"InvalidAnnotation: " + problem}, eventsFor(f, "Namespace", "", ns))
		}

		for ns := range targets {
			assert.Equal(t, map[string]int{"app": 0}, restarts(f, ns, "app"), "nothing of %s is restarted", ns)
			_, moved := moveRecord(f, ns, "app")
			assert.False(t, moved)
			assert.Empty(t, counter.writes("PATCH deployments "+ns+"/"))
			assert.Equal(t, 1, counter.get("PATCH namespaces "+ns), "the status of %s is written once", ns)
			f.Then().PodsOnRevision(ns, "app", "1-25")
		}
		assert.Equal(t, 1, counter.get("PATCH deployments "+next+"/app"))
	})

	t.Run("a migration under way whose target is set to an empty value is blocked where it is, keeps its slot, and resumes", func(t *testing.T) {
		f := shared.For(t)
		const ns, other = "underway", "underway-waits"
		optOutWhenDone(t, f, ns, other)
		f.Given().Namespace(ns, rev, nil).
			Deployment(ns, "a", waveAnnotation("0"), fixture.Replicas(1)).
			Deployment(ns, "b", waveAnnotation("1"), fixture.Replicas(1)).
			Namespace(other, rev, nil).Deployment(other, "x", fixture.Replicas(1)).
			RolledOut(ns).RolledOut(other)
		release := holdNew(f, ns, "a")
		t.Cleanup(release)
		cfg := testConfig(f)
		cfg.ReadinessTimeout = agent.Duration(2 * time.Minute)
		counter := newAPICounter()
		optIn(f, ns, "1-26", 10)
		startAgent(t, f, cfg, counter, "agent-"+ns)
		f.Eventually("wave 1 patched", func() (bool, string) {
			r, ok := moveRecord(f, ns, "a")
			return ok && r.Wave == 1, fmt.Sprint(r)
		})
		migration := status(f, ns).MigrationID()
		require.NotEmpty(t, migration)
		optIn(f, other, "1-26", 20)
		waiting := "waiting for a free slot: 1 of 1 in use by " + ns
		f.Eventually(other+" to wait for the slot", func() (bool, string) {
			st := status(f, other)
			return st != nil && st.Phase == canary.PhasePending && st.Reason == waiting, fmt.Sprintf("%+v", st)
		})

		empty := ""
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &empty)
		st := waitForPhase(f, ns, canary.PhaseBlocked, time.Minute)
		problem := `meshwave.io/target-revision on namespace underway: "" is not a revision or tag name (a non-empty label value)`
		assert.Equal(t, "invalid input: "+problem, st.Reason)
		assert.Equal(t, canary.PhaseMigrating, st.BlockedPhase)
		assert.Equal(t, "1-26", st.Target, "the migration under way keeps its target")
		assert.Equal(t, 1, st.Wave)
		assert.Equal(t, canary.WaveVerifying, st.WaveState)
		assert.Equal(t, migration, st.MigrationID(), "the same migration")
		assert.True(t, st.HoldsSlot())
		waitForEvent(f, "Namespace", "", ns, "InvalidAnnotation: "+problem)
		assert.Equal(t, "1-26", namespaceLabel(f, ns))
		// Its block has woken the namespace waiting for the slot; give that
		// reconcile time to land.
		time.Sleep(2 * time.Second)
		st = status(f, other)
		assert.Equal(t, canary.PhasePending, st.Phase)
		assert.Equal(t, waiting, st.Reason)
		assert.Zero(t, counter.get("PATCH deployments "+other+"/x"))

		target := "1-26"
		f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
		f.Eventually(ns+" to go on where it stopped", func() (bool, string) {
			st := status(f, ns)
			return st.Phase == canary.PhaseMigrating, fmt.Sprintf("phase %s, wave %d, reason %q", st.Phase, st.Wave, st.Reason)
		})
		st = status(f, ns)
		assert.Equal(t, 1, st.Wave)
		assert.Equal(t, canary.WaveVerifying, st.WaveState)
		assert.Equal(t, migration, st.MigrationID(), "the same migration")
		release()
		done := waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", done.Reason)
		assert.Equal(t, migration, done.MigrationID())
		assert.Equal(t, map[string]int{"a": 1, "b": 1}, restarts(f, ns, "a", "b"), "nothing is restarted again")
		assert.Equal(t, map[string]int{"PATCH deployments " + ns + "/a": 1, "PATCH deployments " + ns + "/b": 1}, counter.writes("PATCH deployments "+ns+"/"))

		later := waitForPhase(f, other, canary.PhaseCompleted, time.Minute)
		assert.False(t, later.StartedAt.Before(*done.CompletedAt), "%s started at %s, before %s completed at %s (concurrency 1)", other, later.StartedAt, ns, done.CompletedAt)
		assert.Equal(t, 1, counter.get("PATCH deployments "+other+"/x"))
	})
}
