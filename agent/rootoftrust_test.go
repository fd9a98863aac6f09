package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func selfSigned(t *testing.T, host string) (pemBytes []byte, fingerprint string) {
	t.Helper()
	certPEM, _, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	require.NoError(t, err)
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	sum := sha256.Sum256(block.Bytes)
	return pem.EncodeToMemory(block), "sha256:" + hex.EncodeToString(sum[:])
}

// The root a revision distributes is read from the webhooks istiod
// patches (named *sidecar-injector.istio.io), every certificate of the
// bundle once, sorted; the cache keeps one copy of an injector's bundle
// and none of any other configuration's.
func TestARevisionsRootsAreTheCertificatesOfItsInjectorsBundle(t *testing.T) {
	old, oldFP := selfSigned(t, "old-root")
	next, nextFP := selfSigned(t, "new-root")
	bundle := append(append([]byte{}, old...), next...)
	hook := func(name string, ca []byte) admissionregv1.MutatingWebhook {
		return admissionregv1.MutatingWebhook{Name: name, ClientConfig: admissionregv1.WebhookClientConfig{CABundle: ca}}
	}
	injector := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: injectorPrefix + "1-26"},
		Webhooks: []admissionregv1.MutatingWebhook{
			hook("other.example.io", []byte("not a bundle")),
			hook("rev.namespace.sidecar-injector.istio.io", append(bundle, old...)),
			hook("rev.object.sidecar-injector.istio.io", bundle),
		},
	}
	want := []string{oldFP, nextFP}
	if nextFP < oldFP {
		want = []string{nextFP, oldFP}
	}
	assert.Equal(t, want, rootsOf(injector))

	slim, err := transform(nil)(injector.DeepCopy())
	require.NoError(t, err)
	got := slim.(*admissionregv1.MutatingWebhookConfiguration)
	assert.Nil(t, got.Webhooks[0].ClientConfig.CABundle)
	assert.NotNil(t, got.Webhooks[1].ClientConfig.CABundle)
	assert.Nil(t, got.Webhooks[2].ClientConfig.CABundle, "one copy is kept")
	assert.Equal(t, want, rootsOf(got))

	tag := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: tagPrefix + "default"},
		Webhooks: []admissionregv1.MutatingWebhook{hook("rev.namespace.sidecar-injector.istio.io", bundle)}}
	slim, err = transform(nil)(tag)
	require.NoError(t, err)
	assert.Nil(t, slim.(*admissionregv1.MutatingWebhookConfiguration).Webhooks[0].ClientConfig.CABundle, "a tag's bundle is its revision's")

	assert.Nil(t, rootsOf(&admissionregv1.MutatingWebhookConfiguration{Webhooks: []admissionregv1.MutatingWebhook{hook("rev.namespace.sidecar-injector.istio.io", nil)}}))
}
