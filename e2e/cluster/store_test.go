package cluster_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/e2e/cluster"
)

func TestStoredObjectsAreServedAsIfCreatedThroughTheAPI(t *testing.T) {
	c := world(t)
	createNamespace(t, c, "stored")
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stored-a", Namespace: "stored", Labels: map[string]string{"app": "stored"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "example.com/stored:1"}},
			NodeName:   "no-such-node",
		},
	}
	created, err := c.Client.CoreV1().Pods("stored").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)

	copied := created.DeepCopy()
	copied.Name, copied.UID, copied.ResourceVersion = "stored-b", types.UID("5f1e7c1a-0000-4000-8000-000000000001"), ""
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "stored", Namespace: "stored", UID: "5f1e7c1a-0000-4000-8000-000000000002", CreationTimestamp: metav1.Now()},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), Paused: true,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "stored"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "stored"}}, Spec: pod.Spec},
		},
	}
	require.NoError(t, c.Store(ctx, corev1.SchemeGroupVersion, "pods", []cluster.Object{copied}))
	require.NoError(t, c.Store(ctx, appsv1.SchemeGroupVersion, "deployments", []cluster.Object{dep}))

	got, err := c.Client.CoreV1().Pods("stored").Get(ctx, "stored-b", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, copied.UID, got.UID)
	assert.Equal(t, created.Spec, got.Spec, "the spec as stored, defaults included")
	assert.Equal(t, created.ManagedFields, got.ManagedFields)
	assert.NotEmpty(t, got.ResourceVersion, "etcd's revision is its version")
	gotDep, err := c.Client.AppsV1().Deployments("stored").Get(ctx, "stored", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, dep.UID, gotDep.UID)
	assert.True(t, gotDep.Spec.Paused)

	// The watch cache, which informers read, serves it too.
	require.Eventually(t, func() bool {
		list, err := c.Client.CoreV1().Pods("stored").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && len(list.Items) == 2
	}, 30*time.Second, 50*time.Millisecond)

	// An object that exists is refused, as a create would refuse it, and
	// left as it was.
	again := copied.DeepCopy()
	again.Labels = map[string]string{"app": "other"}
	err = c.Store(ctx, corev1.SchemeGroupVersion, "pods", []cluster.Object{again})
	require.ErrorContains(t, err, "exists already")
	got, err = c.Client.CoreV1().Pods("stored").Get(ctx, "stored-b", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "stored", got.Labels["app"])

	// An object with a resourceVersion is refused before anything is written.
	withVersion := copied.DeepCopy()
	withVersion.Name, withVersion.ResourceVersion = "stored-c", "12"
	require.ErrorContains(t, c.Store(ctx, corev1.SchemeGroupVersion, "pods", []cluster.Object{withVersion}), "no resourceVersion")
	_, err = c.Client.CoreV1().Pods("stored").Get(ctx, "stored-c", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "got %v", err)
}
