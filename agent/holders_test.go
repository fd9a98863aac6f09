package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

func owned(apiVersion, kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true)}}
}

// injectedPod is a pod of ns injected by rev, in phase, kept by owners.
func injectedPod(ns, name, rev string, phase corev1.PodPhase, owners []metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners, Labels: map[string]string{}},
		Status: corev1.PodStatus{Phase: phase}}
	if rev != "" {
		p.Annotations = map[string]string{canary.AnnotationSidecar: `{"initContainers":["istio-init"],"containers":["istio-proxy"],"revision":"` + rev + `"}`}
	}
	return p
}

// jobMeta is a Job as the metadata client returns it.
func jobMeta(ns, name string, owners []metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners,
			Labels: map[string]string{"batch.kubernetes.io/job-name": name}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}}}
}

// aMixedCluster holds namespace shop, opted in to 1-26 and still on 1-25,
// and namespace batch, on 1-26 and not opted in, with every kind of pod
// meshwave cannot move.
func aMixedCluster() (objs []runtime.Object, jobs []runtime.Object) {
	mwc := func(name, rev string) *admissionregv1.MutatingWebhookConfiguration {
		return &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{canary.LabelRev: rev}}}
	}
	deployment := func(ns, name string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
	}
	replicaSet := func(ns, name string, owners []metav1.OwnerReference) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}}
	}
	objs = []runtime.Object{
		mwc("istio-sidecar-injector-1-25", "1-25"),
		mwc("istio-sidecar-injector-1-26", "1-26"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "batch", Labels: map[string]string{canary.LabelRev: "1-26"}}},
		deployment("shop", "cart"),
		replicaSet("shop", "cart-5d8f9", owned("apps/v1", "Deployment", "cart")),
		injectedPod("shop", "cart-5d8f9-a", "1-25", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "cart-5d8f9")),
		injectedPod("shop", "cart-5d8f9-b", "1-25", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "cart-5d8f9")),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "node-agent", Namespace: "shop"}},
		injectedPod("shop", "db-0", "1-25", corev1.PodRunning, owned("apps/v1", "StatefulSet", "db")),
		injectedPod("shop", "node-agent-x1", "1-25", corev1.PodRunning, owned("apps/v1", "DaemonSet", "node-agent")),
		// batch: on 1-26 already, holding 1-25 in what nothing restarts.
		injectedPod("batch", "nightly-29120-x7k2p", "1-25", corev1.PodRunning, owned("batch/v1", "Job", "nightly-29120")),
		injectedPod("batch", "nightly-29119-q2w3e", "1-25", corev1.PodSucceeded, owned("batch/v1", "Job", "nightly-29119")),
		injectedPod("batch", "migrate-db-q8v5c", "1-25", corev1.PodRunning, owned("batch/v1", "Job", "migrate-db")),
		replicaSet("batch", "old-web-6c7d8", nil),
		injectedPod("batch", "old-web-6c7d8-zz9", "1-25", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "old-web-6c7d8")),
		injectedPod("batch", "debug", "1-25", corev1.PodRunning, nil),
		injectedPod("batch", "once", "1-25", corev1.PodFailed, nil),
		// Not holders of 1-25: on 1-26, or not injected.
		injectedPod("batch", "api-1", "1-26", corev1.PodRunning, nil),
		injectedPod("batch", "plain", "", corev1.PodRunning, nil),
	}
	jobs = []runtime.Object{
		jobMeta("batch", "nightly-29120", owned("batch/v1", "CronJob", "nightly")),
		jobMeta("batch", "nightly-29119", owned("batch/v1", "CronJob", "nightly")),
		jobMeta("batch", "migrate-db", nil),
	}
	return objs, jobs
}

func metadataClient(jobs ...runtime.Object) *metadatafake.FakeMetadataClient {
	scheme := metadatafake.NewTestScheme()
	metav1.AddMetaToScheme(scheme)
	return metadatafake.NewSimpleMetadataClient(scheme, jobs...)
}

// holderWaves are the holders' planned waves, 0 for none.
func holderWaves(hs []canary.Holder) []int {
	var out []int
	for _, h := range hs {
		out = append(out, h.Wave)
	}
	return out
}

// holderRows are holders as "kind/name state code pods", one a line.
func holderRows(hs []canary.Holder) []string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s %s/%s %s %s %s", h.Namespace, h.Kind, h.Name, h.State, h.Code, strings.Join(h.Pods, ",")))
	}
	return out
}

func TestHoldersNowResolvesEveryOwnerFromTheCaches(t *testing.T) {
	objs, jobs := aMixedCluster()
	cfg := DefaultConfig()
	got, err := HoldersNow(context.Background(), fake.NewClientset(objs...), metadataClient(jobs...), cfg, "1-25")
	require.NoError(t, err)

	assert.Equal(t, "1-25", got.Revision)
	assert.Equal(t, []string{
		"batch CronJob/nightly cannot cronjob nightly-29120-x7k2p",
		"batch Job/migrate-db cannot job migrate-db-q8v5c",
		"batch ReplicaSet/old-web-6c7d8 cannot replicaset old-web-6c7d8-zz9",
		"batch Pod/debug cannot bare_pod debug",
		"shop Deployment/cart will-move will_move cart-5d8f9-a,cart-5d8f9-b",
		"shop StatefulSet/db will-move will_move db-0",
		"shop DaemonSet/node-agent will-move will_move node-agent-x1",
	}, holderRows(got.Holders))
	assert.Equal(t, []int{0, 0, 0, 0, 1, 2, 2}, holderWaves(got.Holders), "the StatefulSet and the DaemonSet follow the Deployment")
	assert.Equal(t, []string{
		"batch CronJob/nightly finished pod_succeeded nightly-29119-q2w3e",
		"batch Pod/once finished pod_failed once",
	}, holderRows(got.Finished))
	assert.Equal(t, 8, got.Pods)
	assert.Equal(t, 2, got.FinishedPods)
	assert.Equal(t, "meshwave never restarts a Job: this CronJob's running Job finishes on 1-25; its next run starts on 1-26 (istio.io/rev=1-26 on namespace batch)", got.Holders[0].Reason)
	assert.Empty(t, got.Note)
}

func TestWithoutTheJobsCacheACronJobsPodIsNamedByItsJob(t *testing.T) {
	objs, _ := aMixedCluster()
	caches := NewCaches(fake.NewClientset(objs...), 0, nil)
	startCaches(t, caches)
	all, err := caches.Holders("istio-system", canary.Config{}, func(rev string) bool { return rev == "1-25" })
	require.NoError(t, err)
	assert.Contains(t, holderRows(all["1-25"].Holders), "batch Job/nightly-29120 cannot job nightly-29120-x7k2p")
	assert.NotContains(t, all, "1-26", "only the revisions asked for")
}

func TestHoldersOfARevisionNoPodCarries(t *testing.T) {
	objs, jobs := aMixedCluster()
	objs = append(objs, &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-revision-tag-stable",
		Labels: map[string]string{canary.LabelRev: "1-25", canary.LabelTag: "stable"}}})
	for _, ask := range []string{"1-24", "stable"} {
		got, err := HoldersNow(context.Background(), fake.NewClientset(objs...), metadataClient(jobs...), DefaultConfig(), ask)
		require.NoError(t, err)
		want := canary.Holders{Revision: ask, Holders: []canary.Holder{}, Finished: []canary.Holder{}}
		if ask == "stable" {
			want.Note = "tag stable points at revision 1-25; pods carry revisions, not tags: ask for 1-25"
		}
		assert.Equal(t, want, got)
	}
}

func TestTheHoldersMetricCountsPodsByRevisionAndReason(t *testing.T) {
	objs, jobs := aMixedCluster()
	caches := NewCaches(fake.NewClientset(objs...), 0, nil)
	caches.WatchJobs(metadataClient(jobs...), 0)
	startCaches(t, caches)
	job, err := caches.Jobs.ByNamespace("batch").Get("nightly-29120")
	require.NoError(t, err)
	assert.Equal(t, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "nightly-29120", Namespace: "batch", OwnerReferences: owned("batch/v1", "CronJob", "nightly")}},
		job, "a Job is cached as its name and owners only")
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewHoldersCollector(caches, "istio-system", canary.Config{}))

	var want strings.Builder
	want.WriteString("# HELP meshwave_revision_holders Pods injected by a revision, by reason code: running its proxy (will_move, moving, cronjob, job, bare_pod, not_opted_in, ...) or finished (pod_succeeded, pod_failed). Every installed revision and every revision a pod carries has a series per code, 0 included.\n# TYPE meshwave_revision_holders gauge\n")
	counts := map[string]map[canary.HolderReason]int{
		"1-25": {canary.ReasonWillMove: 4, canary.ReasonCronJob: 1, canary.ReasonJob: 1,
			canary.ReasonReplicaSet: 1, canary.ReasonBarePod: 1, canary.ReasonPodSucceeded: 1, canary.ReasonPodFailed: 1},
		"1-26": {canary.ReasonBarePod: 1},
	}
	var lines []string
	for rev, byCode := range counts {
		for _, code := range canary.HolderReasons {
			lines = append(lines, fmt.Sprintf("meshwave_revision_holders{reason=%q,revision=%q} %d\n", code, rev, byCode[code]))
		}
	}
	sortStrings(lines)
	want.WriteString(strings.Join(lines, ""))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "meshwave_revision_holders"))
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestGatherAccountsForThePodsNoMovedWorkloadOwns(t *testing.T) {
	objs, jobs := aMixedCluster()
	caches := NewCaches(fake.NewClientset(objs...), 0, nil)
	caches.WatchJobs(metadataClient(jobs...), 0)
	startCaches(t, caches)
	ns, err := caches.Namespaces.Get("batch")
	require.NoError(t, err)
	snap, err := caches.Gather(ns, "istio-system")
	require.NoError(t, err)
	assert.Equal(t, []canary.Unmovable{
		{ID: "CronJob/nightly", Revisions: map[string]int{"1-25": 1}},
		{ID: "Job/migrate-db", Revisions: map[string]int{"1-25": 1}},
		{ID: "Pod/api-1", Revisions: map[string]int{"1-26": 1}},
		{ID: "Pod/debug", Revisions: map[string]int{"1-25": 1}},
		{ID: "ReplicaSet/old-web-6c7d8", Revisions: map[string]int{"1-25": 1}},
	}, snap.Unmovable, "finished pods, uninjected pods and the Deployment's are left out")
	shop, err := caches.Namespaces.Get("shop")
	require.NoError(t, err)
	snap, err = caches.Gather(shop, "istio-system")
	require.NoError(t, err)
	assert.Empty(t, snap.Unmovable)
}
