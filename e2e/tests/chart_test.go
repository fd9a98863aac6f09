package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/checkout"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
	"github.com/meshwave/meshwave/e2e/world"
)

// repoRoot is the root of the repository.
func repoRoot(t *testing.T) string {
	root, err := checkout.Root()
	require.NoError(t, err)
	return root
}

// helm runs the helm make istio builds from hack/tools (the one make
// helm-lint runs), so that the tests build it no second time.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runHelm(t, args...)
	require.NoError(t, err, "helm %v: %s", args, stderr)
	return out
}

func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	artifacts, err := mesh.FindIstioArtifacts()
	require.NoError(t, err)
	cmd := exec.Command(artifacts.Helm, args...)
	cmd.Dir = filepath.Join(repoRoot(t), "hack", "tools")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out), stderr.String(), err
}

func decodeObjects(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// operatorCRDs returns the ServiceMonitor and PrometheusRule CRDs from the
// prometheus-operator Go module, fetched through the module proxy.
func operatorCRDs(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator@v0.85.0")
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	require.NoError(t, err, "download prometheus-operator's CRDs")
	var mod struct{ Dir string }
	require.NoError(t, json.Unmarshal(out, &mod))
	var crds []*unstructured.Unstructured
	for _, name := range []string{"servicemonitors", "prometheusrules"} {
		raw, err := os.ReadFile(filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+name+".yaml"))
		require.NoError(t, err)
		crds = append(crds, decodeObjects(t, string(raw))...)
	}
	return crds
}

// apply creates objects with server-side apply, so that the apiserver
// validates each one for real.
func apply(t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	cached := memory.NewMemCacheClient(disc)
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		var mapping *meta.RESTMapping
		require.Eventually(t, func() bool {
			cached.Invalidate()
			mapping, err = restmapper.NewDeferredDiscoveryRESTMapper(cached).RESTMapping(gvk.GroupKind(), gvk.Version)
			return err == nil
		}, 30*time.Second, 200*time.Millisecond, "the apiserver serves %s", gvk)
		raw, err := json.Marshal(obj.Object)
		require.NoError(t, err)
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		_, err = ri.Patch(context.Background(), obj.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: "e2e", Force: ptrTo(true)})
		require.NoError(t, err, "apply %s %s", gvk.Kind, obj.GetName())
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestTheChartInstallsAndItsRBACSuffices lints and renders the chart,
// checks its RBAC and configuration, runs promtool on its alerts, applies
// every object to the real apiserver (the ServiceMonitor and
// PrometheusRule against the prometheus-operator's CRDs), and then runs
// the agent as the chart's service account through a whole migration.
func TestTheChartInstallsAndItsRBACSuffices(t *testing.T) {
	f := fixture.New(t, world.Options{})
	chart := filepath.Join(repoRoot(t), "charts", "meshwave")
	lint := helm(t, "lint", chart, "--namespace", "istio-system")
	assert.Contains(t, lint, "1 chart(s) linted, 0 chart(s) failed")
	// --api-versions says what a cluster's discovery tells helm install:
	// this apiserver serves ValidatingAdmissionPolicy.
	manifests := helm(t, "template", "meshwave", chart, "--namespace", "istio-system",
		"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
		"--set", "prometheusRule.enabled=true", "--set", "serviceMonitor.enabled=true", "--set", "dashboard.enabled=true")
	objs := decodeObjects(t, manifests)
	_, stderr, err := runHelm(t, "template", "meshwave", chart, "--namespace", "istio-system", "--set", "config.failurePolicy=Retry")
	require.Error(t, err, "values.schema.json rejects a bad value")
	assert.Contains(t, stderr, "at '/config/failurePolicy': value must be one of 'RollbackWave', 'Pause', 'Continue'")
	_, stderr, err = runHelm(t, "template", "meshwave", chart, "--namespace", "monitoring")
	require.Error(t, err, "the chart refuses a namespace istiod would not show every proxy")
	assert.Contains(t, stderr, `meshwave would run in namespace "monitoring", outside the mesh's root namespace "istio-system", where istiod shows it only the proxies of "monitoring" `+
		`and the xDS sync gate could not pass a wave: install it with --namespace istio-system, or set DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES on the istiod of every revision `+
		`to list "monitoring" (with Istio's chart: --set pilot.env.DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES=monitoring) and say so with --set istiod.debugEndpointAuthAllowedNamespaces={monitoring}`)
	_, stderr, err = runHelm(t, "template", "meshwave", chart, "--namespace", "monitoring", "--set", "istiod.debugEndpointAuthAllowedNamespaces={monitoring}")
	require.NoError(t, err, "a namespace istiod allows: %s", stderr)
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		kinds[o.GetKind()+"/"+o.GetName()] = o
	}
	for _, want := range []string{"ServiceAccount/meshwave", "ClusterRole/meshwave", "ClusterRoleBinding/meshwave", "Role/meshwave-leader",
		"RoleBinding/meshwave-leader", "Role/meshwave-ztunnel-config", "RoleBinding/meshwave-ztunnel-config", "ConfigMap/meshwave-config", "ConfigMap/meshwave-dashboard", "Deployment/meshwave",
		"Service/meshwave-metrics", "ServiceMonitor/meshwave", "PrometheusRule/meshwave",
		"ValidatingAdmissionPolicy/meshwave-write-limits", "ValidatingAdmissionPolicyBinding/meshwave-write-limits",
		"ValidatingAdmissionPolicy/meshwave-eviction-limits", "ValidatingAdmissionPolicyBinding/meshwave-eviction-limits",
		"ValidatingAdmissionPolicy/meshwave-policy-limits", "ValidatingAdmissionPolicyBinding/meshwave-policy-limits"} {
		require.Contains(t, kinds, want)
	}

	// Least privilege: no wildcards, no secrets.
	for _, key := range []string{"ClusterRole/meshwave", "Role/meshwave-leader", "Role/meshwave-ztunnel-config"} {
		rules, _, _ := unstructured.NestedSlice(kinds[key].Object, "rules")
		for _, r := range rules {
			rule := r.(map[string]any)
			for _, field := range []string{"apiGroups", "resources", "verbs"} {
				for _, v := range rule[field].([]any) {
					assert.NotEqual(t, "*", v, "%s has a wildcard in %s", key, field)
					assert.NotEqual(t, "secrets", v, "%s grants secrets", key)
				}
			}
		}
	}

	// The restricted pod security context, probes and the istio-ca token.
	dep := kinds["Deployment/meshwave"]
	podSec, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec", "securityContext")
	assert.Equal(t, true, podSec["runAsNonRoot"])
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	sec := c["securityContext"].(map[string]any)
	assert.Equal(t, true, sec["readOnlyRootFilesystem"])
	assert.Equal(t, false, sec["allowPrivilegeEscalation"])
	assert.Equal(t, []any{"ALL"}, sec["capabilities"].(map[string]any)["drop"])
	assert.Contains(t, c, "livenessProbe")
	assert.Contains(t, c, "readinessProbe")
	assert.Contains(t, manifests, "audience: istio-ca")

	// The rendered configuration is valid for the agent.
	raw, _, _ := unstructured.NestedString(kinds["ConfigMap/meshwave-config"].Object, "data", "config.yaml")
	chartCfg, err := agent.ParseConfig([]byte(raw))
	require.NoError(t, err)
	assert.Equal(t, "istio-system", chartCfg.RootNamespace)
	assert.Equal(t, "/var/run/secrets/tokens/istio-token", chartCfg.Gates.Sync.TokenFile)

	// The alerts, as rendered, pass their promtool tests.
	spec, _, _ := unstructured.NestedMap(kinds["PrometheusRule/meshwave"].Object, "spec")
	dir := t.TempDir()
	rules, err := json.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644))
	tests, err := os.ReadFile(filepath.Join(chart, "tests", "alerts_test.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644))
	promBin, err := prom.FindBinary()
	require.NoError(t, err)
	promtool := filepath.Join(filepath.Dir(promBin), "promtool")
	out, err := exec.Command(promtool, "test", "rules", filepath.Join(dir, "alerts_test.yaml")).CombinedOutput()
	require.NoError(t, err, "promtool test rules: %s", out)
	assert.Contains(t, string(out), "SUCCESS")

	// Every object is accepted by the real apiserver.
	apply(t, f.World.Cluster.Config, operatorCRDs(t))
	apply(t, f.World.Cluster.Config, objs)
	f.WaitForRolledOut("istio-system", "meshwave")

	// The chart's service account may do what meshwave does, and no more.
	sa := rest.CopyConfig(f.World.Cluster.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:istio-system:meshwave",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:istio-system", "system:authenticated"}}
	saClient, err := kubernetes.NewForConfig(sa)
	require.NoError(t, err)
	_, err = saClient.CoreV1().Secrets("istio-system").List(f.Ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "secrets are forbidden: %v", err)
	_, err = saClient.AppsV1().Deployments("default").Create(f.Ctx, fixture.NewDeployment("default", "x"), metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "creating Deployments is forbidden: %v", err)
	// The port-forward that reads a ztunnel's config dump, in the root
	// namespace where ztunnel runs, and nowhere else.
	for namespace, allowed := range map[string]bool{"istio-system": true, "default": false} {
		for _, verb := range []string{"create", "get"} {
			review, err := saClient.AuthorizationV1().SelfSubjectAccessReviews().Create(f.Ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: namespace, Verb: verb, Resource: "pods", Subresource: "portforward"}}}, metav1.CreateOptions{})
			require.NoError(t, err)
			assert.Equal(t, allowed, review.Status.Allowed, "%s pods/portforward in %s", verb, namespace)
		}
	}

	const ns = "charted"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "a").Deployment(ns, "b").
		Namespace("elsewhere", map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment("elsewhere", "c").
		Namespace("limits", nil, nil).
		StatefulSet(fixture.NewStatefulSet("limits", "s", 1, appsv1.RollingUpdateStatefulSetStrategyType)).
		DaemonSet(fixture.NewDaemonSet("limits", "d")).
		RolledOut(ns).RolledOut("elsewhere")

	// The token the chart projects into the agent's pod: its service
	// account, the audience of its istio-token volume, bound to the pod.
	pods, _, err := f.DeploymentPods("istio-system", "meshwave")
	require.NoError(t, err)
	require.NotEmpty(t, pods, "the chart's replicas run")
	agentPod := pods[0] // the one replica that leads, say
	var audience string
	for _, v := range agentPod.Spec.Volumes {
		if v.Name == "istio-token" && v.Projected != nil {
			audience = v.Projected.Sources[0].ServiceAccountToken.Audience
		}
	}
	require.Equal(t, mesh.IstioCAAudience, audience)
	tr, err := f.Client.CoreV1().ServiceAccounts("istio-system").CreateToken(f.Ctx, agentPod.Spec.ServiceAccountName, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptrTo[int64](3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	chartToken := tokenFile(f, tr.Status.Token)

	// In the root namespace, istiod shows that identity every proxy.
	want := append(f.ProxyIDs(ns, "a", "b"), f.ProxyIDs("elsewhere", "c")...)
	sort.Strings(want)
	f.Eventually("istiod 1-25 to show the chart's identity every proxy", func() (bool, string) {
		got := syncIDs(t, f, "1-25", chartToken)
		return strings.Join(got, ",") == strings.Join(want, ","), strings.Join(got, ",")
	})

	// The write limits: once the apiserver enforces the policy, the agent's
	// account may not change a container image, a namespace's other labels
	// or annotations, or a Deployment's replicas; an administrator may.
	imagePatch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/evil:1"}]}}}}`)
	f.Eventually("the write limits to be enforced", func() (bool, string) {
		_, err := saClient.AppsV1().Deployments(ns).Patch(f.Ctx, "a", types.StrategicMergePatchType, imagePatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, fmt.Sprint(err)
	})
	for _, tc := range []struct {
		name, resource, target string
		patch                  []byte
		want                   string
	}{
		{"a container image", "deployments", "a", imagePatch, "meshwave may not change a Deployment's pod spec, selector, replicas or rollout settings"},
		{"replicas", "deployments", "a", []byte(`{"spec":{"replicas":5}}`), "meshwave may not change a Deployment's pod spec, selector, replicas or rollout settings"},
		{"a pod template annotation it does not persist", "deployments", "a", []byte(`{"spec":{"template":{"metadata":{"annotations":{"prometheus.io/scrape":"false"}}}}}`), "meshwave may only write the restart stamp and the persisted sidecar settings into a pod template"},
		{"a Deployment finalizer", "deployments", "a", []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), "meshwave may not change the finalizers or owners of a namespace or workload"},
		{"a Deployment owner", "deployments", "a", []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"6f1b2c3d-0000-4000-8000-000000000001"}]}}`), "meshwave may not change the finalizers or owners of a namespace or workload"},
		{"a namespace finalizer", "namespaces", ns, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), "meshwave may not change the finalizers or owners of a namespace or workload"},
		{"another namespace label", "namespaces", ns, []byte(`{"metadata":{"labels":{"team":"evil"}}}`), "meshwave may change only the istio.io/rev label of a namespace, enrol it in ambient and put it behind its waypoint where meshwave.io/target-mode and meshwave.io/waypoint ask for it, and take those and istio-injection off"},
		{"a namespace out of ambient", "namespaces", ns, []byte(`{"metadata":{"labels":{"istio.io/dataplane-mode":"none"}}}`), "meshwave may change only the istio.io/rev label of a namespace, enrol it in ambient and put it behind its waypoint where meshwave.io/target-mode and meshwave.io/waypoint ask for it, and take those and istio-injection off"},
		{"injection turned on", "namespaces", ns, []byte(`{"metadata":{"labels":{"istio-injection":"enabled"}}}`), "meshwave may change only the istio.io/rev label of a namespace, enrol it in ambient and put it behind its waypoint where meshwave.io/target-mode and meshwave.io/waypoint ask for it, and take those and istio-injection off"},
		{"a pod template taken out of ambient", "deployments", "a", []byte(`{"spec":{"template":{"metadata":{"labels":{"istio.io/dataplane-mode":"none"}}}}}`), "meshwave may only add an app label to a pod template, and the labels of a move to ambient"},
		{"another namespace annotation", "namespaces", ns, []byte(`{"metadata":{"annotations":{"owner":"evil"}}}`), "meshwave may change only meshwave.io/ annotations of a namespace"},
		{"a StatefulSet partition", "statefulsets", "s", []byte(`{"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}}}}`), "meshwave may not change a StatefulSet's pod spec, selector, replicas, volume claims or update strategy"},
		{"a StatefulSet's replicas", "statefulsets", "s", []byte(`{"spec":{"replicas":0}}`), "meshwave may not change a StatefulSet's pod spec, selector, replicas, volume claims or update strategy"},
		{"a StatefulSet container image", "statefulsets", "s", imagePatch, "meshwave may not change a StatefulSet's pod spec, selector, replicas, volume claims or update strategy"},
		{"a StatefulSet label", "statefulsets", "s", []byte(`{"metadata":{"labels":{"team":"evil"}}}`), "meshwave may change only the meshwave.io/move annotation of a workload's metadata"},
		{"a DaemonSet update strategy", "daemonsets", "d", []byte(`{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`), "meshwave may not change a DaemonSet's pod spec, selector or update strategy"},
		{"a DaemonSet pod template annotation it does not persist", "daemonsets", "d", []byte(`{"spec":{"template":{"metadata":{"annotations":{"prometheus.io/scrape":"false"}}}}}`), "meshwave may only write the restart stamp and the persisted sidecar settings into a pod template"},
	} {
		var err error
		switch tc.resource {
		case "deployments":
			_, err = saClient.AppsV1().Deployments(ns).Patch(f.Ctx, tc.target, types.StrategicMergePatchType, tc.patch, metav1.PatchOptions{})
		case "statefulsets":
			_, err = saClient.AppsV1().StatefulSets("limits").Patch(f.Ctx, tc.target, types.StrategicMergePatchType, tc.patch, metav1.PatchOptions{})
		case "daemonsets":
			_, err = saClient.AppsV1().DaemonSets("limits").Patch(f.Ctx, tc.target, types.StrategicMergePatchType, tc.patch, metav1.PatchOptions{})
		default:
			_, err = saClient.CoreV1().Namespaces().Patch(f.Ctx, tc.target, types.MergePatchType, tc.patch, metav1.PatchOptions{})
		}
		require.Error(t, err, "the agent's account changes %s", tc.name)
		assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "%s: %v", tc.name, err)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
	_, err = f.Client.AppsV1().Deployments(ns).Patch(f.Ctx, "b", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"shop"}}}`), metav1.PatchOptions{})
	require.NoError(t, err, "the limits concern only the agent's account")
	// What a move writes passes on every kind: the move record and the
	// restart stamp.
	movePatch := []byte(`{"metadata":{"annotations":{"meshwave.io/move":"{}"}},"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-30T12:00:00Z"}}}}}`)
	_, err = saClient.AppsV1().StatefulSets("limits").Patch(f.Ctx, "s", types.MergePatchType, movePatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a move of a StatefulSet is within the limits")
	_, err = saClient.AppsV1().DaemonSets("limits").Patch(f.Ctx, "d", types.MergePatchType, movePatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a move of a DaemonSet is within the limits")
	// A move to ambient: a wave's template labels and, on the way back,
	// their removal; the namespace enrolled behind its waypoint, and back.
	intoAmbient := []byte(`{"metadata":{"annotations":{"meshwave.io/move":"{}"}},"spec":{"template":{"metadata":{"labels":{"sidecar.istio.io/inject":"false","istio.io/dataplane-mode":"ambient"},"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-30T12:00:00Z"}}}}}`)
	_, err = saClient.AppsV1().Deployments(ns).Patch(f.Ctx, "a", types.MergePatchType, intoAmbient, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a move into ambient is within the limits")
	_, err = f.Client.AppsV1().DaemonSets("limits").Patch(f.Ctx, "d", types.MergePatchType, intoAmbient, metav1.PatchOptions{})
	require.NoError(t, err)
	outOfAmbient := []byte(`{"metadata":{"annotations":{"meshwave.io/move":"{}"}},"spec":{"template":{"metadata":{"labels":{"sidecar.istio.io/inject":null,"istio.io/dataplane-mode":null},"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-30T12:01:00Z"}}}}}`)
	_, err = saClient.AppsV1().DaemonSets("limits").Patch(f.Ctx, "d", types.MergePatchType, outOfAmbient, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a move back onto the sidecar is within the limits")
	// Only where the namespace asked for ambient, and behind the waypoint it named.
	for _, patch := range []string{
		`{"metadata":{"labels":{"istio.io/use-waypoint":"waypoint"}}}`,
		`{"metadata":{"labels":{"istio.io/dataplane-mode":"ambient","istio.io/rev":null,"istio-injection":null}}}`,
	} {
		_, err = saClient.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		require.Error(t, err, "%s where the namespace asked for no ambient", patch)
	}
	ambient, waypointName := "ambient", "waypoint"
	f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, &ambient).AnnotateNamespace(ns, canary.AnnotationWaypoint, &waypointName)
	for _, patch := range []string{
		`{"metadata":{"labels":{"istio.io/use-waypoint":"waypoint"}}}`,
		`{"metadata":{"labels":{"istio.io/dataplane-mode":"ambient","istio.io/rev":null,"istio-injection":null}}}`,
	} {
		_, err = saClient.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "%s is within the limits", patch)
	}
	_, err = saClient.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/use-waypoint":"elsewhere"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	require.Error(t, err, "behind another waypoint than the one it named")
	f.When().AnnotateNamespace(ns, canary.AnnotationTargetMode, nil).AnnotateNamespace(ns, canary.AnnotationWaypoint, nil)
	_, err = f.Client.CoreV1().Namespaces().Patch(f.Ctx, "limits", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/dataplane-mode":"ambient","istio.io/use-waypoint":"waypoint"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = saClient.CoreV1().Namespaces().Patch(f.Ctx, "limits", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/dataplane-mode":null,"istio.io/use-waypoint":null,"istio.io/rev":"1-25"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a rollback of a move to ambient is within the limits")

	// Replaced policies: deleted only where asked and copied, by the copy's
	// UID; created again only from a copy.
	policies := schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	admin, err := dynamic.NewForConfig(f.World.Cluster.Config)
	require.NoError(t, err)
	asAgent, err := dynamic.NewForConfig(sa)
	require.NoError(t, err)
	policy := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
			"metadata": map[string]any{"name": name, "namespace": "limits"},
			"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "s"}}, "rules": []any{map[string]any{"to": []any{map[string]any{"operation": map[string]any{"paths": []any{"/admin"}}}}}}}}}
	}
	copied, err := admin.Resource(policies).Namespace("limits").Create(f.Ctx, policy("copied"), metav1.CreateOptions{})
	require.NoError(t, err)
	other, err := admin.Resource(policies).Namespace("limits").Create(f.Ctx, policy("other"), metav1.CreateOptions{})
	require.NoError(t, err)
	dryDelete := func(name string, uid types.UID) error {
		return asAgent.Resource(policies).Namespace("limits").Delete(f.Ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}, Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	f.Eventually("the policy limits to be enforced", func() (bool, string) {
		err := dryDelete("copied", copied.GetUID())
		return err != nil && strings.Contains(err.Error(), "meshwave may delete only an AuthorizationPolicy whose copy its namespace keeps"), fmt.Sprint(err)
	})
	copiesRaw, err := json.Marshal([]canary.SavedPolicy{
		{Name: "copied", UID: string(copied.GetUID()), Migration: "1-26@x", MatchLabels: map[string]string{"app": "s"}, Object: json.RawMessage(`{}`)},
		{Name: "gone", UID: "0000", Migration: "1-26@x", MatchLabels: map[string]string{"app": "s"}, Object: json.RawMessage(`{}`)},
	})
	require.NoError(t, err)
	copies := string(copiesRaw)
	f.When().AnnotateNamespace("limits", canary.AnnotationReplacedPolicies, &copies)
	assert.ErrorContains(t, dryDelete("copied", copied.GetUID()), "where meshwave.io/delete-replaced-policies=true", "not where the namespace did not ask for it")
	yes := "true"
	f.When().AnnotateNamespace("limits", canary.AnnotationDeleteReplacedPolicies, &yes)
	require.NoError(t, dryDelete("copied", copied.GetUID()), "a policy whose copy is kept")
	assert.ErrorContains(t, dryDelete("other", other.GetUID()), "meshwave may delete only an AuthorizationPolicy whose copy its namespace keeps in meshwave.io/replaced-policies")
	_, err = asAgent.Resource(policies).Namespace("limits").Create(f.Ctx, policy("gone"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "created again from its copy")
	_, err = asAgent.Resource(policies).Namespace("limits").Create(f.Ctx, policy("invented"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	assert.ErrorContains(t, err, "meshwave may create only an AuthorizationPolicy whose copy its namespace keeps in meshwave.io/replaced-policies")
	f.When().AnnotateNamespace("limits", canary.AnnotationDeleteReplacedPolicies, nil).AnnotateNamespace("limits", canary.AnnotationReplacedPolicies, nil)
	// Evictions only where a namespace opted in.
	f.WaitForStatefulSetRolledOut("limits", "s")
	dryRun := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	err = saClient.CoreV1().Pods("limits").EvictV1(f.Ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "s-0", Namespace: "limits"}, DeleteOptions: dryRun})
	require.Error(t, err, "an eviction in a namespace that did not opt in")
	assert.Contains(t, err.Error(), "meshwave may evict pods only in a namespace that opted in with meshwave.io/target-revision")
	f.When().AnnotateNamespace("limits", canary.AnnotationTargetRevision, ptrTo("1-26"))
	f.Eventually("an eviction in an opted-in namespace to be admitted", func() (bool, string) {
		err := saClient.CoreV1().Pods("limits").EvictV1(f.Ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "s-0", Namespace: "limits"}, DeleteOptions: dryRun})
		return err == nil, fmt.Sprint(err)
	})
	f.When().AnnotateNamespace("limits", canary.AnnotationTargetRevision, nil)
	cfg := chartCfg
	test := testConfig(f)
	cfg.Gates.Sync = test.Gates.Sync
	cfg.Gates.Sync.TokenFile = chartToken
	cfg.DelayBetweenWaves, cfg.LeaderElection = test.DelayBetweenWaves, test.LeaderElection
	cfg.LeaderElection.LeaseName = chartCfg.LeaderElection.LeaseName
	cfg.LeaderElection.Namespace = chartCfg.LeaderElection.Namespace
	optIn(f, ns, "1-26", 10)
	ctrl, err := agent.New(agent.Options{Client: saClient, Config: cfg, Identity: "chart-sa",
		GateDeps: agent.GateDeps{PodName: agentPod.Name, PodIP: agentPod.Status.PodIP}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		ctrl.Shutdown()
	})
	st := waitForPhase(f, ns, canary.PhaseCompleted, 2*time.Minute)
	assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", st.Reason)
	sync, ok := verdictOf(st, "xds-sync")
	require.True(t, ok)
	assert.Equal(t, "2 of 2 proxies SYNCED with istiod 1-26", sync.Reason)
	f.Then().PodsOnRevision(ns, "a", "1-26").PodsOnRevision(ns, "b", "1-26")
	evs, err := f.Client.CoreV1().Events(metav1.NamespaceDefault).List(f.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + ns})
	require.NoError(t, err)
	var reasons []string
	for _, e := range evs.Items {
		if e.Source.Component == "meshwave" && e.InvolvedObject.Kind == "Namespace" {
			reasons = append(reasons, e.Reason)
		}
	}
	assert.Contains(t, reasons, "Completed", "the service account records Events")
	lease, err := f.Client.CoordinationV1().Leases("istio-system").Get(f.Ctx, "meshwave", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "chart-sa", *lease.Spec.HolderIdentity)
}

// TestTheChartKeepsLeaderElectionSafe renders the chart's leader election
// settings: without it more than one replica is refused (each would move
// workloads on its own), an explicit false stays false, and the Role that
// lets the agent read and renew its Lease names the Lease the agent uses,
// in the namespace where it is.
func TestTheChartKeepsLeaderElectionSafe(t *testing.T) {
	chart := filepath.Join(repoRoot(t), "charts", "meshwave")
	render := func(t *testing.T, set ...string) map[string]*unstructured.Unstructured {
		t.Helper()
		args := []string{"template", "meshwave", chart, "--namespace", "istio-system"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out := map[string]*unstructured.Unstructured{}
		for _, o := range decodeObjects(t, helm(t, args...)) {
			out[o.GetKind()+"/"+o.GetName()] = o
		}
		return out
	}
	config := func(t *testing.T, objs map[string]*unstructured.Unstructured) agent.Config {
		t.Helper()
		raw, _, _ := unstructured.NestedString(objs["ConfigMap/meshwave-config"].Object, "data", "config.yaml")
		cfg, err := agent.ParseConfig([]byte(raw))
		require.NoError(t, err)
		return cfg
	}

	t.Run("two replicas without leader election are refused", func(t *testing.T) {
		_, stderr, err := runHelm(t, "template", "meshwave", chart, "--namespace", "istio-system", "--set", "config.leaderElection.enabled=false")
		require.Error(t, err)
		assert.Contains(t, stderr, "replicaCount 2 with config.leaderElection.enabled=false would run 2 agents that each move workloads on their own: set replicaCount=1, or keep leader election on")
	})
	t.Run("one replica without leader election keeps it off and needs no Role", func(t *testing.T) {
		objs := render(t, "config.leaderElection.enabled=false", "replicaCount=1")
		assert.False(t, config(t, objs).LeaderElection.Enabled, "an explicit false is not defaulted back to true")
		assert.NotContains(t, objs, "Role/meshwave-leader")
		assert.NotContains(t, objs, "RoleBinding/meshwave-leader")
	})
	t.Run("the Role names the configured Lease, where it is", func(t *testing.T) {
		objs := render(t, "config.leaderElection.leaseName=mw-lease", "config.leaderElection.namespace=leases")
		cfg := config(t, objs)
		assert.Equal(t, "mw-lease", cfg.LeaderElection.LeaseName)
		assert.Equal(t, "leases", cfg.LeaderElection.Namespace)
		role := objs["Role/meshwave-leader"]
		require.NotNil(t, role)
		assert.Equal(t, "leases", role.GetNamespace())
		rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
		require.Len(t, rules, 2)
		assert.Equal(t, []any{"mw-lease"}, rules[1].(map[string]any)["resourceNames"])
		binding := objs["RoleBinding/meshwave-leader"]
		require.NotNil(t, binding)
		assert.Equal(t, "leases", binding.GetNamespace())
	})
	t.Run("by default the Lease is named after the release", func(t *testing.T) {
		objs := render(t)
		cfg := config(t, objs)
		assert.True(t, cfg.LeaderElection.Enabled)
		assert.Equal(t, "meshwave", cfg.LeaderElection.LeaseName)
		rules, _, _ := unstructured.NestedSlice(objs["Role/meshwave-leader"].Object, "rules")
		assert.Equal(t, []any{"meshwave"}, rules[1].(map[string]any)["resourceNames"])
	})
}

// TestTheChartServesProfilesOnlyWhenAsked renders the agent's command
// line: Go's profiles are served on the unauthenticated metrics port only
// with metrics.profiling=true, and a value that is not a boolean is
// refused with the key named.
func TestTheChartServesProfilesOnlyWhenAsked(t *testing.T) {
	chart := filepath.Join(repoRoot(t), "charts", "meshwave")
	args := func(t *testing.T, set ...string) []any {
		t.Helper()
		cmd := []string{"template", "meshwave", chart, "--namespace", "istio-system"}
		for _, s := range set {
			cmd = append(cmd, "--set", s)
		}
		for _, o := range decodeObjects(t, helm(t, cmd...)) {
			if o.GetKind() == "Deployment" && o.GetName() == "meshwave" {
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				require.Len(t, containers, 1)
				return containers[0].(map[string]any)["args"].([]any)
			}
		}
		require.FailNow(t, "no Deployment meshwave rendered")
		return nil
	}
	assert.Equal(t, []any{"run", "--config=/etc/meshwave/config.yaml", "--metrics-address=:8080"}, args(t))
	assert.Equal(t, []any{"run", "--config=/etc/meshwave/config.yaml", "--metrics-address=:9090", "--profiling"},
		args(t, "metrics.profiling=true", "metrics.port=9090"))
	_, stderr, err := runHelm(t, "template", "meshwave", chart, "--namespace", "istio-system", "--set-string", "metrics.profiling=yes")
	require.Error(t, err)
	assert.Contains(t, stderr, "at '/metrics/profiling': got string, want boolean")
}
