package writelimits

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"
)

func cartDeployment(templateLabels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop", Labels: map[string]string{"app": "cart"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cart"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: templateLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cart", Image: "cart:1"}}}}},
	}
}

// A pod template that asks for its sidecar with sidecar.istio.io/inject:
// "true" (Istio's per-pod opt-in) moves into ambient with "false", its
// prior value kept in the move record; the rollback puts "true" back, and
// the write limits admit it: meshwave's way back from a failing wave.
func TestTheWriteLimitsAdmitTheRollbackOfAMoveToAmbient(t *testing.T) {
	v := compile(policyNamed(t, "-write-limits"))
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	gvk := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	before := cartDeployment(map[string]string{"app": "cart", "sidecar.istio.io/inject": "true"})
	moved := cartDeployment(map[string]string{"app": "cart", "sidecar.istio.io/inject": "false", "istio.io/dataplane-mode": "ambient"})
	back := cartDeployment(map[string]string{"app": "cart", "sidecar.istio.io/inject": "true"})

	require.Empty(t, admitAs(t, v, gvr, gvk, admission.Update, nil, "shop", "cart", before, moved), "the move into ambient is admitted")
	assert.Empty(t, admitAs(t, v, gvr, gvk, admission.Update, nil, "shop", "cart", moved, back), "the rollback, which puts sidecar.istio.io/inject back to its prior \"true\", is refused")
}

// The ambient namespace labels change running pods' traffic at once
// (unlike istio.io/rev, which reaches new pods only): the write limits
// admit istio.io/dataplane-mode=ambient only where the namespace asked
// for ambient, and istio.io/use-waypoint only to the waypoint it named,
// so a faulty agent cannot enrol or redirect a namespace that did not.
func TestTheWriteLimitsAdmitTheAmbientLabelsOnlyWhereTheNamespaceAsked(t *testing.T) {
	v := compile(policyNamed(t, "-write-limits"))
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	ns := func(labels, annotations map[string]string) *corev1.Namespace {
		return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: "payments", Labels: labels, Annotations: annotations}}
	}
	// A namespace that never opted in.
	old := ns(map[string]string{"istio-injection": "enabled"}, nil)
	enrolled := ns(map[string]string{"istio-injection": "enabled", "istio.io/dataplane-mode": "ambient"}, nil)
	assert.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Update, nil, "", "payments", old, enrolled),
		"a namespace that asked for nothing is enrolled in ambient by the agent")
	waypointed := ns(map[string]string{"istio-injection": "enabled", "istio.io/use-waypoint": "anything"}, nil)
	assert.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Update, nil, "", "payments", old, waypointed),
		"a namespace that asked for nothing is put behind a waypoint by the agent")

	// A namespace moving to ambient behind "waypoint": another name.
	asked := map[string]string{"meshwave.io/target-revision": "1-26", "meshwave.io/target-mode": "ambient", "meshwave.io/waypoint": "waypoint"}
	assert.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Update, nil, "", "payments",
		ns(map[string]string{"istio.io/rev": "1-26"}, asked), ns(map[string]string{"istio.io/rev": "1-26", "istio.io/use-waypoint": "elsewhere"}, asked)),
		"the namespace asked for waypoint, and is put behind another")
}

// authorizationPolicy is a selector policy of namespace shop.
func authorizationPolicy(name, uid string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": name}}}}}
	u.SetNamespace("shop")
	u.SetName(name)
	u.SetUID(k8stypes.UID(uid))
	return u
}

// The policy limits match a copy's own name and UID in the namespace's
// copies: a label or annotation "uid" or "name" on a copied policy (its
// owner's to write) never lets the agent delete another policy, or create
// one of a planted name.
func TestThePolicyLimitsMatchACopysOwnUIDAndNameOnly(t *testing.T) {
	v := compile(policyNamed(t, "-policy-limits"))
	gvr := schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	gvk := schema.GroupVersionKind{Group: "security.istio.io", Version: "v1", Kind: "AuthorizationPolicy"}
	// The copy meshwave keeps of cart-admin, which carried a label and an
	// annotation of its owner's.
	raw, err := json.Marshal([]canary.SavedPolicy{{Name: "cart-admin", UID: "uid-cart-admin", Migration: "1-26@2026-11-29T12:00:00Z",
		MatchLabels: map[string]string{"app": "cart"},
		Object: json.RawMessage(`{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"annotations":{"uid":"uid-platform-guard"},` +
			`"labels":{"name":"anything-at-all"},"name":"cart-admin","namespace":"shop"},"spec":{"selector":{"matchLabels":{"app":"cart"}}}}`)}})
	require.NoError(t, err)
	copies := string(raw)
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{
		"meshwave.io/delete-replaced-policies": "true", "meshwave.io/replaced-policies": copies}}}

	require.Empty(t, admitAs(t, v, gvr, gvk, admission.Delete, shop, "shop", "cart-admin", authorizationPolicy("cart-admin", "uid-cart-admin"), nil),
		"the policy the copy is of may be deleted")
	require.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Delete, shop, "shop", "web-admin", authorizationPolicy("web-admin", "uid-web-admin"), nil),
		"a policy the copies do not name may not be deleted")
	require.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Create, shop, "shop", "web-admin", nil, authorizationPolicy("web-admin", "")),
		"a policy the copies do not name may not be created")
	assert.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Delete, shop, "shop", "platform-guard", authorizationPolicy("platform-guard", "uid-platform-guard"), nil),
		"platform-guard, of which no copy is kept, may be deleted because a copy's annotation names its UID")
	assert.NotEmpty(t, admitAs(t, v, gvr, gvk, admission.Create, shop, "shop", "anything-at-all", nil, authorizationPolicy("anything-at-all", "")),
		"a policy of which no copy is kept may be created because a copy's label has its name")
}
