package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestStateIntegrity plays the ways a migration's own state can be damaged
// or refused, one namespace each on one world, each with an agent of its
// own, and checks the promises hold: no Deployment restarted twice for one
// move, no wave skipped, the label where the migration needs it, and a
// refused write reported with the apiserver's answer.
func TestStateIntegrity(t *testing.T) {
	shared := fixture.New(t, world.Options{NoPrometheus: true})

	t.Run("an admission policy that refuses the restart fails the wave with its answer", func(t *testing.T) {
		f := shared.For(t)
		for _, tc := range []struct {
			ns, reason string
			code       int
		}{
			{"refused-403", "Forbidden", 403},
			{"refused-422", "", 422},
		} {
			f.Given().Namespace(tc.ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
				Deployment(tc.ns, "api", fixture.Replicas(1)).Deployment(tc.ns, "web", fixture.Replicas(1)).RolledOut(tc.ns)
			denyRestarts(f, tc.ns, tc.reason)
			counter := newAPICounter()
			optIn(f, tc.ns, "1-26", 10)
			a := startAgent(t, f, testConfig(f), counter, "agent-"+tc.ns)
			st := waitForPhase(f, tc.ns, canary.PhaseRolledBack, time.Minute)
			answer := fmt.Sprintf(`deployments.apps "api" is forbidden: ValidatingAdmissionPolicy 'deny-restarts-%s' with binding 'deny-restarts-%s' denied request: restarts are frozen in %s`, tc.ns, tc.ns, tc.ns)
			assert.Regexp(t, `^rolled back 0 workloads to 1-25 \(none of this migration's workloads is left to return\): wave 1 failed: restart fail: the apiserver refused to restart api: `+
				regexp.QuoteMeta(answer)+fmt.Sprintf(` \(%d `, tc.code), st.Reason)
			require.Len(t, st.Failures, 1)
			assert.Equal(t, "api", st.Failures[0].Workload)
			assert.Equal(t, "restart", st.Failures[0].Gate)
			waitForEvent(f, "Deployment", tc.ns, "api", "RestartRefused: the apiserver refused the move patch: "+answer)
			a.Kill()
			assert.Equal(t, "1-25", namespaceLabel(f, tc.ns), "the label is back on the source")
			assert.Equal(t, 1, counter.get("PATCH deployments "+tc.ns+"/api"), "the refused patch is not retried")
			assert.Zero(t, counter.get("PATCH deployments "+tc.ns+"/web"))
			f.Then().PodsOnRevision(tc.ns, "api", "1-25")
		}
	})

	t.Run("a lost status is rebuilt from the move records and nothing restarts twice", func(t *testing.T) {
		f := shared.For(t)
		const ns = "lost"
		threeWorkloads(f, ns)
		release := holdNew(f, ns, "b")
		counter := newAPICounter()
		cfg := testConfig(f)
		cfg.BatchSize = 2
		optIn(f, ns, "1-26", 10)
		startAgent(t, f, cfg, counter, "agent-"+ns)
		waitForMove(f, ns, "c", 2)
		f.When().AnnotateNamespace(ns, canary.AnnotationStatus, nil)
		waitForEvent(f, "Namespace", "", ns, "StatusAdopted: the namespace has no status; continuing migration")
		st := status(f, ns)
		require.NotNil(t, st)
		assert.Equal(t, 2, st.Wave)
		assert.Equal(t, canary.WaveVerifying, st.WaveState)
		release()
		st = waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", st.Reason)
		assert.Equal(t, map[string]int{"PATCH deployments lost/a": 1, "PATCH deployments lost/b": 1, "PATCH deployments lost/c": 1},
			counter.writes("PATCH deployments"))
	})

	t.Run("an edited start time or a regressed status does not skip a wave or restart one twice", func(t *testing.T) {
		f := shared.For(t)
		const ns = "edited"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
			Deployment(ns, "a", fixture.Replicas(1)).Deployment(ns, "b", fixture.Replicas(1)).RolledOut(ns)
		release := holdNew(f, ns, "b")
		counter := newAPICounter()
		optIn(f, ns, "1-26", 10)
		startAgent(t, f, testConfig(f), counter, "agent-"+ns)
		waitForMove(f, ns, "b", 2)
		editStatus(f, ns, func(m map[string]any) { m["startedAt"] = "2030-01-01T00:00:00Z" })
		waitForEvent(f, "Namespace", "", ns, "StatusAdopted: the status disagrees with the Deployments' move records: the move records show moves of migration ")
		// The status regresses to wave 1, passed: b's move, recorded in wave
		// 2, is judged as the next wave, without a second restart.
		editStatus(f, ns, func(m map[string]any) {
			m["wave"], m["waveState"], m["workloads"] = 1, "Passed", []any{map[string]any{"name": "a", "state": "Moved"}}
		})
		f.Eventually("b's recorded move to be judged as wave 2", func() (bool, string) {
			st := status(f, ns)
			return st != nil && st.Wave == 2 && st.WaveState == canary.WaveVerifying && len(st.Workloads) == 1 && st.Workloads[0].Name == "b",
				fmt.Sprintf("%+v", st)
		})
		assert.NotEqual(t, canary.PhaseCompleted, status(f, ns).Phase, "b's wave has not passed: b is still unready")
		release()
		waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, map[string]int{"PATCH deployments edited/a": 1, "PATCH deployments edited/b": 1}, counter.writes("PATCH deployments"))
	})

	t.Run("an unreadable status is rebuilt once, with an Event", func(t *testing.T) {
		f := shared.For(t)
		const ns = "unreadable"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "a", fixture.Replicas(1)).RolledOut(ns)
		counter := newAPICounter()
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, testConfig(f), counter, "agent-"+ns)
		waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		garbage := `{"phase":"Completed","Wave":3}`
		f.When().AnnotateNamespace(ns, canary.AnnotationStatus, &garbage)
		waitForEvent(f, "Namespace", "", ns, `StatusUnreadable: meshwave.io/status is not meshwave's status JSON: unknown field "Wave"`)
		st := waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", st.Reason)
		before := counter.get("PATCH namespaces " + ns)
		time.Sleep(2 * time.Second)
		a.Kill()
		assert.Equal(t, before, counter.get("PATCH namespaces "+ns), "a rebuilt status settles: no busy loop")
		assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/a"))
	})

	t.Run("an ended status restored over a newer migration holds its slot", func(t *testing.T) {
		f := shared.For(t)
		const ns, other = "restored", "restored-waits"
		threeWorkloads(f, ns)
		f.Given().Namespace(other, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(other, "x", fixture.Replicas(1)).RolledOut(other)
		release := holdNew(f, ns, "b")
		counter := newAPICounter()
		cfg := testConfig(f)
		cfg.BatchSize = 2
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, cfg, counter, "agent-"+ns)
		waitForMove(f, ns, "c", 2)
		a.Kill()
		started := *status(f, ns).StartedAt
		// A stale copy of the namespace is applied again: its status says a
		// migration to the same target completed a day ago. Then another
		// namespace opts in, and an agent starts on both at once.
		before := started.Add(-24 * time.Hour)
		editStatus(f, ns, func(m map[string]any) {
			for _, k := range []string{"waveState", "gatesSince", "nextWaveAt", "verdicts"} {
				delete(m, k)
			}
			m["phase"], m["reason"] = "Completed", "moved 3 workloads to 1-26 in 2 waves"
			m["startedAt"], m["waveStartedAt"] = before.Format(time.RFC3339), before.Format(time.RFC3339)
			m["completedAt"] = before.Add(10 * time.Minute).Format(time.RFC3339)
		})
		optIn(f, other, "1-26", 20)
		startAgent(t, f, cfg, counter, "agent-"+ns+"-again")
		waitForEvent(f, "Namespace", "", ns, "StatusAdopted: the status disagrees with the Deployments' move records: the move records show migration "+canary.MigrationID("1-26", started)+", newer than the status's")
		st := waitForPhase(f, other, canary.PhasePending, time.Minute)
		assert.Equal(t, "waiting for a free slot: 1 of 1 in use by "+ns, st.Reason)
		assert.Zero(t, counter.get("PATCH deployments "+other+"/x"), ns+" is half-way: "+other+" must wait")
		release()
		done := waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, canary.MigrationID("1-26", started), done.MigrationID(), "the migration on record was continued")
		st = waitForPhase(f, other, canary.PhaseCompleted, time.Minute)
		assert.False(t, st.StartedAt.Before(*done.CompletedAt), "%s started at %s, before %s completed at %s (concurrency 1)", other, st.StartedAt, ns, done.CompletedAt)
		assert.Equal(t, map[string]int{"PATCH deployments restored/a": 1, "PATCH deployments restored/b": 1, "PATCH deployments restored/c": 1,
			"PATCH deployments restored-waits/x": 1}, counter.writes("PATCH deployments"))
	})

	t.Run("a new target set with a rollback asked rolls back first", func(t *testing.T) {
		f := shared.For(t)
		const ns = "retarget"
		threeWorkloads(f, ns)
		require.NoError(t, f.World.Mesh.InstallRevision(f.Ctx, mesh.Revision{Name: "1-27"}))
		release := holdNew(f, ns, "b")
		counter := newAPICounter()
		cfg := testConfig(f)
		cfg.BatchSize = 2
		optIn(f, ns, "1-26", 10)
		startAgent(t, f, cfg, counter, "agent-"+ns)
		defer func() {
			if t.Failed() {
				t.Logf("events:\n%s", strings.Join(eventsFor(f, "Namespace", "", ns), "\n"))
				for _, w := range []string{"a", "b", "c"} {
					t.Logf("%s: %s", w, strings.Join(eventsFor(f, "Deployment", ns, w), "\n"))
				}
			}
		}()
		waitForMove(f, ns, "c", 2)
		phases := watchPhases(t, f, ns)
		// b's new pod never gets ready: a person asks for a rollback and
		// names another target in the same edit.
		_, err := f.Client.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"meshwave.io/target-revision":"1-27","meshwave.io/rollback":"all"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		waitForEvent(f, "Namespace", "", ns, "TargetChangedDuringRollback: 1-27 is now the target; the rollback of the migration to 1-26 finishes first")
		release()
		waitForEvent(f, "Namespace", "", ns, "RolledBack: rolled back 3 workloads to 1-25")
		st := waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
		assert.Equal(t, "1-27", st.Target)
		assert.Equal(t, "1-27", st.TargetRevision)
		assert.Equal(t, "1-25", st.SourceRevision, "the next migration starts from where the namespace came from")
		assert.Equal(t, "moved 3 workloads to 1-27 in 2 waves", st.Reason)
		assert.NotContains(t, strings.Join(eventsFor(f, "Namespace", "", ns), "\n"), "RollbackIgnored")
		// The statuses in the order they were written: the old migration
		// rolled back to its end before the new target's began.
		seen := phases()
		rolledBack := slices.Index(seen, "1-26 RolledBack")
		first := slices.IndexFunc(seen, func(p string) bool { return strings.HasPrefix(p, "1-27 ") })
		require.GreaterOrEqual(t, rolledBack, 0, "%v", seen)
		require.GreaterOrEqual(t, first, 0, "%v", seen)
		assert.Less(t, rolledBack, first, "%v", seen)
		for _, p := range seen[:first] {
			assert.Contains(t, []string{"1-26 Migrating", "1-26 Analyzing", "1-26 RollingBack", "1-26 RolledBack"}, p, "%v", seen)
		}
		// Each moved, returned, and moved again: three template changes,
		// nothing more (a patch refused on a conflict changes nothing).
		assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, restarts(f, ns, "a", "b", "c"))
		for _, w := range []string{"a", "b", "c"} {
			r, ok := moveRecord(f, ns, w)
			require.True(t, ok, w)
			assert.Equal(t, st.MigrationID(), r.Migration, "%s was moved by the new migration", w)
			assert.False(t, r.Rollback, w)
		}
		f.Then().PodsOnRevision(ns, "b", "1-27")
	})

	t.Run("the revision label is put back while meshwave owns the namespace", func(t *testing.T) {
		f := shared.For(t)
		const ns = "relabel"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "a", fixture.Replicas(1)).RolledOut(ns)
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, testConfig(f), newAPICounter(), "agent-"+ns)
		waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		_, err := f.Client.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":null}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		f.Eventually("istio.io/rev back on "+ns, func() (bool, string) {
			v := namespaceLabel(f, ns)
			return v == "1-26", v
		})
		a.Kill()
	})

	t.Run("a DaemonSet's missed patch is sent again beside a Deployment of its name, not taken for a revert", func(t *testing.T) {
		f := shared.For(t)
		const ns = "twins"
		ds := fixture.NewDaemonSet(ns, "web")
		ds.Spec.Selector.MatchLabels = map[string]string{"app": "web-agent"}
		ds.Spec.Template.Labels = map[string]string{"app": "web-agent"}
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "web", fixture.Replicas(1)).DaemonSet(ds).RolledOut(ns)
		f.WaitForDaemonSetRolledOut(ns, "web")
		cfg := testConfig(f)
		cfg.CanarySize = 2
		log := &writeLog{}
		var conflicts atomic.Int32
		var rolledOutAt atomic.Int64
		optIn(f, ns, "1-26", 10)
		r := startReplica(t, f, cfg, "agent-"+ns, log, withLink(func(l *link) {
			// The DaemonSet's patch meets a conflict until the Deployment of
			// its name has rolled the wave's restart out in a ReplicaSet,
			// and a second more, for the agent's caches to see it.
			l.intercept = func(req *http.Request, obj string) *http.Response {
				if req.Method != http.MethodPatch || obj != "daemonsets "+ns+"/web" {
					return nil
				}
				if rolledOutAt.Load() == 0 && restartRolledOut(f, ns, "web") {
					rolledOutAt.Store(time.Now().UnixNano())
				}
				if at := rolledOutAt.Load(); at == 0 || time.Since(time.Unix(0, at)) < time.Second {
					conflicts.Add(1)
					return apiError(http.StatusConflict, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
				}
				return nil
			}
		}))
		st := waitForPhaseOrPause(f, ns, canary.PhaseCompleted, 2*time.Minute)
		r.stop()
		require.Equal(t, canary.PhaseCompleted, st.Phase, st.Reason)
		assert.Equal(t, "moved 2 workloads to 1-26 in 1 waves", st.Reason)
		assert.Positive(t, conflicts.Load(), "the DaemonSet's patch met a conflict")
		// Restarts are counted where they happen, by the generation each
		// template change bumps: a write log misses a patch that landed
		// but whose answer did not come back.
		dep, err := f.Client.AppsV1().Deployments(ns).Get(f.Ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		daemons, err := f.Client.AppsV1().DaemonSets(ns).Get(f.Ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, int64(2), dep.Generation, "the Deployment restarted once")
		assert.Equal(t, int64(2), daemons.Generation, "the DaemonSet restarted once: its patch that met the conflict changed nothing")
		assert.LessOrEqual(t, log.patches("deployments " + ns + "/")["deployments "+ns+"/web"], 1)
		assert.Equal(t, map[string]int{"daemonsets " + ns + "/web": 1}, log.patches("daemonsets "+ns+"/"))
		for _, e := range eventsFor(f, "DaemonSet", ns, "web") {
			assert.False(t, strings.HasPrefix(e, "TemplateReverted: "), e)
		}
		_, pods := f.WaitForDaemonSetRolledOut(ns, "web")
		f.Then().PodsInjectedBy("1-26", pods)
		t.Logf("%d conflicts answered", conflicts.Load())
	})

	t.Run("a ReplicaSet that names a Deployment it does not belong to holds none of its rollout", func(t *testing.T) {
		f := shared.For(t)
		const ns = "impostor"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
			Deployment(ns, "api", fixture.Replicas(1), fixture.Annotations(map[string]string{canary.AnnotationReadinessTimeout: "20s"})).RolledOut(ns)
		// Its controller reference names a Deployment api of another API,
		// which the garbage collector cannot resolve and leaves alone; its
		// pod runs the source's proxy, of no template of api's.
		template := fixture.NewPodTemplate("impostor")
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "api-impostor", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "example.com/v1", Kind: "Deployment", Name: "api", UID: "7d0c4a4e-1b2f-4c1e-9d7a-2f3b5c6d7e8f", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "impostor"}}, Template: template},
		}
		_, err := f.Client.AppsV1().ReplicaSets(ns).Create(f.Ctx, rs, metav1.CreateOptions{})
		require.NoError(t, err)
		f.Eventually("the impostor's pod to run", func() (bool, string) {
			pods := f.Pods(ns, map[string]string{"app": "impostor"})
			return len(pods) == 1 && fixture.PodReady(pods[0]), fmt.Sprint(len(pods))
		})
		counter := newAPICounter()
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, testConfig(f), counter, "agent-"+ns)
		st := waitForPhaseOrPause(f, ns, canary.PhaseCompleted, time.Minute, canary.PhaseRollingBack, canary.PhaseRolledBack)
		a.Kill()
		require.Equal(t, canary.PhaseCompleted, st.Phase, st.Reason)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", st.Reason)
		assert.Equal(t, []canary.Exclusion{{Workload: "ReplicaSet/api-impostor",
			Reason: "1 running pod carries a proxy of 1-25: no Deployment owns this ReplicaSet, so nothing restarts its pods: it needs a person"}}, st.Unmovable)
		assert.Equal(t, 1, counter.get("PATCH deployments "+ns+"/api"))
		f.Then().PodsOnRevision(ns, "api", "1-26")
		_, err = f.Client.AppsV1().ReplicaSets(ns).Get(f.Ctx, "api-impostor", metav1.GetOptions{})
		require.NoError(t, err, "the impostor stayed all along")
	})
}

// denyRestarts installs a ValidatingAdmissionPolicy that refuses any change
// to the restart stamp of Deployment api in ns, answering with reason
// (Invalid, 422, when empty; Forbidden is 403).
func denyRestarts(f *fixture.Fixture, ns, reason string) {
	f.T.Helper()
	name := "deny-restarts-" + ns
	v := admissionregv1.Validation{
		Expression: `object.metadata.name != 'api' || !has(object.spec.template.metadata.annotations) || !('kubectl.kubernetes.io/restartedAt' in object.spec.template.metadata.annotations) || (has(oldObject.spec.template.metadata.annotations) && 'kubectl.kubernetes.io/restartedAt' in oldObject.spec.template.metadata.annotations && oldObject.spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt'] == object.spec.template.metadata.annotations['kubectl.kubernetes.io/restartedAt'])`,
		Message:    "restarts are frozen in " + ns,
	}
	if reason != "" {
		v.Reason = ptr.To(metav1.StatusReason(reason))
	}
	_, err := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(f.Ctx, &admissionregv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregv1.Fail),
			MatchConstraints: &admissionregv1.MatchResources{ResourceRules: []admissionregv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregv1.RuleWithOperations{
					Operations: []admissionregv1.OperationType{admissionregv1.Update},
					Rule:       admissionregv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			Validations: []admissionregv1.Validation{v},
		},
	}, metav1.CreateOptions{})
	require.NoError(f.T, err)
	_, err = f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(f.Ctx, &admissionregv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregv1.ValidationAction{admissionregv1.Deny},
			MatchResources: &admissionregv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(f.T, err)
	// A new policy is enforced once the apiserver has loaded it: wait until
	// a dry run of a restart is refused.
	f.Eventually("the policy to refuse a restart of "+ns+"/api", func() (bool, string) {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, canary.AnnotationRestartedAt, time.Now().Format(time.RFC3339Nano))
		_, err := f.Client.AppsV1().Deployments(ns).Patch(f.Ctx, "api", types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, fmt.Sprint(err)
	})
}

// waitForPhaseOrPause waits until the namespace's status reaches phase, or
// is Paused or in one of the phases also given, and returns it: a
// scenario that must not pause fails at once rather than at its timeout.
func waitForPhaseOrPause(f *fixture.Fixture, ns string, phase canary.Phase, timeout time.Duration, also ...canary.Phase) *canary.Status {
	f.T.Helper()
	var st *canary.Status
	f.EventuallyWithin(fmt.Sprintf("namespace %s to be %s (or %s, %v)", ns, phase, canary.PhasePaused, also), timeout, func() (bool, string) {
		st = status(f, ns)
		if st == nil {
			return false, "no status"
		}
		return st.Phase == phase || st.Phase == canary.PhasePaused || slices.Contains(also, st.Phase),
			fmt.Sprintf("phase %s, wave %d/%d, reason %q", st.Phase, st.Wave, st.TotalWaves, st.Reason)
	})
	return st
}

// restartRolledOut reports whether a ReplicaSet of the Deployment carries
// a restart stamp in its template: its controller rolled a restart out.
func restartRolledOut(f *fixture.Fixture, ns, deployment string) bool {
	list, err := f.Client.AppsV1().ReplicaSets(ns).List(f.Ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, rs := range list.Items {
		if owner := metav1.GetControllerOf(&rs); owner != nil && owner.Kind == "Deployment" && owner.Name == deployment &&
			rs.Spec.Template.Annotations[canary.AnnotationRestartedAt] != "" {
			return true
		}
	}
	return false
}

// editStatus rewrites a namespace's status JSON as a person would.
func editStatus(f *fixture.Fixture, ns string, edit func(map[string]any)) {
	f.T.Helper()
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(f.T, err)
	var m map[string]any
	require.NoError(f.T, json.Unmarshal([]byte(n.Annotations[canary.AnnotationStatus]), &m))
	edit(m)
	raw, err := json.Marshal(m)
	require.NoError(f.T, err)
	s := string(raw)
	f.When().AnnotateNamespace(ns, canary.AnnotationStatus, &s)
}

func namespaceLabel(f *fixture.Fixture, ns string) string {
	f.T.Helper()
	n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
	require.NoError(f.T, err)
	return n.Labels[mesh.LabelRev]
}
