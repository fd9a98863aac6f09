package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

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

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
)

// exampleCluster is namespace shop, opted in to 1-26 and still on 1-25,
// and namespace batch, on 1-26 and not opted in, holding 1-25 in a
// CronJob's Job, a Job, a ReplicaSet without a Deployment, a bare pod, and
// a completed and a failed pod.
func exampleCluster() (objs, jobs []runtime.Object) {
	owned := func(apiVersion, kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true)}}
	}
	pod := func(ns, name string, phase corev1.PodPhase, owners []metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: owners,
			Annotations: map[string]string{canary.AnnotationSidecar: `{"containers":["istio-proxy"],"revision":"1-25"}`}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	mwc := func(rev string) *admissionregv1.MutatingWebhookConfiguration {
		return &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-" + rev, Labels: map[string]string{canary.LabelRev: rev}}}
	}
	job := func(name string, owners []metav1.OwnerReference) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "batch", OwnerReferences: owners}}
	}
	objs = []runtime.Object{
		mwc("1-25"), mwc("1-26"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{canary.LabelRev: "1-25"},
			Annotations: map[string]string{canary.AnnotationTargetRevision: "1-26"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "batch", Labels: map[string]string{canary.LabelRev: "1-26"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop", Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: "shop", Labels: map[string]string{"istio": "ingressgateway"},
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "cart-5d8f9", Namespace: "shop", OwnerReferences: owned("apps/v1", "Deployment", "cart")}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "ingress-7b6c5", Namespace: "shop", OwnerReferences: owned("apps/v1", "Deployment", "ingress")}},
		pod("shop", "cart-5d8f9-a", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "cart-5d8f9")),
		pod("shop", "cart-5d8f9-b", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "cart-5d8f9")),
		pod("shop", "ingress-7b6c5-x", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "ingress-7b6c5")),
		pod("batch", "nightly-29120-x7k2p", corev1.PodRunning, owned("batch/v1", "Job", "nightly-29120")),
		pod("batch", "nightly-29119-q2w3e", corev1.PodSucceeded, owned("batch/v1", "Job", "nightly-29119")),
		pod("batch", "migrate-db-q8v5c", corev1.PodRunning, owned("batch/v1", "Job", "migrate-db")),
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "old-web-6c7d8", Namespace: "batch"}},
		pod("batch", "old-web-6c7d8-zz9", corev1.PodRunning, owned("apps/v1", "ReplicaSet", "old-web-6c7d8")),
		pod("batch", "debug", corev1.PodRunning, nil),
		pod("batch", "once", corev1.PodFailed, nil),
	}
	jobs = []runtime.Object{
		job("nightly-29120", owned("batch/v1", "CronJob", "nightly")),
		job("nightly-29119", owned("batch/v1", "CronJob", "nightly")),
		job("migrate-db", nil),
	}
	return objs, jobs
}

func holdersOutput(t *testing.T, objs, jobs []runtime.Object, revision, format string) string {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	require.NoError(t, metav1.AddMetaToScheme(scheme))
	h, err := agent.HoldersNow(context.Background(), fake.NewClientset(objs...), metadatafake.NewSimpleMetadataClient(scheme, jobs...), agent.DefaultConfig(), revision)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, agent.RenderHolders(&out, h, format))
	return out.String()
}

func TestHoldersSaysWhatHoldsARevisionAndWhy(t *testing.T) {
	objs, jobs := exampleCluster()
	golden(t, "holders-1-25.txt", holdersOutput(t, objs, jobs, "1-25", "table"))
	golden(t, "holders-1-25.json", holdersOutput(t, objs, jobs, "1-25", "json"))
}

func TestHoldersOfAnEmptyRevision(t *testing.T) {
	objs, jobs := exampleCluster()
	assert.Equal(t, "revision 1-24 holds no pod\n", holdersOutput(t, objs, jobs, "1-24", "table"))
	assert.Equal(t, `{
  "revision": "1-24",
  "pods": 0,
  "holders": [],
  "finishedPods": 0,
  "finished": []
}
`, holdersOutput(t, objs, jobs, "1-24", "json"))
}

func TestTheSummaryCountsInWords(t *testing.T) {
	one := canary.Holders{Revision: "1-25", Pods: 1, FinishedPods: 1,
		Holders:  []canary.Holder{{Namespace: "batch", Kind: "Pod", Name: "debug", State: canary.HolderCannot, Code: canary.ReasonBarePod, Reason: "needs a person", Pods: []string{"debug"}}},
		Finished: []canary.Holder{{Namespace: "batch", Kind: "Pod", Name: "once", State: canary.HolderFinished, Phase: "Failed", Pods: []string{"once"}}}}
	var out bytes.Buffer
	require.NoError(t, agent.RenderHolders(&out, one, "table"))
	assert.Equal(t, "revision 1-25: 1 pod in 1 workload still runs its proxy; 1 completed or failed pod still carries it\n", strings.SplitAfter(out.String(), "\n")[0])
	one.Pods, one.Holders = 0, nil
	out.Reset()
	require.NoError(t, agent.RenderHolders(&out, one, "table"))
	assert.Equal(t, `revision 1-25: no pod runs its proxy; 1 completed or failed pod still carries it

COMPLETED OR FAILED  OWNER     PHASE   PODS
batch                Pod/once  Failed  once
`, out.String())
}

func TestHoldersTakesOneRevision(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"holders"}, "meshwave: holders takes one argument, <revision>, got []\nrun \"meshwave holders -h\" for its flags\n"},
		{[]string{"holders", "1-25", "-o", "json", "1-26"}, "meshwave: holders takes one argument, <revision>, got [\"1-25\" \"1-26\"]\nrun \"meshwave holders -h\" for its flags\n"},
		{[]string{"holders", "1-25", "-o", "yaml"}, "meshwave: holders: -o \"yaml\" is not table or json\n"},
	} {
		code, stdout, stderr := invoke(t, "meshwave", tc.args...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Empty(t, stdout)
		assert.Equal(t, tc.stderr, stderr)
	}
	code, stdout, _ := invoke(t, "kubectl meshwave", "holders", "-h")
	assert.Equal(t, 0, code)
	assert.Equal(t, `usage: kubectl meshwave holders <revision> [flags]

flags:
  -config string
    	path to the agent's YAML config file (default: built-in defaults)
  -context string
    	kubeconfig context to use
  -kube-api-encoding encoding
    	the encoding the Kubernetes API server sends the built-in kinds in: protobuf (the default, as Kubernetes' own controllers ask for) or json
  -kubeconfig string
    	path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, then in-cluster)
  -o format
    	output format: table or json (default "table")
`, stdout)
}

func TestHoldersExitsThreeWhileAProxyRuns(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 3, cli{name: "meshwave", stderr: &stderr}.exitCode(errHeld))
	assert.Empty(t, stderr.String(), "the output said it")
}
