package canary

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holderPodsOf are the pods of ws injected by rev, as the agent resolves
// them: each owned by its workload.
func holderPodsOf(rev string, ws ...Workload) []HolderPod {
	var out []HolderPod
	for _, w := range ws {
		for _, p := range w.Pods {
			if p.Revision != rev {
				continue
			}
			phase := "Running"
			if !p.Running {
				phase = "Pending"
			}
			out = append(out, HolderPod{Namespace: w.Namespace, Name: p.Name, Owner: Owner{Kind: string(w.KindOf()), Name: w.ObjectName()},
				Phase: phase, Terminating: p.Terminating})
		}
	}
	return out
}

// holdersIn classifies the holders of rev in namespace shop as s and st
// describe it, planned by PlanWaves with canary 1 and batches of 2, plus
// the extra pods.
func holdersIn(rev string, s Snapshot, st *Status, extra ...HolderPod) Holders {
	plans := PlanWaves([]PlanInput{{Snapshot: s, Status: st}}, WaveSizes{CanarySize: 1, BatchSize: 2})
	return ClassifyHolders(HoldersInput{
		Revision: rev,
		Pods:     append(holderPodsOf(rev, s.Workloads...), extra...),
		Namespaces: map[string]HolderNamespace{
			s.Namespace.Name: {Name: s.Namespace.Name, Labels: s.Namespace.Labels, Plan: &plans[0]},
		},
		Mesh: s.Mesh,
	})
}

func statefulSet(name string, opts ...wopt) Workload {
	w := deploy(name, opts...)
	w.Kind, w.Name = KindStatefulSet, WorkloadID(KindStatefulSet, name)
	for i := range w.Pods {
		w.Pods[i].Name = fmt.Sprintf("%s-%d", name, i)
	}
	return w
}

func migratingWave1(moving ...string) *Status {
	start := t0
	st := &Status{Phase: PhaseMigrating, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 3, WaveState: WaveVerifying, StartedAt: &start, WaveStartedAt: &start, GatesSince: &start}
	for _, m := range moving {
		st.Workloads = append(st.Workloads, WorkloadState{Name: m, State: StateMoving})
	}
	return st
}

// brief is a holder without its pods' names, for tables.
type brief struct {
	Kind, Name string
	State      HolderState
	Wave       int
	Code       HolderReason
	Reason     string
	Pods       int
}

func briefs(hs []Holder) []brief {
	out := []brief{}
	for _, h := range hs {
		out = append(out, brief{h.Kind, h.Name, h.State, h.Wave, h.Code, h.Reason, len(h.Pods)})
	}
	return out
}

func TestHoldersOfAMigrationUnderWaySayWhatMovesWhenAndWhatNever(t *testing.T) {
	s := snap(
		deploy("cart", waveAnn("0")),
		deploy("checkout"), deploy("orders"), deploy("search"),
		deploy("ingress", label("istio", "ingressgateway")),
		deploy("legacy", ann(AnnotationSkip, "true")),
		deploy("frozen", func(w *Workload) { w.Paused = true }),
		statefulSet("db", waveAnn("200")),
	)
	h := holdersIn("1-25", s, migratingWave1("cart"))

	assert.Equal(t, []brief{
		{"Deployment", "cart", HolderMoving, 1, ReasonMoving, "this Deployment is in wave 1 to 1-26, in flight", 2},
		{"Deployment", "checkout", HolderWillMove, 2, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 2", 2},
		{"Deployment", "frozen", HolderCannot, 0, ReasonWorkloadPaused, "the plan leaves this Deployment out: paused (spec.paused): a restart would not roll out", 2},
		{"Deployment", "ingress", HolderCannot, 0, ReasonGateway, "the plan leaves this Deployment out: gateway (istio=ingressgateway)", 2},
		{"Deployment", "legacy", HolderCannot, 0, ReasonSkip, "the plan leaves this Deployment out: meshwave.io/skip is true", 2},
		{"Deployment", "orders", HolderWillMove, 2, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 2", 2},
		{"Deployment", "search", HolderWillMove, 3, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 3", 2},
		{"StatefulSet", "db", HolderWillMove, 4, ReasonWillMove, "meshwave moves this StatefulSet to 1-26 in wave 4", 2},
	}, briefs(h.Holders))
	assert.Equal(t, []string{"cart-abc-0", "cart-abc-1"}, h.Holders[0].Pods)
	assert.Equal(t, []string{"db-0", "db-1"}, h.Holders[7].Pods)
	assert.Equal(t, 16, h.Pods)
	assert.Empty(t, h.Finished)
	assert.Equal(t, map[HolderReason]int{ReasonMoving: 2, ReasonWillMove: 8, ReasonWorkloadPaused: 2, ReasonGateway: 2, ReasonSkip: 2}, h.PodsByReason())
}

func TestBeforeTheFirstWaveTheCanaryIsWaveOne(t *testing.T) {
	h := holdersIn("1-25", snap(deploy("cart"), deploy("orders")), nil)
	assert.Equal(t, []brief{
		{"Deployment", "cart", HolderWillMove, 1, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 1", 2},
		{"Deployment", "orders", HolderWillMove, 2, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 2", 2},
	}, briefs(h.Holders))
}

func TestAPausedNamespaceMovesTheRestOnceResumed(t *testing.T) {
	st := migratingWave1()
	st.Phase, st.WaveState = PhasePaused, WavePassed
	st.Workloads = []WorkloadState{{Name: "cart", State: StateMoved}}
	h := holdersIn("1-25", snap(deploy("cart", waveAnn("0")), deploy("orders")), st)
	assert.Equal(t, []brief{
		{"Deployment", "cart", HolderCannot, 0, ReasonMoved, "this Deployment was moved to 1-26, yet these pods were not replaced", 2},
		{"Deployment", "orders", HolderWillMove, 2, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 2, once namespace shop resumes (meshwave.io/paused)", 2},
	}, briefs(h.Holders))
}

func TestTheWaveInFlightAndItsOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Status)
		state HolderState
		code  HolderReason
		why   string
	}{
		{"a member of a failed wave waits for a person", func(st *Status) { st.Phase, st.WaveState = PhasePaused, WaveFailed },
			HolderCannot, ReasonFailedWave, "this Deployment is in wave 1 to 1-26, which failed: namespace shop is paused until a person resumes it or rolls it back"},
		{"a member that failed under Continue stays", func(st *Status) { st.Workloads[0].State = StateFailed },
			HolderCannot, ReasonFailedWave, "this Deployment failed its wave 1 to 1-26 and stays where it is"},
		{"a member skipped out of the wave", func(st *Status) { st.Workloads[0].State = StateSkipped },
			HolderCannot, ReasonSkip, "this Deployment was taken out of wave 1 (meshwave.io/skip)"},
		{"a rollback to the source keeps it there", func(st *Status) {
			st.Phase, st.WaveState, st.Rollback = PhaseRollingBack, WaveRollingBack, RollbackWave
		},
			HolderCannot, ReasonRollingBack, "namespace shop is rolling back to 1-25"},
		{"a blocked namespace moves nothing", func(st *Status) {
			st.Phase, st.BlockedPhase, st.BlockedKind = PhaseBlocked, PhaseMigrating, BlockedPrecheck
			st.Reason = "precheck failed: no Ready istiod for 1-26"
		}, HolderCannot, ReasonNamespaceBlocked, "namespace shop is blocked, so meshwave does not move this Deployment: precheck failed: no Ready istiod for 1-26"},
		{"a completed migration moves nothing more", func(st *Status) { st.Phase, st.WaveState, st.Workloads = PhaseCompleted, "", nil },
			HolderCannot, ReasonMigrationEnded, "the migration of namespace shop to 1-26 is Completed: nothing moves this Deployment until meshwave.io/target-revision is set again"},
		{"a rolled back migration moves nothing more", func(st *Status) { st.Phase, st.WaveState, st.Workloads = PhaseRolledBack, "", nil },
			HolderCannot, ReasonMigrationEnded, "the migration of namespace shop to 1-26 is RolledBack: nothing moves this Deployment until meshwave.io/target-revision is set again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := migratingWave1("cart")
			tc.edit(st)
			s := snap(deploy("cart"))
			if st.Phase == PhaseCompleted {
				// A completed migration left the namespace on its target.
				s.Namespace.Labels[LabelRev] = "1-26"
			}
			h := holdersIn("1-25", s, st)
			require.Len(t, h.Holders, 1)
			assert.Equal(t, brief{"Deployment", "cart", tc.state, 0, tc.code, tc.why, 2}, briefs(h.Holders)[0])
		})
	}
}

func TestDuringARollbackTheTargetsPodsAreMoving(t *testing.T) {
	st := migratingWave1("cart")
	st.Phase, st.WaveState, st.Rollback = PhaseRollingBack, WaveRollingBack, RollbackWave
	h := holdersIn("1-26", snap(deploy("cart", onRevision("1-26"))), st)
	assert.Equal(t, []brief{{"Deployment", "cart", HolderMoving, 0, ReasonRollingBack, "namespace shop is rolling back to 1-25", 2}}, briefs(h.Holders))
}

func TestPlanListsOfFailedAndMovedWorkloads(t *testing.T) {
	plan := NamespacePlan{Namespace: "shop", Target: "1-26", TargetRevision: "1-26", Moved: []string{"cart"}, Failed: []string{"orders"}}
	h := ClassifyHolders(HoldersInput{Revision: "1-25",
		Pods:       holderPodsOf("1-25", deploy("cart"), deploy("orders")),
		Namespaces: map[string]HolderNamespace{"shop": {Name: "shop", Plan: &plan}},
	})
	assert.Equal(t, []brief{
		{"Deployment", "cart", HolderCannot, 0, ReasonMoved, "this Deployment was moved to 1-26, yet these pods were not replaced", 2},
		{"Deployment", "orders", HolderCannot, 0, ReasonFailedWave, "this Deployment failed its wave to 1-26 and stays where it is (failure policy Continue)", 2},
	}, briefs(h.Holders))
}

func TestNamespacesThatDoNotMoveOffTheRevision(t *testing.T) {
	t.Run("one that has not opted in", func(t *testing.T) {
		w := deploy("billing")
		w.Namespace = "legacy"
		h := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: holderPodsOf("1-25", w, statefulSet("db"))})
		assert.Equal(t, []brief{
			{"Deployment", "billing", HolderCannot, 0, ReasonNotOptedIn, "namespace legacy has not opted in (no meshwave.io/target-revision): meshwave does not move this Deployment", 2},
			{"StatefulSet", "db", HolderCannot, 0, ReasonNotOptedIn, "namespace shop has not opted in (no meshwave.io/target-revision): meshwave does not move this StatefulSet", 2},
		}, briefs(h.Holders))
	})
	t.Run("one that targets the revision itself, through a tag", func(t *testing.T) {
		s := snap(deploy("cart", onRevision("1-26")))
		s.Namespace.Annotations[AnnotationTargetRevision] = "canary"
		h := holdersIn("1-26", s, nil)
		assert.Equal(t, []brief{{"Deployment", "cart", HolderCannot, 0, ReasonTargetsRevision, "namespace shop targets 1-26 itself: this Deployment stays on it", 2}}, briefs(h.Holders))
	})
	t.Run("one whose target resolves to nothing", func(t *testing.T) {
		s := snap(deploy("cart"))
		s.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
		h := holdersIn("1-25", s, nil)
		assert.Equal(t, []brief{{"Deployment", "cart", HolderCannot, 0, ReasonNamespaceBlocked,
			"namespace shop is blocked, so meshwave does not move this Deployment: meshwave.io/target-revision on namespace shop: \"1-27\" is not an installed revision or tag (no MutatingWebhookConfiguration istio-sidecar-injector-1-27 or istio-revision-tag-1-27 exists)", 2}}, briefs(h.Holders))
	})
	t.Run("one whose own plan does not name the workload", func(t *testing.T) {
		plan := NamespacePlan{Namespace: "shop", Target: "1-26", TargetRevision: "1-26"}
		h := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: holderPodsOf("1-25", deploy("cart")),
			Namespaces: map[string]HolderNamespace{"shop": {Name: "shop", Plan: &plan}}})
		assert.Equal(t, []brief{{"Deployment", "cart", HolderCannot, 0, ReasonNotPlanned, "the plan of namespace shop does not name this Deployment", 2}}, briefs(h.Holders))
	})
}

func running(ns, name, kind, owner string) HolderPod {
	return HolderPod{Namespace: ns, Name: name, Owner: Owner{Kind: kind, Name: owner}, Phase: "Running"}
}

func TestACronJobsNextRunStartsWhereItsNamespaceInjects(t *testing.T) {
	for _, tc := range []struct {
		name     string
		labels   map[string]string
		podLabel string
		code     HolderReason
		why      string
	}{
		{"a namespace on the target", map[string]string{LabelRev: "1-26"}, "", ReasonCronJob,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts on 1-26 (istio.io/rev=1-26 on namespace batch)"},
		{"a namespace on a tag", map[string]string{LabelRev: "canary"}, "", ReasonCronJob,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts on 1-26 (istio.io/rev=canary on namespace batch)"},
		{"a namespace still on the revision", map[string]string{LabelRev: "1-25"}, "", ReasonCronJobSameRevision,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25, and its next run starts on 1-25 again (istio.io/rev=1-25 on namespace batch)"},
		{"istio-injection takes precedence", map[string]string{LabelInjection: "enabled", LabelRev: "1-26"}, "", ReasonCronJobSameRevision,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25, and its next run starts on 1-25 again (istio-injection=enabled on namespace batch selects the default revision)"},
		{"injection disabled", map[string]string{LabelInjection: "disabled"}, "1-26", ReasonCronJob,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts without a sidecar (namespace batch has istio-injection=disabled)"},
		{"the pod's own label", nil, "1-26", ReasonCronJob,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts on 1-26 (its pods' own istio.io/rev=1-26)"},
		{"no label anywhere", nil, "", ReasonCronJob,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts without a sidecar (namespace batch selects no revision)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mesh()
			m.Tags["default"] = "1-25"
			pod := running("batch", "nightly-29120-x7k2p", OwnerCronJob, "nightly")
			pod.RevLabel = tc.podLabel
			h := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: []HolderPod{pod}, Mesh: m,
				Namespaces: map[string]HolderNamespace{"batch": {Name: "batch", Labels: tc.labels}}})
			assert.Equal(t, []brief{{"CronJob", "nightly", HolderCannot, 0, tc.code, tc.why, 1}}, briefs(h.Holders))
		})
	}
}

func TestWhatMeshwaveNeverRestartsNamesItsKind(t *testing.T) {
	pods := []HolderPod{
		running("batch", "nightly-29120-x7k2p", OwnerCronJob, "nightly"),
		running("batch", "nightly-29121-aaaaa", OwnerCronJob, "nightly"),
		running("batch", "migrate-db-q8v5c", OwnerJob, "migrate-db"),
		running("batch", "debug", "", ""),
		running("batch", "toolbox", OwnerPod, "toolbox"),
		running("batch", "old-web-5d8f9-abcde", OwnerReplicaSet, "old-web-5d8f9"),
		running("batch", "canary-web-6c7d8-zzzzz", "Rollout", "canary-web"),
	}
	h := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: pods, Mesh: mesh(),
		Namespaces: map[string]HolderNamespace{"batch": {Name: "batch", Labels: map[string]string{LabelRev: "1-26"}}}})
	assert.Equal(t, []brief{
		{"CronJob", "nightly", HolderCannot, 0, ReasonCronJob,
			"meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts on 1-26 (istio.io/rev=1-26 on namespace batch)", 2},
		{"Job", "migrate-db", HolderCannot, 0, ReasonJob, "meshwave never restarts a Job: this Job finishes on 1-25", 1},
		{"ReplicaSet", "old-web-5d8f9", HolderCannot, 0, ReasonReplicaSet,
			"this ReplicaSet has no Deployment, and nothing restarts its pods when its template changes: it needs a person (replace its pods one at a time, or put it under a Deployment)", 1},
		{"Rollout", "canary-web", HolderCannot, 0, ReasonOtherOwner, "meshwave does not move a Rollout: restart it through its own controller", 1},
		{"Pod", "debug", HolderCannot, 0, ReasonBarePod,
			"a bare Pod has no controller to create it again: it needs a person; created again now, it would run 1-26 (istio.io/rev=1-26 on namespace batch)", 1},
		{"Pod", "toolbox", HolderCannot, 0, ReasonBarePod,
			"a bare Pod has no controller to create it again: it needs a person; created again now, it would run 1-26 (istio.io/rev=1-26 on namespace batch)", 1},
	}, briefs(h.Holders))
	assert.Equal(t, []string{"nightly-29120-x7k2p", "nightly-29121-aaaaa"}, h.Holders[0].Pods)
	assert.Equal(t, 7, h.Pods)

	bare := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: pods[3:4],
		Namespaces: map[string]HolderNamespace{"batch": {Name: "batch", Labels: map[string]string{LabelRev: "1-25"}}}})
	assert.Equal(t, "a bare Pod has no controller to create it again: it needs a person; created again now, it would run 1-25 again (istio.io/rev=1-25 on namespace batch)", bare.Holders[0].Reason)
}

func TestCompletedAndFailedPodsAreListedApart(t *testing.T) {
	done := func(name, owner, phase string) HolderPod {
		p := running("batch", name, OwnerCronJob, owner)
		p.Phase = phase
		return p
	}
	h := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: []HolderPod{
		done("nightly-29118-bbbbb", "nightly", "Succeeded"),
		done("nightly-29119-ccccc", "nightly", "Failed"),
		done("nightly-29117-aaaaa", "nightly", "Succeeded"),
		{Namespace: "batch", Name: "once", Phase: "Failed"},
		running("batch", "nightly-29120-x7k2p", OwnerCronJob, "nightly"),
	}})
	assert.Equal(t, 1, h.Pods)
	require.Len(t, h.Holders, 1)
	assert.Equal(t, 4, h.FinishedPods)
	assert.Equal(t, []Holder{
		{Namespace: "batch", Kind: "CronJob", Name: "nightly", State: HolderFinished, Phase: "Failed", Code: ReasonPodFailed,
			Reason: "failed: runs no proxy, but tools that count pods (the Sail Operator) see 1-25 in use until it is deleted", Pods: []string{"nightly-29119-ccccc"}},
		{Namespace: "batch", Kind: "CronJob", Name: "nightly", State: HolderFinished, Phase: "Succeeded", Code: ReasonPodSucceeded,
			Reason: "completed: runs no proxy, but tools that count pods (the Sail Operator) see 1-25 in use until it is deleted", Pods: []string{"nightly-29117-aaaaa", "nightly-29118-bbbbb"}},
		{Namespace: "batch", Kind: "Pod", Name: "once", State: HolderFinished, Phase: "Failed", Code: ReasonPodFailed,
			Reason: "failed: runs no proxy, but tools that count pods (the Sail Operator) see 1-25 in use until it is deleted", Pods: []string{"once"}},
	}, h.Finished)
	assert.Equal(t, map[HolderReason]int{ReasonCronJob: 1, ReasonPodSucceeded: 2, ReasonPodFailed: 2}, h.PodsByReason())
}

func TestAWorkloadWhosePodsAreAllBeingDeletedIsLeaving(t *testing.T) {
	w := deploy("cart", func(w *Workload) { w.Pods[0].Terminating, w.Pods[1].Terminating = true, true })
	half := deploy("orders", func(w *Workload) { w.Pods[0].Terminating = true })
	h := holdersIn("1-25", snap(w, half), nil)
	assert.Equal(t, []brief{
		{"Deployment", "cart", HolderLeaving, 0, ReasonTerminating, "every pod of this Deployment here is being deleted", 2},
		{"Deployment", "orders", HolderWillMove, 1, ReasonWillMove, "meshwave moves this Deployment to 1-26 in wave 1", 2},
	}, briefs(h.Holders))
}

func TestHoldersAreOrderedByNamespaceKindAndName(t *testing.T) {
	h := ClassifyHolders(HoldersInput{Revision: "1-25", Pods: []HolderPod{
		running("b", "x", "", ""),
		running("b", "web-1", OwnerDaemonSet, "web"),
		running("b", "api-1", OwnerStatefulSet, "api"),
		running("b", "zeta-1", OwnerDeployment, "zeta"),
		running("b", "job-1", OwnerJob, "job"),
		running("a", "z", "", ""),
		running("b", "cron-1", OwnerCronJob, "cron"),
		running("b", "alpha-1", OwnerDeployment, "alpha"),
	}})
	var got []string
	for _, x := range h.Holders {
		got = append(got, x.Namespace+" "+x.Kind+"/"+x.Name)
	}
	assert.Equal(t, []string{"a Pod/z", "b Deployment/alpha", "b Deployment/zeta", "b StatefulSet/api", "b DaemonSet/web",
		"b CronJob/cron", "b Job/job", "b Pod/x"}, got)
}

func TestNoPodNoHolder(t *testing.T) {
	h := ClassifyHolders(HoldersInput{Revision: "1-25"})
	assert.Equal(t, Holders{Revision: "1-25", Holders: []Holder{}, Finished: []Holder{}}, h)
	assert.Empty(t, h.PodsByReason())
}

// A Completed status keeps the revision its migration went to (1-26)
// while the tag canary now names 1-27: the holders of its pods on 1-26
// read that the migration ended, and name the revision it went to, not a
// move to 1-27 that meshwave never makes until the target is set again.
func TestHoldersOfACompletedNamespaceAfterARepointSayItEnded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(t *testing.T, h Holder)
	}{
		{"each says the migration ended", func(t *testing.T, h Holder) {
			assert.Equal(t, ReasonMigrationEnded, h.Code, "%s %s: %s %s", h.Kind, h.Name, h.State, h.Reason)
		}},
		{"none names the revision the tag names now", func(t *testing.T, h Holder) {
			assert.NotContains(t, h.Reason, "to 1-27 is Completed", h.Name)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := completedOnTag(t)
			hs := holdersIn("1-26", s.snap, s.status)
			require.NotEmpty(t, hs.Holders)
			for _, h := range hs.Holders {
				tc.check(t, h)
			}
		})
	}
}
