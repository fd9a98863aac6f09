package tests

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/e2e/cluster"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// kindsRunTime is how long a Job's pod runs in TestTheWorldRunsEveryWorkloadKind.
const kindsRunTime = 500 * time.Millisecond

// fakeNodes are the nodes the fake kubelet registers by default.
var fakeNodes = []string{"fake-node-0", "fake-node-1", "fake-node-2"}

// TestTheWorldRunsEveryWorkloadKind proves that the local world runs the
// pods of every workload kind as a cluster does, on Kubernetes' own
// controllers: StatefulSets start in order and roll out in reverse order,
// OnDelete StatefulSets are moved by evictions that a PodDisruptionBudget
// limits, a DaemonSet runs one pod per node and rolls out, Jobs (a
// CronJob's too) run to completion or fail, bare pods and a ReplicaSet
// without a Deployment run; every pod injected by the revision its
// namespace names.
func TestTheWorldRunsEveryWorkloadKind(t *testing.T) {
	shared := fixture.New(t, world.Options{NoPrometheus: true, RunTime: kindsRunTime})

	t.Run("a StatefulSet of three starts in order and rolls out a template change in reverse order", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-sts", "web", "1-25"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil)
		history := recordPods(f, ns, map[string]string{"app": name})
		f.Given().StatefulSet(fixture.NewStatefulSet(ns, name, 3, appsv1.RollingUpdateStatefulSetStrategyType))
		sts, pods := f.WaitForStatefulSetRolledOut(ns, name)

		// OrderedReady: each pod is created once the ones before it are Ready.
		require.Equal(t, []string{"web-0: ", "web-1: web-0", "web-2: web-0,web-1"}, history.creations())
		require.Equal(t, []string{"web-0", "web-1", "web-2"}, podNames(pods))
		for i, p := range pods {
			requireStatefulSetPod(t, sts, p, i)
		}
		f.Then().PodsInjectedBy(rev, pods)
		t.Logf("a StatefulSet pod's labels: %v", pods[0].Labels)

		before := sts.Status.UpdateRevision
		history.reset()
		restartTemplate(f, "statefulsets", ns, name)
		sts, pods = f.WaitForStatefulSetRolledOut(ns, name)

		// RollingUpdate replaces one pod at a time, highest ordinal first,
		// each once the others are Ready.
		require.NotEqual(t, before, sts.Status.UpdateRevision)
		require.Equal(t, []string{"web-2", "web-1", "web-0"}, history.deletions())
		require.Equal(t, []string{"web-2: web-0,web-1", "web-1: web-0,web-2", "web-0: web-1,web-2"}, history.creations())
		for i, p := range pods {
			requireStatefulSetPod(t, sts, p, i)
		}
		f.Then().PodsInjectedBy(rev, pods)
	})

	t.Run("an OnDelete StatefulSet is moved by evictions its PodDisruptionBudget admits one at a time", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-evict", "db", "1-26"
		sel := map[string]string{"app": name}
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil).
			StatefulSet(fixture.NewStatefulSet(ns, name, 3, appsv1.OnDeleteStatefulSetStrategyType)).
			PodDisruptionBudget(fixture.NewPodDisruptionBudget(ns, name, 1))
		sts, original := f.WaitForStatefulSetRolledOut(ns, name)
		f.Then().PodsInjectedBy(rev, original)
		waitForBudget(f, ns, name, 3, 1)

		// OnDelete: a template change replaces no pod by itself.
		oldRev := sts.Status.CurrentRevision
		restartTemplate(f, "statefulsets", ns, name)
		f.Eventually("the controller to see the new template", func() (bool, string) {
			s, err := f.Client.AppsV1().StatefulSets(ns).Get(f.Ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			sts = s
			return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision != oldRev, fmt.Sprintf("%+v", s.Status)
		})
		require.Equal(t, oldRev, sts.Status.CurrentRevision)
		require.Zero(t, sts.Status.UpdatedReplicas)
		newRev := sts.Status.UpdateRevision
		require.Equal(t, uids(original), uids(f.Pods(ns, sel)), "no pod was replaced")

		history := recordPods(f, ns, sel)
		release := f.World.Cluster.Kubelet.HoldUnready(cluster.PodSelector{Namespace: ns, Labels: labels.SelectorFromSet(sel), OnlyNew: true})
		require.NoError(t, f.Evict(ns, "db-2"))
		recreated := waitForRecreated(f, ns, original[2], newRev, false)
		waitForBudget(f, ns, name, 2, 0)

		// db-2 is back but not Ready: the budget has no disruption left.
		err := f.Evict(ns, "db-1")
		require.True(t, apierrors.IsTooManyRequests(err), "a second eviction is refused with 429, got %v", err)
		require.Contains(t, err.Error(), "Cannot evict pod as it would violate the pod's disruption budget.")
		db1, err := f.Client.CoreV1().Pods(ns).Get(f.Ctx, "db-1", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, original[1].UID, db1.UID)
		require.Nil(t, db1.DeletionTimestamp, "db-1 is left alone")

		release()
		f.Eventually("db-2 Ready once let go", func() (bool, string) {
			p, err := f.Client.CoreV1().Pods(ns).Get(f.Ctx, "db-2", metav1.GetOptions{})
			require.NoError(t, err)
			return p.UID == recreated.UID && fixture.PodReady(p), fmt.Sprintf("uid %s, ready %t", p.UID, fixture.PodReady(p))
		})
		waitForBudget(f, ns, name, 3, 1)
		for _, p := range []*corev1.Pod{original[1], original[0]} {
			require.NoError(t, f.Evict(ns, p.Name))
			waitForRecreated(f, ns, p, newRev, true)
			waitForBudget(f, ns, name, 3, 1)
		}
		sts, pods := f.WaitForStatefulSetRolledOut(ns, name)
		require.Equal(t, newRev, sts.Status.CurrentRevision)
		require.Equal(t, []string{"db-0", "db-1", "db-2"}, podNames(pods))
		for i, p := range pods {
			requireStatefulSetPod(t, sts, p, i)
			require.NotEqual(t, original[i].UID, p.UID)
		}
		f.Then().PodsInjectedBy(rev, pods)

		// An evicted pod ends as a deleted one does: marked a disruption
		// target by the Eviction API, deleted with its grace period, its
		// containers stopped (Failed), then removed.
		require.Equal(t, []string{"db-2", "db-1", "db-0"}, history.deletions())
		require.Equal(t, []string{
			"DisruptionTarget=EvictionByEvictionAPI", "deleted with grace 30s", "phase Failed", "removed",
		}, history.ending(original[2].UID))
	})

	t.Run("a DaemonSet runs one pod on each node and rolls out a template change", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-ds", "node-agent", "1-25"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil).
			DaemonSet(fixture.NewDaemonSet(ns, name))
		ds, pods := f.WaitForDaemonSetRolledOut(ns, name)
		require.EqualValues(t, 3, ds.Status.DesiredNumberScheduled)
		first := requireDaemonPods(t, ds, pods, "1")
		f.Then().PodsInjectedBy(rev, pods)
		t.Logf("a DaemonSet pod's labels: %v, affinity: %v, tolerations: %v", pods[0].Labels, pods[0].Spec.Affinity.NodeAffinity, pods[0].Spec.Tolerations)

		restartTemplate(f, "daemonsets", ns, name)
		ds, pods = f.WaitForDaemonSetRolledOut(ns, name)
		require.EqualValues(t, 2, ds.Generation)
		require.Equal(t, ds.Generation, ds.Status.ObservedGeneration)
		require.EqualValues(t, 3, ds.Status.UpdatedNumberScheduled)
		require.EqualValues(t, 3, ds.Status.NumberAvailable)
		second := requireDaemonPods(t, ds, pods, "2")
		require.NotEqual(t, first, second, "controller-revision-hash")
		f.Then().PodsInjectedBy(rev, pods)
	})

	t.Run("a Job's pods run to completion", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-job", "migrate", "1-26"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil)
		createJob(f, fixture.NewJob(ns, name, 2, 2))
		job := f.WaitForJobFinished(ns, name)
		require.Equal(t, batchv1.JobComplete, fixture.JobCondition(job))
		require.EqualValues(t, 2, job.Status.Succeeded)
		require.Zero(t, job.Status.Failed)
		pods := f.Pods(ns, map[string]string{"job-name": name})
		require.Len(t, pods, 2)
		for _, p := range pods {
			requireOwner(t, p.OwnerReferences, "Job", name, job.UID)
			requireEnded(t, p, corev1.PodSucceeded, 0)
		}
		f.Then().PodsInjectedBy(rev, pods)
		t.Logf("a Job pod's labels: %v", pods[0].Labels)
	})

	t.Run("a failing Job's pod ends Failed", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-job-fail", "crunch", "1-25"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil)
		release := f.World.Cluster.Kubelet.Fail(cluster.PodSelector{Namespace: ns, Labels: labels.SelectorFromSet(map[string]string{"job-name": name})})
		defer release()
		createJob(f, fixture.NewJob(ns, name, 1, 1))
		job := f.WaitForJobFinished(ns, name)
		require.Equal(t, batchv1.JobFailed, fixture.JobCondition(job))
		require.EqualValues(t, 1, job.Status.Failed)
		require.Zero(t, job.Status.Succeeded)
		pods := f.Pods(ns, map[string]string{"job-name": name})
		require.Len(t, pods, 1)
		requireEnded(t, pods[0], corev1.PodFailed, 1)
		f.Then().PodsInjectedBy(rev, pods)
	})

	t.Run("a long-running Job's pod runs until it is let go", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-job-long", "serve", "1-26"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil)
		release := f.World.Cluster.Kubelet.KeepRunning(cluster.PodSelector{Namespace: ns, Labels: labels.SelectorFromSet(map[string]string{"job-name": name})})
		createJob(f, fixture.NewJob(ns, name, 1, 1))
		f.Eventually("the job's pod Ready", func() (bool, string) {
			pods := f.Pods(ns, map[string]string{"job-name": name})
			return len(pods) == 1 && fixture.PodReady(pods[0]), fmt.Sprintf("%d pods", len(pods))
		})
		// Well past its run time (status times have one-second
		// resolution), it still runs.
		time.Sleep(kindsRunTime + 1500*time.Millisecond)
		pods := f.Pods(ns, map[string]string{"job-name": name})
		require.Len(t, pods, 1)
		require.Equal(t, corev1.PodRunning, pods[0].Status.Phase)
		require.True(t, fixture.PodReady(pods[0]))
		job, err := f.Client.BatchV1().Jobs(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 1, job.Status.Active)
		require.Empty(t, fixture.JobCondition(job))

		release()
		job = f.WaitForJobFinished(ns, name)
		require.Equal(t, batchv1.JobComplete, fixture.JobCondition(job))
		requireEnded(t, f.Pods(ns, map[string]string{"job-name": name})[0], corev1.PodSucceeded, 0)
	})

	t.Run("a CronJob's Job is owned by it, completes, and goes with it", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, name, rev = "kinds-cron", "report", "1-25"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil)
		// Yearly, so that the controller schedules nothing during the
		// test; the Job is made as kubectl create job --from=cronjob does.
		cj, err := f.Client.BatchV1().CronJobs(ns).Create(f.Ctx, fixture.NewCronJob(ns, name, "0 0 1 1 *"), metav1.CreateOptions{})
		require.NoError(t, err)
		createJob(f, fixture.JobFromCronJob(cj, name+"-manual"))
		job := f.WaitForJobFinished(ns, name+"-manual")
		require.Equal(t, batchv1.JobComplete, fixture.JobCondition(job))
		requireOwner(t, job.OwnerReferences, "CronJob", name, cj.UID)
		pods := f.Pods(ns, map[string]string{"job-name": name + "-manual"})
		require.Len(t, pods, 1)
		requireOwner(t, pods[0].OwnerReferences, "Job", name+"-manual", job.UID)
		requireEnded(t, pods[0], corev1.PodSucceeded, 0)
		f.Then().PodsInjectedBy(rev, pods)

		// The garbage collector follows the owners: CronJob, Job, pod.
		require.NoError(t, f.Client.BatchV1().CronJobs(ns).Delete(f.Ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}))
		f.Eventually("the CronJob's Job and pod deleted", func() (bool, string) {
			jobs, err := f.Client.BatchV1().Jobs(ns).List(f.Ctx, metav1.ListOptions{})
			require.NoError(t, err)
			pods := f.Pods(ns, nil)
			return len(jobs.Items) == 0 && len(pods) == 0, fmt.Sprintf("%d jobs, %d pods", len(jobs.Items), len(pods))
		})
	})

	t.Run("a bare pod and a ReplicaSet without a Deployment run", func(t *testing.T) {
		t.Parallel()
		f := shared.For(t)
		const ns, rev = "kinds-bare", "1-26"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: rev}, nil)
		bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: ns}, Spec: fixture.NewPodTemplate("debug").Spec}
		bare.Labels = map[string]string{"app": "debug"}
		_, err := f.Client.CoreV1().Pods(ns).Create(f.Ctx, bare, metav1.CreateOptions{})
		require.NoError(t, err)
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: ns},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "legacy"}},
				Template: fixture.NewPodTemplate("legacy"),
			},
		}
		_, err = f.Client.AppsV1().ReplicaSets(ns).Create(f.Ctx, rs, metav1.CreateOptions{})
		require.NoError(t, err)
		f.Eventually("the bare pod and the ReplicaSet's two pods Ready", func() (bool, string) {
			pods := f.Pods(ns, nil)
			ready := 0
			for _, p := range pods {
				if fixture.PodReady(p) && p.Status.Phase == corev1.PodRunning {
					ready++
				}
			}
			r, err := f.Client.AppsV1().ReplicaSets(ns).Get(f.Ctx, "legacy", metav1.GetOptions{})
			require.NoError(t, err)
			return ready == 3 && len(pods) == 3 && r.Status.AvailableReplicas == 2, fmt.Sprintf("%d of %d pods ready, %+v", ready, len(pods), r.Status)
		})
		pods := f.Pods(ns, nil)
		require.Equal(t, "debug", pods[0].Name)
		require.Empty(t, pods[0].OwnerReferences)
		for _, p := range pods[1:] {
			require.True(t, strings.HasPrefix(p.Name, "legacy-"), p.Name)
			require.Equal(t, "ReplicaSet", metav1.GetControllerOf(p).Kind)
			require.NotContains(t, p.Labels, "pod-template-hash", "only a Deployment's ReplicaSets hash their pods")
		}
		f.Then().PodsInjectedBy(rev, pods)
	})
}

// restartTemplate changes a workload's pod template the way kubectl rollout
// restart does.
func restartTemplate(f *fixture.Fixture, resource, ns, name string) {
	f.T.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	err := f.Client.AppsV1().RESTClient().Patch(types.MergePatchType).Namespace(ns).Resource(resource).Name(name).
		Body([]byte(patch)).Do(f.Ctx).Error()
	require.NoError(f.T, err, "restart %s %s/%s", resource, ns, name)
}

func createJob(f *fixture.Fixture, job *batchv1.Job) {
	f.T.Helper()
	_, err := f.Client.BatchV1().Jobs(job.Namespace).Create(f.Ctx, job, metav1.CreateOptions{})
	require.NoError(f.T, err, "create job %s/%s", job.Namespace, job.Name)
}

func uids(pods []*corev1.Pod) []types.UID {
	out := make([]types.UID, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.UID)
	}
	return out
}

func requireOwner(t *testing.T, refs []metav1.OwnerReference, kind, name string, uid types.UID) {
	t.Helper()
	require.Len(t, refs, 1)
	require.Equal(t, kind, refs[0].Kind)
	require.Equal(t, name, refs[0].Name)
	require.Equal(t, uid, refs[0].UID)
	require.True(t, ptr.Deref(refs[0].Controller, false), "%s %s is the controller", kind, name)
}

// requireStatefulSetPod asserts what the StatefulSet controller sets on
// the pod of ordinal i, and the labels it adds to the template's.
func requireStatefulSetPod(t *testing.T, sts *appsv1.StatefulSet, p *corev1.Pod, i int) {
	t.Helper()
	name := fmt.Sprintf("%s-%d", sts.Name, i)
	require.Equal(t, name, p.Name)
	require.Equal(t, name, p.Spec.Hostname)
	require.Equal(t, sts.Spec.ServiceName, p.Spec.Subdomain)
	requireOwner(t, p.OwnerReferences, "StatefulSet", sts.Name, sts.UID)
	require.Equal(t, map[string]string{
		"app": sts.Name, "version": "v1",
		"controller-revision-hash":           sts.Status.UpdateRevision,
		"statefulset.kubernetes.io/pod-name": name,
		"apps.kubernetes.io/pod-index":       fmt.Sprint(i),
	}, withoutIstioLabels(p.Labels))
	require.Equal(t, corev1.PodRunning, p.Status.Phase)
	require.True(t, fixture.PodReady(p), "%s is Ready", name)
	require.Contains(t, fakeNodes, p.Spec.NodeName)
}

// requireDaemonPods asserts that a DaemonSet has exactly one Ready pod on
// each node, bound there by its node affinity, all of one template, and
// returns their controller-revision-hash.
func requireDaemonPods(t *testing.T, ds *appsv1.DaemonSet, pods []*corev1.Pod, generation string) string {
	t.Helper()
	var nodes []string
	hash := pods[0].Labels["controller-revision-hash"]
	require.NotEmpty(t, hash)
	for _, p := range pods {
		requireOwner(t, p.OwnerReferences, "DaemonSet", ds.Name, ds.UID)
		require.True(t, strings.HasPrefix(p.Name, ds.Name+"-"), p.Name)
		require.Equal(t, map[string]string{
			"app": ds.Name, "version": "v1", "controller-revision-hash": hash, "pod-template-generation": generation,
		}, withoutIstioLabels(p.Labels))
		// The controller names the node by affinity, never by nodeName.
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		require.Len(t, terms, 1)
		require.Equal(t, []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{p.Spec.NodeName},
		}}, terms[0].MatchFields)
		require.Equal(t, corev1.PodRunning, p.Status.Phase)
		require.True(t, fixture.PodReady(p), "%s is Ready", p.Name)
		nodes = append(nodes, p.Spec.NodeName)
	}
	sort.Strings(nodes)
	require.Equal(t, fakeNodes, nodes, "one pod on each node")
	return hash
}

func withoutIstioLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if !strings.Contains(k, "istio.io/") {
			out[k] = v
		}
	}
	return out
}

// requireEnded asserts a pod that ran to its end: its phase, the app
// container's exit code, the native istio-proxy stopped with 0 after it,
// Ready False as a kubelet reports a completed pod.
func requireEnded(t *testing.T, p *corev1.Pod, phase corev1.PodPhase, exitCode int32) {
	t.Helper()
	require.Equal(t, phase, p.Status.Phase, "phase of %s", p.Name)
	require.Len(t, p.Status.ContainerStatuses, 1)
	app := p.Status.ContainerStatuses[0].State.Terminated
	require.NotNil(t, app, "app of %s terminated", p.Name)
	require.Equal(t, exitCode, app.ExitCode, "exit code of %s", p.Name)
	var proxy *corev1.ContainerStateTerminated
	for _, cs := range p.Status.InitContainerStatuses {
		require.NotNil(t, cs.State.Terminated, "init container %s of %s terminated", cs.Name, p.Name)
		if cs.Name == mesh.ProxyContainer {
			proxy = cs.State.Terminated
		}
	}
	require.NotNil(t, proxy, "istio-proxy of %s", p.Name)
	require.Zero(t, proxy.ExitCode)
	require.False(t, fixture.PodReady(p))
}

// waitForBudget waits until the disruption controller reports the
// budget's healthy pods and the disruptions it allows.
func waitForBudget(f *fixture.Fixture, ns, name string, healthy, allowed int32) {
	f.T.Helper()
	f.Eventually(fmt.Sprintf("budget %s/%s: %d healthy, %d disruptions allowed", ns, name, healthy, allowed), func() (bool, string) {
		pdb, err := f.Client.PolicyV1().PodDisruptionBudgets(ns).Get(f.Ctx, name, metav1.GetOptions{})
		require.NoError(f.T, err)
		s := pdb.Status
		return s.ObservedGeneration == pdb.Generation && s.ExpectedPods == 3 && s.DesiredHealthy == 2 &&
			s.CurrentHealthy == healthy && s.DisruptionsAllowed == allowed, fmt.Sprintf("%+v", s)
	})
}

// waitForRecreated waits until the StatefulSet has recreated old under its
// name, from revision rev, Running with the given readiness.
func waitForRecreated(f *fixture.Fixture, ns string, old *corev1.Pod, rev string, ready bool) *corev1.Pod {
	f.T.Helper()
	var p *corev1.Pod
	f.Eventually(fmt.Sprintf("%s recreated, Ready=%t", old.Name, ready), func() (bool, string) {
		var err error
		p, err = f.Client.CoreV1().Pods(ns).Get(f.Ctx, old.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != old.UID && p.Labels["controller-revision-hash"] == rev && p.Status.Phase == corev1.PodRunning &&
			fixture.PodReady(p) == ready, fmt.Sprintf("uid %s, phase %s, ready %t", p.UID, p.Status.Phase, fixture.PodReady(p))
	})
	return p
}

// podHistory records the pods of a namespace as a watch sees them.
type podHistory struct {
	mu     sync.Mutex
	ready  map[types.UID]string // the Ready pods' names
	events []podEvent
}

type podEvent struct {
	typ watch.EventType
	pod *corev1.Pod
	// readyAtCreation are the names of the pods Ready when an ADDED
	// event arrived.
	readyAtCreation []string
}

// recordPods watches the pods of ns that match selector until the test ends.
func recordPods(f *fixture.Fixture, ns string, selector map[string]string) *podHistory {
	f.T.Helper()
	sel := labels.SelectorFromSet(selector).String()
	list, err := f.Client.CoreV1().Pods(ns).List(f.Ctx, metav1.ListOptions{LabelSelector: sel})
	require.NoError(f.T, err)
	h := &podHistory{ready: map[types.UID]string{}}
	for i := range list.Items {
		if fixture.PodReady(&list.Items[i]) {
			h.ready[list.Items[i].UID] = list.Items[i].Name
		}
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	f.T.Cleanup(cancel)
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return f.Client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	require.NoError(f.T, err)
	f.T.Cleanup(w.Stop)
	go func() {
		for e := range w.ResultChan() {
			p, ok := e.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			h.mu.Lock()
			ev := podEvent{typ: e.Type, pod: p}
			if e.Type == watch.Added {
				for _, name := range h.ready {
					ev.readyAtCreation = append(ev.readyAtCreation, name)
				}
				slices.Sort(ev.readyAtCreation)
			}
			if e.Type != watch.Deleted && fixture.PodReady(p) {
				h.ready[p.UID] = p.Name
			} else {
				delete(h.ready, p.UID)
			}
			h.events = append(h.events, ev)
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *podHistory) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = nil
}

// creations are the pods created, in order, each as "name: the pods Ready
// then".
func (h *podHistory) creations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		if e.typ == watch.Added {
			out = append(out, e.pod.Name+": "+strings.Join(e.readyAtCreation, ","))
		}
	}
	return out
}

// deletions are the pods removed, in order.
func (h *podHistory) deletions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		if e.typ == watch.Deleted {
			out = append(out, e.pod.Name)
		}
	}
	return out
}

// ending is how the pod with uid ended, each change once, in order: the
// DisruptionTarget condition, the deletion, the terminal phase, removal.
func (h *podHistory) ending(uid types.UID) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	deleted := false
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, e := range h.events {
		p := e.pod
		if p.UID != uid {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				add("DisruptionTarget=" + c.Reason)
			}
		}
		if p.DeletionTimestamp != nil && !deleted {
			// The first grace period; the kubelet's final delete sets 0.
			deleted = true
			add(fmt.Sprintf("deleted with grace %ds", ptr.Deref(p.DeletionGracePeriodSeconds, -1)))
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			add("phase " + string(p.Status.Phase))
		}
		if e.typ == watch.Deleted {
			add("removed")
		}
	}
	return out
}
