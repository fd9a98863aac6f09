package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

// A ControllerRevision keeps its controller, revision number, hash label
// and, of its data, only the restart stamp of the template it holds; data
// that holds no readable template has none.
func TestTheTransformKeepsOfAControllerRevisionOnlyItsTemplatesRestartStamp(t *testing.T) {
	owners := append([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "not-the-controller", UID: "uid-cm"}},
		controlledBy("apps/v1", "DaemonSet", "agent", "uid-agent")...)
	revision := func(data runtime.RawExtension) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-7c9d", Namespace: "shop", UID: "uid-rev", ResourceVersion: "77",
			Labels:          map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: "7c9d", "app": "agent"},
			Annotations:     map[string]string{"deprecated.daemonset.template.generation": "4"},
			OwnerReferences: owners, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}},
			Revision: 4, Data: data}
	}
	kept := func(stamp string) *CachedControllerRevision {
		return &CachedControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-7c9d", Namespace: "shop", ResourceVersion: "77",
			OwnerReferences: controlledBy("apps/v1", "DaemonSet", "agent", "uid-agent")}, Revision: 4, Hash: "7c9d", RestartedAt: stamp}
	}
	tf := transform(nil)
	for _, tc := range []struct {
		name  string
		data  runtime.RawExtension
		stamp string
	}{
		{"the template's stamp is kept", revisionData(t, map[string]string{canary.AnnotationRestartedAt: "2026-11-29T12:00:00Z", "sidecar.istio.io/proxyCPU": "50m"}), "2026-11-29T12:00:00Z"},
		{"a template without a stamp has none", revisionData(t, map[string]string{"sidecar.istio.io/proxyCPU": "50m"}), ""},
		{"data decoded into an object reads alike", runtime.RawExtension{Object: &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{canary.AnnotationRestartedAt: "2026-11-29T12:00:01Z"}}}}}}, "2026-11-29T12:00:01Z"},
		{"data that is not a template patch has none", runtime.RawExtension{Raw: []byte(`{"spec":{"template":"not an object"}}`)}, ""},
		{"data that is not JSON has none", runtime.RawExtension{Raw: []byte(`{"spec":`)}, ""},
		{"no data has none", runtime.RawExtension{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			once, err := tf(revision(tc.data))
			require.NoError(t, err)
			assert.Equal(t, kept(tc.stamp), once)
			twice, err := tf(once)
			require.NoError(t, err)
			assert.Equal(t, once, twice, "a kept revision passes through as it is")
		})
	}
}

// revisionOf is a ControllerRevision of a StatefulSet or DaemonSet whose
// template carries stamp ("" for none).
func revisionOf(t testing.TB, kind, owner string, uid types.UID, name string, revision int64, stamp string) *appsv1.ControllerRevision {
	annotations := map[string]string{}
	if stamp != "" {
		annotations[canary.AnnotationRestartedAt] = stamp
	}
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name),
		Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: name}, OwnerReferences: controlledBy("apps/v1", kind, owner, uid)},
		Revision: revision, Data: revisionData(t, annotations)}
}

// A StatefulSet's or DaemonSet's rolled-out restart is the newest stamp
// among the templates of its own ControllerRevisions, matched by their
// controller's UID: a revision that its controller reuses for a template
// put back (numbered anew) does not hide the stamp of the one before, and
// the revisions of a workload of another kind or UID under the same name
// count for nothing.
func TestAStatefulSetsOrDaemonSetsRolledOutRestartIsTheNewestStampOfItsControllerRevisions(t *testing.T) {
	const waveStamp, later = "2026-11-29T12:00:00Z", "2026-11-29T13:00:00Z"
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", UID: "uid-db"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}},
		revisionOf(t, "StatefulSet", "db", "uid-db", "db-1", 1, "2026-11-28T09:00:00Z"),
		revisionOf(t, "StatefulSet", "db", "uid-db", "db-2", 2, waveStamp),
		// An earlier StatefulSet named db, and a DaemonSet named db.
		revisionOf(t, "StatefulSet", "db", "uid-db-earlier", "db-x", 7, later),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", UID: "uid-db-agent"}},
		revisionOf(t, "DaemonSet", "db", "uid-db-agent", "db-agent-1", 1, ""),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "shop", UID: "uid-agent"}},
		revisionOf(t, "DaemonSet", "agent", "uid-agent", "agent-1", 1, ""),
		revisionOf(t, "DaemonSet", "agent", "uid-agent", "agent-2", 2, waveStamp),
		revisionOf(t, "DaemonSet", "db", "uid-db", "agent-x", 9, later), // names the StatefulSet's UID under another kind
	}
	client := fake.NewClientset(objs...)
	caches := NewCaches(client, 0, nil)
	ctx := startCaches(t, caches)
	ns, err := caches.Namespaces.Get("shop")
	require.NoError(t, err)
	rolledOut := func() map[string]string {
		snap, err := caches.Gather(ns, "istio-system")
		require.NoError(t, err)
		out := map[string]string{}
		for _, w := range snap.Workloads {
			out[w.Name] = ""
			if !w.RolledOutRestart.IsZero() {
				out[w.Name] = w.RolledOutRestart.UTC().Format(time.RFC3339)
			}
		}
		return out
	}
	assert.Equal(t, map[string]string{"StatefulSet/db": waveStamp, "DaemonSet/db": "", "DaemonSet/agent": waveStamp}, rolledOut())

	// A sync puts both templates back: each controller reuses its first
	// revision, numbered anew. The stamp rolled out in the second stays.
	for _, name := range []string{"db-1", "agent-1"} {
		r, err := client.AppsV1().ControllerRevisions("shop").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		r.Revision = 3
		r.ResourceVersion = "200"
		_, err = client.AppsV1().ControllerRevisions("shop").Update(ctx, r, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		db, err1 := caches.Revisions.In("shop").Get("db-1")
		agent, err2 := caches.Revisions.In("shop").Get("agent-1")
		return err1 == nil && err2 == nil && db.Revision == 3 && agent.Revision == 3
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, map[string]string{"StatefulSet/db": waveStamp, "DaemonSet/db": "", "DaemonSet/agent": waveStamp}, rolledOut())
}

// A StatefulSet or a DaemonSet restarted in a wave, then replaced whole
// from git (its move record and restart stamp gone) while the wave is in
// flight, is reported and the wave pauses: its ControllerRevisions show
// the wave's restart. It is not patched a second time.
func TestAStatefulSetOrDaemonSetReplacedWholeFromGitIsReportedNotRestartedAgain(t *testing.T) {
	argo := map[string]string{canary.LabelArgoInstance: "shop"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}}}
	for _, tc := range []struct {
		kind, resource, id, described string
		object                        runtime.Object
		pod                           map[string]string
	}{
		{"StatefulSet", "statefulsets", "StatefulSet/db", "statefulset db", &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "twins", UID: "uid-db", ResourceVersion: "40", Generation: 1, Labels: argo},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Template: template},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
				CurrentRevision: "db-1", UpdateRevision: "db-1"},
		}, map[string]string{"app": "db", appsv1.ControllerRevisionHashLabelKey: "db-1"}},
		{"DaemonSet", "daemonsets", "DaemonSet/db", "daemonset db", &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "twins", UID: "uid-db", ResourceVersion: "40", Generation: 1, Labels: argo},
			Spec:       appsv1.DaemonSetSpec{Template: template},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1},
		}, map[string]string{"app": "db", appsv1.DefaultDaemonSetUniqueLabelKey: "db-1"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			inTwins := func(r *appsv1.ControllerRevision) *appsv1.ControllerRevision { r.Namespace = "twins"; return r }
			client := fake.NewClientset(append(objects(),
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "twins", ResourceVersion: "30", Labels: map[string]string{canary.LabelRev: "1-25"},
					Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationPriority: "10"}}},
				tc.object, inTwins(revisionOf(t, tc.kind, "db", "uid-db", "db-1", 1, "")),
				readyPod("twins", "db-0", tc.pod, controlledBy("apps/v1", tc.kind, "db", "uid-db")),
			)...)
			apiserverResourceVersions(client)
			cfg := DefaultConfig()
			cfg.LeaderElection.Enabled = false
			recorder := record.NewFakeRecorder(100)
			clock := clocktesting.NewFakeClock(now)
			c, err := New(Options{Client: client, Config: cfg, Clock: clock, Recorder: recorder})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			require.NoError(t, c.Start(ctx))
			t.Cleanup(c.Shutdown)
			client.ClearActions()

			require.NoError(t, c.sync(ctx, "twins"))
			assert.Equal(t, []string{"patch namespaces twins", "patch " + tc.resource + " twins/db"}, writeTargets(client.Actions()))

			// Its controller records the restarted template in a revision;
			// then a sync replaces the object from git, without meshwave's
			// keys.
			_, err = client.AppsV1().ControllerRevisions("twins").Create(ctx, inTwins(revisionOf(t, tc.kind, "db", "uid-db", "db-2", 2, now.Format(time.RFC3339))), metav1.CreateOptions{})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				ns, err := c.caches.Namespaces.Get("twins")
				_, revErr := c.caches.Revisions.In("twins").Get("db-2")
				return err == nil && revErr == nil && c.expect.satisfied(ns, c.cachedWorkload("twins"), c.cachedPod("twins"), now)
			}, 5*time.Second, 10*time.Millisecond)
			fromGit := tc.object.DeepCopyObject()
			fromGit.(metav1.Object).SetResourceVersion("2000")
			gvr := appsv1.SchemeGroupVersion.WithResource(tc.resource)
			require.NoError(t, client.Tracker().Update(gvr, fromGit, "twins"))
			require.Eventually(t, func() bool {
				m, _, ok := c.caches.workloadMeta("twins", tc.id)
				return ok && m.GetResourceVersion() == "2000"
			}, 5*time.Second, 10*time.Millisecond)
			clock.Step(5 * time.Second)
			client.ClearActions()

			require.NoError(t, c.sync(ctx, "twins"))
			assert.Equal(t, []string{"patch namespaces twins"}, writeTargets(client.Actions()), "the status and the pause; the workload is not patched")
			n, err := client.CoreV1().Namespaces().Get(ctx, "twins", metav1.GetOptions{})
			require.NoError(t, err)
			st, _, err := canary.ParseStatus(n.Annotations)
			require.NoError(t, err)
			assert.Equal(t, canary.PhasePaused, st.Phase)
			assert.Equal(t, "wave 1 paused: the move of "+tc.described+" was undone by Argo CD application shop", st.Reason)
			assert.Equal(t, "true", n.Annotations[canary.AnnotationPaused])
			close(recorder.Events)
			var reverted []string
			for e := range recorder.Events {
				if strings.HasPrefix(e, "Warning TemplateReverted ") {
					reverted = append(reverted, e)
				}
			}
			assert.Equal(t, []string{"Warning TemplateReverted " + tc.described + " was restarted in wave 1 (a ControllerRevision carries its stamp 2026-11-29T12:00:00Z), " +
				"then Argo CD application shop put its template back and removed its meshwave.io/move record: meshwave does not restart it again on its own. " +
				"Add meshwave's keys to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option; then remove meshwave.io/paused to move it again, or set meshwave.io/skip on it"}, reverted)
		})
	}
}
