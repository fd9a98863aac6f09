package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

// kindObjects are a StatefulSet and a DaemonSet of namespace shop, each
// half rolled out: one pod on the new template, one on the old.
func kindObjects() []runtime.Object {
	owner := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: name, UID: uid, Controller: ptr.To(true), APIVersion: "apps/v1"}}
	}
	injected := map[string]string{canary.AnnotationSidecar: `{"revision":"1-25"}`}
	pod := func(name string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: labels, Annotations: injected, OwnerReferences: owners},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}}}
	return []runtime.Object{
		&appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", UID: "sts-uid", ResourceVersion: "11", Generation: 4},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Template: template,
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 4, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2,
				CurrentRevision: "db-old", UpdateRevision: "db-new"},
		},
		pod("db-0", map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-old"}, owner("StatefulSet", "db", "sts-uid")),
		pod("db-1", map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-new"}, owner("StatefulSet", "db", "sts-uid")),
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "shop", UID: "ds-uid", ResourceVersion: "12", Generation: 4,
				Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "3"}},
			Spec: appsv1.DaemonSetSpec{Template: template,
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 4, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3,
				UpdatedNumberScheduled: 1, NumberReady: 3, NumberAvailable: 3},
		},
		&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-aaa", Namespace: "shop", OwnerReferences: owner("DaemonSet", "agent", "ds-uid"),
			Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "aaa"}}, Revision: 1},
		&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-bbb", Namespace: "shop", OwnerReferences: owner("DaemonSet", "agent", "ds-uid"),
			Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "bbb"}}, Revision: 2},
		// A revision of another owner never counts.
		&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "other-ccc", Namespace: "shop", OwnerReferences: owner("DaemonSet", "other", "other-uid"),
			Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "ccc"}}, Revision: 9},
		pod("agent-n1", map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "bbb"}, owner("DaemonSet", "agent", "ds-uid")),
		pod("agent-n2", map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "aaa"}, owner("DaemonSet", "agent", "ds-uid")),
		pod("agent-n3", map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "aaa", appsv1.DeprecatedTemplateGeneration: "3"}, owner("DaemonSet", "agent", "ds-uid")),
	}
}

func TestGatherReadsStatefulSetsAndDaemonSetsInTheirControllersTerms(t *testing.T) {
	client := fake.NewClientset(append(objects(), kindObjects()...)...)
	caches := NewCaches(client, 0, nil)
	startCaches(t, caches)
	ns, err := caches.Namespaces.Get("shop")
	require.NoError(t, err)
	snap, err := caches.Gather(ns, "istio-system")
	require.NoError(t, err)

	byID := map[string]canary.Workload{}
	var ids []string
	for _, w := range snap.Workloads {
		byID[w.Name] = w
		ids = append(ids, w.Name)
	}
	assert.Equal(t, []string{"DaemonSet/agent", "StatefulSet/db", "cart"}, ids)

	db := byID["StatefulSet/db"]
	assert.Equal(t, canary.KindStatefulSet, db.Kind)
	assert.Equal(t, "db", db.ObjectName())
	assert.Equal(t, int32(2), db.Replicas)
	assert.Equal(t, int32(1), db.Partition)
	assert.False(t, db.OnDelete)
	assert.Equal(t, canary.RolloutStatus{ObservedGeneration: 4, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2,
		CurrentRevision: "db-old", UpdateRevision: "db-new"}, db.Status)
	current := map[string]bool{}
	for _, p := range append(db.Pods, byID["DaemonSet/agent"].Pods...) {
		current[p.Name] = p.Current
		assert.Equal(t, "1-25", p.Revision, p.Name)
	}
	assert.Equal(t, map[string]bool{"db-0": false, "db-1": true,
		// The newest ControllerRevision's hash, or the DaemonSet's
		// template generation: the DaemonSet controller's own test.
		"agent-n1": true, "agent-n2": false, "agent-n3": true}, current)

	agent := byID["DaemonSet/agent"]
	assert.Equal(t, canary.KindDaemonSet, agent.Kind)
	assert.True(t, agent.OnDelete)
	assert.Equal(t, int32(3), agent.Replicas, "a DaemonSet wants its desired number scheduled")
	assert.Equal(t, canary.RolloutStatus{ObservedGeneration: 4, Replicas: 3, UpdatedReplicas: 1, ReadyReplicas: 3, AvailableReplicas: 3}, agent.Status)
}

func TestAMoveOfAStatefulSetPatchesTheStatefulSet(t *testing.T) {
	c, client, ctx := startTestController(t, nil, nil)
	_, err := client.AppsV1().StatefulSets("shop").Create(ctx, kindObjects()[0].(*appsv1.StatefulSet), metav1.CreateOptions{})
	require.NoError(t, err)
	client.ClearActions()
	rec := canary.MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: now, Migration: canary.MigrationID("1-26", now)}
	patch := canary.MovePatch(canary.Workload{ResourceVersion: "11"}, canary.TemplateChanges{}, rec)
	failed, refused, err := c.applyMoves(ctx, "shop", []canary.Move{{Workload: "StatefulSet/db", Record: rec, Patch: patch}})
	require.NoError(t, err)
	assert.Empty(t, failed)
	assert.Empty(t, refused)
	writes := writesOf(client.Actions())
	require.Len(t, writes, 1)
	a := writes[0].(k8stesting.PatchAction)
	assert.Equal(t, "statefulsets", a.GetResource().Resource)
	assert.Equal(t, "db", a.GetName())
	assert.JSONEq(t, string(patch), string(a.GetPatch()))

	_, _, err = c.applyMoves(ctx, "shop", []canary.Move{{Workload: "Job/x", Record: rec, Patch: patch}})
	require.Error(t, err, "no kind meshwave moves is named Job")
	assert.Contains(t, err.Error(), `no workload kind meshwave moves is named "Job/x"`)
}

// The DaemonSet controller counts a pod as updated when its hash is the
// newest ControllerRevision's or its pod-template-generation is the
// DaemonSet's template generation (the deprecated.daemonset.template.generation
// annotation), which stays behind metadata.generation once anything else
// of the spec changed (minReadySeconds, the update strategy). A replaced
// pod seen before its ControllerRevision must not look old: not Ready yet,
// it would be evicted again as an old pod that is down.
func TestADaemonSetPodIsCurrentByItsTemplateGenerationNotTheDaemonSetsGeneration(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "shop", Generation: 5,
		Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "3"}}}
	pod := func(gen string) *CachedPod {
		return &CachedPod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Labels: map[string]string{
			appsv1.DefaultDaemonSetUniqueLabelKey: "new", appsv1.DeprecatedTemplateGeneration: gen}}}
	}
	assert.True(t, daemonPodCurrent(pod("3"), ds, ""), "on the template generation, no revision cached yet")
	assert.True(t, daemonPodCurrent(pod("3"), ds, "old"), "on the template generation, the new revision not cached yet")
	assert.False(t, daemonPodCurrent(pod("2"), ds, ""), "an older template generation")
	assert.False(t, daemonPodCurrent(pod("5"), ds, "old"), "metadata.generation is not the template's")
	assert.True(t, daemonPodCurrent(pod("2"), ds, "new"), "the newest revision's hash")
	delete(ds.Annotations, appsv1.DeprecatedTemplateGeneration)
	assert.False(t, daemonPodCurrent(pod("5"), ds, ""), "no template generation: only the hash counts")
}

// A pod is a StatefulSet's or DaemonSet's only when its controller
// reference names that object's UID: a pod whose owner reference a
// namespace owner wrote by hand, or that belongs to another API's
// StatefulSet of the same name, is not one meshwave may evict as the
// workload's, nor one that holds its rollout back.
func TestAPodWithAForgedOwnerIsNoPodOfTheWorkload(t *testing.T) {
	forged := func(name, kind, owner string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name + "-uid"),
				Annotations:     map[string]string{canary.AnnotationSidecar: `{"revision":"1-25"}`},
				OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: owner, UID: "someone-else", Controller: ptr.To(true), APIVersion: "apps/v1"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	client := fake.NewClientset(append(append(objects(), kindObjects()...), forged("db-9", "StatefulSet", "db"), forged("agent-zz", "DaemonSet", "agent"))...)
	caches := NewCaches(client, 0, nil)
	startCaches(t, caches)
	ns, err := caches.Namespaces.Get("shop")
	require.NoError(t, err)
	snap, err := caches.Gather(ns, "istio-system")
	require.NoError(t, err)
	pods := map[string][]string{}
	for _, w := range snap.Workloads {
		for _, p := range w.Pods {
			pods[w.Name] = append(pods[w.Name], p.Name)
		}
	}
	assert.ElementsMatch(t, []string{"db-0", "db-1"}, pods["StatefulSet/db"])
	assert.ElementsMatch(t, []string{"agent-n1", "agent-n2", "agent-n3"}, pods["DaemonSet/agent"])
}
