package agent

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// controlledBy is a controller reference to kind/name of that UID.
func controlledBy(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
}

// readyPod is a Running, Ready pod of ns injected by 1-25.
func readyPod(ns, name string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
	p := injectedPod(ns, name, "1-25", corev1.PodRunning, owners)
	p.UID = types.UID("uid-" + name)
	p.Labels = labels
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return p
}

// revisionData is a ControllerRevision's data as the StatefulSet and
// DaemonSet controllers write it: a patch that replaces the template,
// here with the given template annotations.
func revisionData(t testing.TB, annotations map[string]string) runtime.RawExtension {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"$patch":   "replace",
		"metadata": map[string]any{"labels": map[string]string{"app": "x"}, "annotations": annotations},
		"spec":     map[string]any{"containers": []map[string]any{{"name": "app", "image": "registry.example/x:1.0"}}},
	}}})
	require.NoError(t, err)
	return runtime.RawExtension{Raw: raw}
}

// twinObjects are namespace twins, opted in to 1-26, holding a Deployment
// and a DaemonSet both named web, each rolled out once by its controller:
// a ReplicaSet of the one, a ControllerRevision of the other, a Ready pod
// of each.
func twinObjects(t testing.TB) []runtime.Object {
	return []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "twins", ResourceVersion: "30", Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationPriority: "10"}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "twins", UID: "uid-deployment-web", ResourceVersion: "31", Generation: 1,
				Annotations: map[string]string{revisionAnno: "1"}},
			Spec:   appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1},
		},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "twins", UID: "uid-rs-web-1",
			OwnerReferences: controlledBy("apps/v1", "Deployment", "web", "uid-deployment-web"), Annotations: map[string]string{revisionAnno: "1"}}},
		readyPod("twins", "web-1-a", map[string]string{"app": "web"}, controlledBy("apps/v1", "ReplicaSet", "web-1", "uid-rs-web-1")),
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "twins", UID: "uid-daemonset-web", ResourceVersion: "32", Generation: 1,
				Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "1"}},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web-agent"}}}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1},
		},
		&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "web-h1", Namespace: "twins",
			OwnerReferences: controlledBy("apps/v1", "DaemonSet", "web", "uid-daemonset-web"),
			Labels:          map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "h1"}}, Revision: 1, Data: revisionData(t, nil)},
		readyPod("twins", "web-node-1", map[string]string{"app": "web-agent", appsv1.DefaultDaemonSetUniqueLabelKey: "h1"},
			controlledBy("apps/v1", "DaemonSet", "web", "uid-daemonset-web")),
	}
}

// A DaemonSet and a StatefulSet that share a Deployment's name take none
// of the restarts its ReplicaSets rolled out: each kind's rolled-out
// restart is read from its own controller's objects, by UID.
func TestAWorkloadTakesOnlyTheRestartsItsOwnControllerRolledOut(t *testing.T) {
	stamp := "2026-11-29T11:00:00Z"
	objs := append(twinObjects(t),
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "twins", UID: "uid-rs-web-2",
			OwnerReferences: controlledBy("apps/v1", "Deployment", "web", "uid-deployment-web"), Annotations: map[string]string{revisionAnno: "2"}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{canary.AnnotationRestartedAt: stamp}}}}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "twins", UID: "uid-statefulset-web"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}})
	caches := NewCaches(fake.NewClientset(objs...), 0, nil)
	startCaches(t, caches)
	ns, err := caches.Namespaces.Get("twins")
	require.NoError(t, err)
	snap, err := caches.Gather(ns, "istio-system")
	require.NoError(t, err)

	rolledOut := map[string]time.Time{}
	pods := map[string][]string{}
	for _, w := range snap.Workloads {
		rolledOut[w.Name] = w.RolledOutRestart
		for _, p := range w.Pods {
			pods[w.Name] = append(pods[w.Name], p.Name)
		}
	}
	at, err := time.Parse(time.RFC3339, stamp)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Time{"web": at, "DaemonSet/web": {}, "StatefulSet/web": {}}, rolledOut)
	assert.Equal(t, map[string][]string{"web": {"web-1-a"}, "DaemonSet/web": {"web-node-1"}}, pods)
}

// One missed patch of a wave's DaemonSet (a conflict: the object changed
// since the decision) is patched again at the next decision, even though
// a Deployment of the same name rolled out the wave's restart meanwhile:
// that restart is the Deployment's, not a sign that the DaemonSet was
// restarted and then put back by a GitOps self-heal.
func TestADaemonSetThatMissedItsPatchIsPatchedAgainBesideADeploymentOfItsName(t *testing.T) {
	client := fake.NewClientset(append(objects(), twinObjects(t)...)...)
	apiserverResourceVersions(client)
	conflicts := 0
	client.PrependReactor("patch", "daemonsets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			return false, nil, nil
		}
		conflicts++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "web",
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	})
	cfg := DefaultConfig()
	cfg.LeaderElection.Enabled = false
	cfg.CanarySize = 2
	recorder := record.NewFakeRecorder(100)
	c, err := New(Options{Client: client, Config: cfg, Clock: clocktesting.NewFakeClock(now), Recorder: recorder})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(c.Shutdown)
	client.ClearActions()

	// Wave 1 holds both: the Deployment is restarted, the DaemonSet's
	// patch meets a conflict.
	err = c.sync(ctx, "twins")
	require.True(t, apierrors.IsConflict(err), "%v", err)
	writes := writeTargets(client.Actions())
	require.NotEmpty(t, writes)
	assert.Equal(t, "patch namespaces twins", writes[0])
	assert.ElementsMatch(t, []string{"patch deployments twins/web", "patch daemonsets twins/web"}, writes[1:], "sent side by side")
	dep, err := client.AppsV1().Deployments("twins").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	stamp := dep.Spec.Template.Annotations[canary.AnnotationRestartedAt]
	require.Equal(t, "2026-11-29T12:00:00Z", stamp)

	// The Deployment controller rolls the restart out in a new ReplicaSet.
	_, err = client.AppsV1().ReplicaSets("twins").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "twins", UID: "uid-rs-web-2",
		OwnerReferences: controlledBy("apps/v1", "Deployment", "web", "uid-deployment-web"), Annotations: map[string]string{revisionAnno: "2"}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{canary.AnnotationRestartedAt: stamp}}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("twins")
		_, rsErr := c.caches.ReplicaSets.In("twins").Get("web-2")
		return err == nil && rsErr == nil && c.expect.satisfied(ns, c.cachedWorkload("twins"), c.cachedPod("twins"), now)
	}, 5*time.Second, 10*time.Millisecond)
	client.ClearActions()

	require.NoError(t, c.sync(ctx, "twins"))
	assert.Equal(t, []string{"patch namespaces twins", "patch daemonsets twins/web"}, writeTargets(client.Actions()), "the DaemonSet's move is sent again")
	ds, err := client.AppsV1().DaemonSets("twins").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	rec, ok := canary.ReadMoveRecord(ds.Annotations)
	require.True(t, ok)
	assert.Equal(t, 1, rec.Wave)
	assert.Equal(t, stamp, ds.Spec.Template.Annotations[canary.AnnotationRestartedAt])
	n, err := client.CoreV1().Namespaces().Get(ctx, "twins", metav1.GetOptions{})
	require.NoError(t, err)
	st, _, err := canary.ParseStatus(n.Annotations)
	require.NoError(t, err)
	assert.Equal(t, canary.PhaseMigrating, st.Phase, st.Reason)
	assert.NotContains(t, n.Annotations, canary.AnnotationPaused)
	close(recorder.Events)
	for e := range recorder.Events {
		assert.NotContains(t, e, "TemplateReverted")
	}
}

// A ReplicaSet whose controller reference names a Deployment by name under
// another UID (written by hand, or another API's Deployment of that name),
// and a pod whose reference names a ReplicaSet, StatefulSet or Job the
// caches hold under another UID, belong to none of them: their pods
// neither hold the Deployment's rollout gate nor feed its revert
// detection, and the holders and the status account for them apart.
func TestAControllerReferenceIsFollowedOnlyToTheObjectOfItsUID(t *testing.T) {
	const ns = "shop"
	real, impostor := "2026-11-29T11:00:00Z", "2026-11-29T13:00:00Z"
	rs := func(name string, uid types.UID, owners []metav1.OwnerReference, revision, stamp string) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid, OwnerReferences: owners,
			Annotations: map[string]string{revisionAnno: revision}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{canary.AnnotationRestartedAt: stamp}}}}}
	}
	app := map[string]string{"app": "api"}
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{canary.LabelRev: "1-25"}}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns, UID: "uid-api", Generation: 2, Annotations: map[string]string{revisionAnno: "2"}},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}}},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1},
		},
		rs("api-2", "uid-api-2", controlledBy("apps/v1", "Deployment", "api", "uid-api"), "2", real),
		readyPod(ns, "api-2-a", app, controlledBy("apps/v1", "ReplicaSet", "api-2", "uid-api-2")),
		// Names Deployment api, under another UID: its pod is not api's, so
		// neither an old pod that holds api's rollout gate, nor a restart of
		// api's.
		rs("api-impostor", "uid-impostor", controlledBy("apps/v1", "Deployment", "api", "uid-not-api"), "1", impostor),
		readyPod(ns, "api-impostor-a", app, controlledBy("apps/v1", "ReplicaSet", "api-impostor", "uid-impostor")),
		// Another API's Deployment named api.
		rs("api-other", "uid-other", controlledBy("example.com/v1", "Deployment", "api", "uid-example-api"), "2", impostor),
		readyPod(ns, "api-other-a", app, controlledBy("apps/v1", "ReplicaSet", "api-other", "uid-other")),
		// A pod of an earlier ReplicaSet named api-2, deleted since.
		readyPod(ns, "api-2-old", app, controlledBy("apps/v1", "ReplicaSet", "api-2", "uid-api-2-earlier")),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "uid-db"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)},
			Status: appsv1.StatefulSetStatus{UpdateRevision: "db-1"}},
		readyPod(ns, "db-0", map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-1"}, controlledBy("apps/v1", "StatefulSet", "db", "uid-db")),
		// A pod of an earlier StatefulSet named db.
		readyPod(ns, "db-1", map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-1"}, controlledBy("apps/v1", "StatefulSet", "db", "uid-db-earlier")),
		// A Job's pod, and the pod of an earlier Job of that name.
		readyPod(ns, "migrate-a", nil, controlledBy("batch/v1", "Job", "migrate", "uid-migrate")),
		readyPod(ns, "migrate-old", nil, controlledBy("batch/v1", "Job", "migrate", "uid-migrate-earlier")),
	}
	job := jobMeta(ns, "migrate", nil)
	job.UID = "uid-migrate"
	caches := NewCaches(fake.NewClientset(objs...), 0, nil)
	caches.WatchJobs(metadataClient(job), 0)
	startCaches(t, caches)

	n, err := caches.Namespaces.Get(ns)
	require.NoError(t, err)
	snap, err := caches.Gather(n, "istio-system")
	require.NoError(t, err)
	byName := map[string]canary.Workload{}
	for _, w := range snap.Workloads {
		byName[w.Name] = w
	}
	api := byName["api"]
	require.Len(t, api.Pods, 1)
	assert.Equal(t, "api-2-a", api.Pods[0].Name)
	assert.True(t, api.Pods[0].Current)
	assert.Equal(t, time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC), api.RolledOutRestart, "the impostors' later stamps are not api's")
	done, detail := analysis.RolledOut(api)
	assert.True(t, done, "api has rolled out; the impostors' pods hold nothing: %s", detail)
	db := byName["StatefulSet/db"]
	require.Len(t, db.Pods, 1)
	assert.Equal(t, "db-0", db.Pods[0].Name)

	assert.Equal(t, []canary.Unmovable{
		{ID: "Job/migrate", Revisions: map[string]int{"1-25": 1}},
		{ID: "Pod/api-2-old", Revisions: map[string]int{"1-25": 1}},
		{ID: "Pod/db-1", Revisions: map[string]int{"1-25": 1}},
		{ID: "Pod/migrate-old", Revisions: map[string]int{"1-25": 1}},
		{ID: "ReplicaSet/api-impostor", Revisions: map[string]int{"1-25": 1}},
		{ID: "ReplicaSet/api-other", Revisions: map[string]int{"1-25": 1}},
	}, snap.Unmovable)

	owners := map[string]canary.Owner{}
	pods, err := caches.Pods.In(ns).List(labels.Everything())
	require.NoError(t, err)
	for _, p := range pods {
		owners[p.Name] = caches.ownerOf(p)
	}
	assert.Equal(t, map[string]canary.Owner{
		"api-2-a":        {Kind: "Deployment", Name: "api"},
		"api-impostor-a": {Kind: "ReplicaSet", Name: "api-impostor"},
		"api-other-a":    {Kind: "ReplicaSet", Name: "api-other"},
		"api-2-old":      {Kind: "Pod", Name: "api-2-old"},
		"db-0":           {Kind: "StatefulSet", Name: "db"},
		"db-1":           {Kind: "Pod", Name: "db-1"},
		"migrate-a":      {Kind: "Job", Name: "migrate"},
		"migrate-old":    {Kind: "Pod", Name: "migrate-old"},
	}, owners)
}

// writeTargets are a fake client's writes as "verb resource namespace/name"
// ("verb namespaces name" for a namespace), in order.
func writeTargets(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range writesOf(actions) {
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		if c, ok := a.(k8stesting.CreateAction); ok && name == "" {
			if m, ok := c.GetObject().(metav1.Object); ok {
				name = m.GetName() // an eviction names its pod
			}
		}
		target := a.GetVerb() + " " + a.GetResource().Resource + " "
		if a.GetNamespace() != "" {
			target += a.GetNamespace() + "/"
		}
		out = append(out, target+name)
	}
	return out
}
