package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/cluster"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestEveryWorkloadKindMigrates runs meshwave over every kind a namespace
// holds, on Kubernetes' own StatefulSet, DaemonSet, Job and CronJob
// controllers and the real istiods, with one agent for the whole world.
func TestEveryWorkloadKindMigrates(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true, RunTime: 500 * time.Millisecond})
	cfg := testConfig(f)
	// Every namespace of the subtests at once; those that end paused keep
	// their slot.
	cfg.Concurrency = 8
	counter := newAPICounter()
	startAgent(t, f, cfg, counter, "agent-kinds")

	// First, alone in the world: one namespace of every kind, and what
	// meshwave holders says before and after.
	t.Run("one namespace of every kind completes, and only what cannot move still holds the old revision", func(t *testing.T) {
		const ns = "kinds"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
			Deployment(ns, "web").
			StatefulSet(fixture.NewStatefulSet(ns, "db", 2, appsv1.RollingUpdateStatefulSetStrategyType)).
			DaemonSet(fixture.NewDaemonSet(ns, "agent"))
		f.World.Cluster.Kubelet.KeepRunning(cluster.PodSelector{Namespace: ns, Labels: fixture.PodSelector(map[string]string{"app": "nightly"})})
		f.World.Cluster.Kubelet.KeepRunning(cluster.PodSelector{Namespace: ns, Labels: fixture.PodSelector(map[string]string{"app": "migrate"})})
		// Its schedule comes twelve hours from now: the scenario's one run is
		// the manual Job below. A fixed hour fired when the suite ran at it.
		in12h := time.Now().UTC().Add(12 * time.Hour)
		cj := fixture.NewCronJob(ns, "nightly", fmt.Sprintf("%d %d * * *", in12h.Minute(), in12h.Hour()))
		created, err := f.Client.BatchV1().CronJobs(ns).Create(f.Ctx, cj, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = f.Client.BatchV1().Jobs(ns).Create(f.Ctx, fixture.JobFromCronJob(created, "nightly-manual"), metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = f.Client.BatchV1().Jobs(ns).Create(f.Ctx, fixture.NewJob(ns, "migrate", 1, 1), metav1.CreateOptions{})
		require.NoError(t, err)
		bare := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: ns, Labels: map[string]string{"app": "debug"}},
			Spec: fixture.NewPodTemplate("debug").Spec}
		_, err = f.Client.CoreV1().Pods(ns).Create(f.Ctx, &bare, metav1.CreateOptions{})
		require.NoError(t, err)
		f.Given().RolledOut(ns)
		f.WaitForStatefulSetRolledOut(ns, "db")
		f.WaitForDaemonSetRolledOut(ns, "agent")
		f.Eventually("the Jobs' and the bare pod's proxies to run", func() (bool, string) {
			running := 0
			for _, app := range []string{"nightly", "migrate", "debug"} {
				for _, p := range f.Pods(ns, map[string]string{"app": app}) {
					if p.Status.Phase == corev1.PodRunning {
						running++
					}
				}
			}
			return running == 3, ""
		})

		out, code := runCLIExit(t, f, "holders", "1-25")
		assert.Equal(t, 3, code, "a proxy still runs on 1-25")
		assert.Equal(t, `revision 1-25: 10 pods in 6 workloads still run its proxy

NAMESPACE  OWNER            PODS  STATE   WHY
kinds      Deployment/web   2     cannot  namespace kinds has not opted in (no meshwave.io/target-revision): meshwave does not move this Deployment
kinds      StatefulSet/db   2     cannot  namespace kinds has not opted in (no meshwave.io/target-revision): meshwave does not move this StatefulSet
kinds      DaemonSet/agent  3     cannot  namespace kinds has not opted in (no meshwave.io/target-revision): meshwave does not move this DaemonSet
kinds      CronJob/nightly  1     cannot  meshwave never restarts a Job: this CronJob's running Job finishes on 1-25, and its next run starts on 1-25 again (istio.io/rev=1-25 on namespace kinds)
kinds      Job/migrate      1     cannot  meshwave never restarts a Job: this Job finishes on 1-25
kinds      Pod/debug        1     cannot  a bare Pod has no controller to create it again: it needs a person; created again now, it would run 1-25 again (istio.io/rev=1-25 on namespace kinds)
`, out)

		// Opted in but paused: the plan, one ordered plan of every kind.
		paused := "true"
		f.When().AnnotateNamespace(ns, canary.AnnotationPaused, &paused)
		optIn(f, ns, "1-26", 10)
		waitForPhase(f, ns, canary.PhasePaused, time.Minute)
		out, code = runCLIExit(t, f, "holders", "1-25")
		assert.Equal(t, 3, code)
		assert.Equal(t, `revision 1-25: 10 pods in 6 workloads still run its proxy

NAMESPACE  OWNER            PODS  STATE               WHY
kinds      Deployment/web   2     will move (wave 1)  meshwave moves this Deployment to 1-26 in wave 1, once namespace kinds resumes (meshwave.io/paused)
kinds      StatefulSet/db   2     will move (wave 2)  meshwave moves this StatefulSet to 1-26 in wave 2, once namespace kinds resumes (meshwave.io/paused)
kinds      DaemonSet/agent  3     will move (wave 2)  meshwave moves this DaemonSet to 1-26 in wave 2, once namespace kinds resumes (meshwave.io/paused)
kinds      CronJob/nightly  1     cannot              meshwave never restarts a Job: this CronJob's running Job finishes on 1-25, and its next run starts on 1-25 again (istio.io/rev=1-25 on namespace kinds)
kinds      Job/migrate      1     cannot              meshwave never restarts a Job: this Job finishes on 1-25
kinds      Pod/debug        1     cannot              a bare Pod has no controller to create it again: it needs a person; created again now, it would run 1-25 again (istio.io/rev=1-25 on namespace kinds)
`, out)

		f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
		st := waitForPhase(f, ns, canary.PhaseCompleted, 3*time.Minute)
		assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", st.Reason)
		assert.Equal(t, map[canary.Kind]canary.Counts{
			canary.KindDeployment:  {Total: 1, Moved: 1},
			canary.KindStatefulSet: {Total: 1, Moved: 1},
			canary.KindDaemonSet:   {Total: 1, Moved: 1},
		}, st.Kinds)
		assert.Equal(t, []canary.Exclusion{
			{Workload: "CronJob/nightly", Reason: "1 running pod carries a proxy of 1-25: meshwave never restarts a Job: the running one finishes where it started; the next run starts with istio.io/rev=1-26"},
			{Workload: "Job/migrate", Reason: "1 running pod carries a proxy of 1-25: meshwave never restarts a Job: it finishes where it started"},
			{Workload: "Pod/debug", Reason: "1 running pod carries a proxy of 1-25: a bare pod has no controller to create it again: it needs a person"},
		}, st.Unmovable, "the status accounts for what meshwave never restarts")
		f.Then().PodsOnRevision(ns, "web", "1-26")
		_, dbPods := f.WaitForStatefulSetRolledOut(ns, "db")
		f.Then().PodsInjectedBy("1-26", dbPods)
		_, agentPods := f.WaitForDaemonSetRolledOut(ns, "agent")
		f.Then().PodsInjectedBy("1-26", agentPods)
		var nodes []string
		for _, p := range agentPods {
			nodes = append(nodes, p.Spec.NodeName)
		}
		slices.Sort(nodes)
		assert.Equal(t, fakeNodes, nodes, "one pod on each node")
		// One write per moved workload, whatever its kind.
		assert.Equal(t, map[string]int{"PATCH deployments " + ns + "/web": 1}, counter.writes("PATCH deployments "+ns+"/"))
		assert.Equal(t, map[string]int{"PATCH statefulsets " + ns + "/db": 1}, counter.writes("PATCH statefulsets "+ns+"/"))
		assert.Equal(t, map[string]int{"PATCH daemonsets " + ns + "/agent": 1}, counter.writes("PATCH daemonsets "+ns+"/"))
		assert.Empty(t, counter.writes("POST pods "+ns+"/"), "no eviction of a rolling update")
		t.Logf("every kind, 2 waves: %d namespace writes", counter.get("PATCH namespaces "+ns))

		// What is left is what meshwave cannot move, each with its reason.
		out, code = runCLIExit(t, f, "holders", "1-25")
		assert.Equal(t, 3, code)
		assert.Equal(t, `revision 1-25: 3 pods in 3 workloads still run its proxy

NAMESPACE  OWNER            PODS  STATE   WHY
kinds      CronJob/nightly  1     cannot  meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts on 1-26 (istio.io/rev=1-26 on namespace kinds)
kinds      Job/migrate      1     cannot  meshwave never restarts a Job: this Job finishes on 1-25
kinds      Pod/debug        1     cannot  a bare Pod has no controller to create it again: it needs a person; created again now, it would run 1-26 (istio.io/rev=1-26 on namespace kinds)
`, out)

		// Once they are gone, the old revision holds nothing: the answer a
		// script waits for before it removes the old control plane.
		background := metav1.DeletePropagationBackground
		for _, job := range []string{"nightly-manual", "migrate"} {
			require.NoError(t, f.Client.BatchV1().Jobs(ns).Delete(f.Ctx, job, metav1.DeleteOptions{PropagationPolicy: &background}))
		}
		require.NoError(t, f.Client.CoreV1().Pods(ns).Delete(f.Ctx, "debug", metav1.DeleteOptions{}))
		f.Eventually("meshwave holders 1-25 to say it holds nothing", func() (bool, string) {
			out, code = runCLIExit(t, f, "holders", "1-25")
			return code == 0 && out == "revision 1-25 holds no pod\n", out
		})
	})

	t.Run("an OnDelete StatefulSet is replaced one pod at a time, highest ordinal first, within its budget", func(t *testing.T) {
		t.Parallel()
		const ns = "ondelete"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
			StatefulSet(fixture.NewStatefulSet(ns, "ledger", 3, appsv1.OnDeleteStatefulSetStrategyType)).
			PodDisruptionBudget(fixture.NewPodDisruptionBudget(ns, "ledger", 1))
		f.WaitForStatefulSetRolledOut(ns, "ledger")
		log := watchPods(t, f, ns, []string{"ledger-0", "ledger-1", "ledger-2"})
		optIn(f, ns, "1-26", 20)
		st := waitForPhase(f, ns, canary.PhaseCompleted, 3*time.Minute)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", st.Reason)
		_, pods := f.WaitForStatefulSetRolledOut(ns, "ledger")
		f.Then().PodsInjectedBy("1-26", pods)
		going, maxDown := log.result()
		assert.Equal(t, []string{"ledger-2", "ledger-1", "ledger-0"}, going, "evicted highest ordinal first, each once")
		assert.Equal(t, 1, maxDown, "never more than one pod down")
		assert.Equal(t, map[string]int{"PATCH statefulsets " + ns + "/ledger": 1}, counter.writes("PATCH statefulsets "+ns+"/"))
		t.Logf("OnDelete StatefulSet of 3: %d PATCH statefulsets, eviction requests %v, %d namespace writes",
			counter.get("PATCH statefulsets "+ns+"/ledger"), counter.writes("POST pods "+ns+"/"), counter.get("PATCH namespaces "+ns))
		for _, pod := range []string{"ledger-0", "ledger-1", "ledger-2"} {
			assert.GreaterOrEqual(t, counter.get("POST pods "+ns+"/"+pod), 1, "%s evicted through the Eviction API", pod)
			waitForEvent(f, "StatefulSet", ns, "ledger", "PodEvicted: evicting pod "+pod+" of statefulset ledger")
		}
	})

	t.Run("an OnDelete StatefulSet whose replaced pod never gets ready is evicted back to the source", func(t *testing.T) {
		t.Parallel()
		const ns = "ondelete-back"
		sts := fixture.NewStatefulSet(ns, "queue", 3, appsv1.OnDeleteStatefulSetStrategyType)
		sts.Annotations = map[string]string{canary.AnnotationReadinessTimeout: "5s"}
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).StatefulSet(sts).
			PodDisruptionBudget(fixture.NewPodDisruptionBudget(ns, "queue", 1))
		f.WaitForStatefulSetRolledOut(ns, "queue")
		release := holdNew(f, ns, "queue")
		log := watchPods(t, f, ns, []string{"queue-0", "queue-1", "queue-2"})
		optIn(f, ns, "1-26", 40)
		waitForPhase(f, ns, canary.PhaseRollingBack, 2*time.Minute)
		// The rollback may already have evicted the bad queue-2 by the
		// time its phase is read here; nothing else may have gone.
		going, _ := log.result()
		assert.Contains(t, [][]string{{"queue-2"}, {"queue-2", "queue-2"}}, going, "one pod replaced, and it never got ready: no second goes")
		// The rollback takes the pod of the bad template first: it serves
		// nothing.
		waitForEvent(f, "StatefulSet", ns, "queue", "PodEvicted: evicting pod queue-2 of statefulset queue (0 of 3 replaced): its updateStrategy is OnDelete, so it moves to 1-25")
		release()
		st := waitForPhase(f, ns, canary.PhaseRolledBack, 2*time.Minute)
		assert.True(t, strings.HasPrefix(st.Reason, "rolled back 1 workloads to 1-25: wave 1 failed: rollout fail: StatefulSet/queue did not roll out within 5s"), st.Reason)
		_, pods := f.WaitForStatefulSetRolledOut(ns, "queue")
		f.Then().PodsInjectedBy("1-25", pods)
		going, maxDown := log.result()
		// The rollback is a restart onto the source: every pod goes, the
		// bad template's first, then highest ordinal first.
		assert.Equal(t, []string{"queue-2", "queue-2", "queue-1", "queue-0"}, going, "the moved pod, then its bad replacement, then the rest, each once")
		assert.Equal(t, 1, maxDown, "never more than one pod down, back and forth")
		assert.Equal(t, 2, counter.get("PATCH statefulsets "+ns+"/queue"), "the move and its rollback")
	})

	t.Run("a StatefulSet whose new pod never gets ready fails its wave and rolls back", func(t *testing.T) {
		t.Parallel()
		const ns = "stuck"
		sts := fixture.NewStatefulSet(ns, "cache", 2, appsv1.RollingUpdateStatefulSetStrategyType)
		sts.Annotations = map[string]string{canary.AnnotationReadinessTimeout: "5s"}
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).StatefulSet(sts)
		f.WaitForStatefulSetRolledOut(ns, "cache")
		release := holdNew(f, ns, "cache")
		optIn(f, ns, "1-26", 30)
		waitForPhase(f, ns, canary.PhaseRollingBack, 2*time.Minute)
		// Its controller waits for the pod of the bad template before it
		// rolls anything back: meshwave evicts it.
		waitForEvent(f, "StatefulSet", ns, "cache", "PodEvicted: evicting pod cache-1 of statefulset cache: it never got ready")
		release()
		st := waitForPhase(f, ns, canary.PhaseRolledBack, 2*time.Minute)
		assert.True(t, strings.HasPrefix(st.Reason, "rolled back 1 workloads to 1-25: wave 1 failed: rollout fail: StatefulSet/cache did not roll out within 5s"), st.Reason)
		_, pods := f.WaitForStatefulSetRolledOut(ns, "cache")
		f.Then().PodsInjectedBy("1-25", pods)
		assert.Equal(t, 2, counter.get("PATCH statefulsets "+ns+"/cache"), "the move and its rollback")
	})

	t.Run("an OnDelete StatefulSet its budget holds fails its wave with a reason that names the budget", func(t *testing.T) {
		t.Parallel()
		f := f.For(t)
		const ns = "budget"
		sts := fixture.NewStatefulSet(ns, "db", 3, appsv1.OnDeleteStatefulSetStrategyType)
		sts.Annotations = map[string]string{canary.AnnotationReadinessTimeout: "10s"}
		pdb := fixture.NewPodDisruptionBudget(ns, "db", 0)
		pdb.Name = "db-pdb"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, map[string]string{canary.AnnotationFailurePolicy: string(canary.PolicyPause)}).
			StatefulSet(sts).PodDisruptionBudget(pdb)
		_, before := f.WaitForStatefulSetRolledOut(ns, "db")
		f.Eventually("budget db-pdb to allow no disruption of 3 healthy pods", func() (bool, string) {
			b, err := f.Client.PolicyV1().PodDisruptionBudgets(ns).Get(f.Ctx, "db-pdb", metav1.GetOptions{})
			require.NoError(t, err)
			s := b.Status
			return s.ObservedGeneration == b.Generation && s.DesiredHealthy == 3 && s.CurrentHealthy == 3 && s.DisruptionsAllowed == 0, fmt.Sprintf("%+v", s)
		})
		optIn(f, ns, "1-26", 50)
		st := waitForPhase(f, ns, canary.PhasePaused, 2*time.Minute)
		failure := "StatefulSet/db did not roll out within 10s: 0 of 3 replicas updated; PodDisruptionBudget db-pdb refused to evict pod db-2: " +
			"Cannot evict pod as it would violate the pod's disruption budget. The disruption budget db-pdb needs 3 healthy pods and has 3 currently (429 TooManyRequests)"
		require.Equal(t, "wave 1 failed: rollout fail: "+failure+"; paused by failure policy Pause", st.Reason)
		require.Len(t, st.Failures, 1)
		assert.Equal(t, failure, st.Failures[0].Reason)
		evs := eventsFor(f, "StatefulSet", ns, "db")
		assert.True(t, slices.ContainsFunc(evs, func(e string) bool {
			return strings.HasPrefix(e, "EvictionWaiting: pod db-2 waits for PodDisruptionBudget db-pdb to allow an eviction: Cannot evict pod")
		}), "%q", evs)
		assert.Equal(t, 1, counter.get("PATCH statefulsets "+ns+"/db"))
		assert.Equal(t, uids(before), uids(f.Pods(ns, map[string]string{"app": "db"})), "no pod went")
	})

	t.Run("a StatefulSet and a DaemonSet replaced whole from git mid-wave are reported and never restarted twice", func(t *testing.T) {
		t.Parallel()
		argo := map[string]string{"app": "db", canary.LabelArgoInstance: "shop"}
		sts := fixture.NewStatefulSet("healed-sts", "db", 2, appsv1.RollingUpdateStatefulSetStrategyType)
		sts.Labels = argo
		ds := fixture.NewDaemonSet("healed-ds", "db")
		ds.Labels = argo
		for _, tc := range []struct {
			ns, resource, kind, described string
			create                        func(*fixture.Fixture)
		}{
			{"healed-sts", "statefulsets", "StatefulSet", "statefulset db", func(f *fixture.Fixture) {
				f.Given().StatefulSet(sts)
				f.WaitForStatefulSetRolledOut("healed-sts", "db")
			}},
			{"healed-ds", "daemonsets", "DaemonSet", "daemonset db", func(f *fixture.Fixture) {
				f.Given().DaemonSet(ds)
				f.WaitForDaemonSetRolledOut("healed-ds", "db")
			}},
		} {
			t.Run(tc.kind, func(t *testing.T) {
				t.Parallel()
				f := f.For(t)
				f.Given().Namespace(tc.ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
				tc.create(f)
				// Its new pods never get ready: the wave stays in flight.
				release := holdNew(f, tc.ns, "db")
				t.Cleanup(release)
				optIn(f, tc.ns, "1-26", 50)
				var stamp string
				f.Eventually("the move's restart recorded in a ControllerRevision", func() (bool, string) {
					stamp = templateStamp(f, tc.resource, tc.ns, "db")
					return stamp != "" && revisionStamped(f, tc.ns, tc.kind, "db", stamp), stamp
				})
				// The agent's caches see the revision; then a self-heal
				// replaces the object from git, without meshwave's keys.
				time.Sleep(time.Second)
				replaceFromGit(f, tc.resource, tc.ns, "db")
				f.Eventually("a pause or a second restart", func() (bool, string) {
					st := status(f, tc.ns)
					if st == nil {
						return false, "no status"
					}
					return st.Phase == canary.PhasePaused || counter.get("PATCH "+tc.resource+" "+tc.ns+"/db") > 1, st.Reason
				})
				st := status(f, tc.ns)
				require.Equal(t, canary.PhasePaused, st.Phase, "%s restarted %d times", tc.described, counter.get("PATCH "+tc.resource+" "+tc.ns+"/db"))
				assert.Equal(t, "wave 1 paused: the move of "+tc.described+" was undone by Argo CD application shop", st.Reason)
				waitForEvent(f, tc.kind, tc.ns, "db", "TemplateReverted: "+tc.described+" was restarted in wave 1 (a ControllerRevision carries its stamp "+stamp+
					"), then Argo CD application shop put its template back and removed its meshwave.io/move record: meshwave does not restart it again on its own. "+
					"Add meshwave's keys to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option; then remove meshwave.io/paused to move it again, or set meshwave.io/skip on it")
				time.Sleep(2 * time.Second)
				assert.Equal(t, 1, counter.get("PATCH "+tc.resource+" "+tc.ns+"/db"), "restarted once, its replacement from git notwithstanding")
				assert.Equal(t, "", templateStamp(f, tc.resource, tc.ns, "db"), "the template stays as git has it")
			})
		}
	})
}

// runCLIExit runs the meshwave binary against the world and returns its
// stdout and exit code.
func runCLIExit(t *testing.T, f *fixture.Fixture, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(meshwaveCLI(t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+f.World.Cluster.Kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	require.NoError(t, err, "meshwave %v: %s", args, stderr.String())
	return string(out), 0
}

// templateStamp is the restart stamp of a StatefulSet's or DaemonSet's
// template, "" when it has none.
func templateStamp(f *fixture.Fixture, resource, ns, name string) string {
	f.T.Helper()
	var template corev1.PodTemplateSpec
	switch resource {
	case "statefulsets":
		s, err := f.Client.AppsV1().StatefulSets(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(f.T, err)
		template = s.Spec.Template
	default:
		d, err := f.Client.AppsV1().DaemonSets(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(f.T, err)
		template = d.Spec.Template
	}
	return template.Annotations[canary.AnnotationRestartedAt]
}

// revisionStamped reports whether a ControllerRevision of kind/name holds a
// template restarted at stamp.
func revisionStamped(f *fixture.Fixture, ns, kind, name, stamp string) bool {
	f.T.Helper()
	list, err := f.Client.AppsV1().ControllerRevisions(ns).List(f.Ctx, metav1.ListOptions{})
	require.NoError(f.T, err)
	for _, r := range list.Items {
		owner := metav1.GetControllerOf(&r)
		if owner == nil || owner.Kind != kind || owner.Name != name {
			continue
		}
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if json.Unmarshal(r.Data.Raw, &data) == nil && data.Spec.Template.Annotations[canary.AnnotationRestartedAt] == stamp {
			return true
		}
	}
	return false
}

// replaceFromGit stands in for a GitOps self-heal that replaces a
// StatefulSet or DaemonSet whole from git: its annotations and its
// template's as git has them, which is without any.
func replaceFromGit(f *fixture.Fixture, resource, ns, name string) {
	f.T.Helper()
	switch resource {
	case "statefulsets":
		s, err := f.Client.AppsV1().StatefulSets(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(f.T, err)
		s.Annotations, s.Spec.Template.Annotations = nil, nil
		_, err = f.Client.AppsV1().StatefulSets(ns).Update(f.Ctx, s, metav1.UpdateOptions{FieldManager: "argocd-controller"})
		require.NoError(f.T, err)
	default:
		d, err := f.Client.AppsV1().DaemonSets(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(f.T, err)
		d.Annotations, d.Spec.Template.Annotations = nil, nil
		_, err = f.Client.AppsV1().DaemonSets(ns).Update(f.Ctx, d, metav1.UpdateOptions{FieldManager: "argocd-controller"})
		require.NoError(f.T, err)
	}
}
