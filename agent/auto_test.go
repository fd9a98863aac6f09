package agent

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

func sailIstio(name, active string) *unstructured.Unstructured {
	u := unstructuredObj(sailIstiosResource, "Istio", "", name, map[string]any{})
	if active != "" {
		u = withStatus(u, map[string]any{"activeRevisionName": active})
	}
	return u
}

func TestAutoFollowsSailsIstioNamedDefaultElseTheOnlyOneThatNamesARevision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		istios   []*unstructured.Unstructured
		rev, why string
	}{
		{"none", nil, "", ""},
		{"one without a status", []*unstructured.Unstructured{sailIstio("default", "")}, "", ""},
		{"the one named default", []*unstructured.Unstructured{sailIstio("other", "other-v1-26-1"), sailIstio("default", "default-v1-27-0")},
			"default-v1-27-0", "Sail's Istio default, status.activeRevisionName"},
		{"the only one naming a revision", []*unstructured.Unstructured{sailIstio("mesh", "mesh-v1-27-0"), sailIstio("spare", "")},
			"mesh-v1-27-0", "Sail's Istio mesh, status.activeRevisionName"},
		{"two, none named default: which one the mesh means cannot be told", []*unstructured.Unstructured{sailIstio("a", "a-v1"), sailIstio("b", "b-v1")}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev, why := sailActiveRevision(tc.istios)
			assert.Equal(t, tc.rev, rev)
			assert.Equal(t, tc.why, why)
		})
	}
}

// The default tag names auto's revision; once Sail's CRD is served and its
// Istio names an active revision, that one does: Sail moves its own tag.
func TestAutoResolvesToTheDefaultTagThenToSailsActiveRevision(t *testing.T) {
	disc := &servedKinds{served: map[schema.GroupVersionResource]bool{}}
	c, dyn := newCompatCaches(t, disc, 20*time.Millisecond)
	for _, mwc := range []*admissionregistrationv1.MutatingWebhookConfiguration{
		{ObjectMeta: metav1.ObjectMeta{Name: injectorPrefix + "1-26", Labels: map[string]string{canary.LabelRev: "1-26"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: injectorPrefix + "default-v1-27-0", Labels: map[string]string{canary.LabelRev: "default-v1-27-0"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: tagPrefix + "default", Labels: map[string]string{canary.LabelRev: "1-26", canary.LabelTag: "default"}}},
	} {
		require.NoError(t, c.informers["webhooks"].GetStore().Add(mwc))
	}
	m, err := c.revisions()
	require.NoError(t, err)
	rev, ok := m.Resolve(canary.TargetAuto)
	assert.True(t, ok)
	assert.Equal(t, "1-26", rev)
	assert.Equal(t, "the tag default", m.AutoFrom)

	_, err = dyn.Resource(sailIstiosResource).Update(t.Context(), withStatus(sailIstio("default", ""), map[string]any{"activeRevisionName": "default-v1-27-0"}), metav1.UpdateOptions{})
	require.NoError(t, err)
	disc.serve(sailIstiosResource)
	require.Eventually(t, func() bool {
		m, err := c.revisions()
		return err == nil && m.Auto == "default-v1-27-0"
	}, 5*time.Second, 10*time.Millisecond)
	m, err = c.revisions()
	require.NoError(t, err)
	assert.Equal(t, "Sail's Istio default, status.activeRevisionName", m.AutoFrom)
}
