// Package writelimits evaluates the chart's write-limits policy offline,
// with the apiserver's own CEL compiler, against the writes meshwave makes
// and the writes it must never make. It needs no local world.
package writelimits

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/e2e/checkout"
	"github.com/meshwave/meshwave/e2e/mesh"
)

const agent = "system:serviceaccount:istio-system:meshwave"

// policyNamed renders the chart's ValidatingAdmissionPolicy whose name ends
// with suffix ("-write-limits", "-policy-limits"), with the helm make istio
// builds, at the version hack/tools pins.
func policyNamed(t *testing.T, suffix string) *admissionregv1.ValidatingAdmissionPolicy {
	t.Helper()
	root, err := checkout.Root()
	require.NoError(t, err)
	artifacts, err := mesh.FindIstioArtifacts()
	require.NoError(t, err)
	cmd := exec.Command(artifacts.Helm, "template", "meshwave", filepath.Join(root, "charts", "meshwave"), "-n", "istio-system",
		"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "--show-only", "templates/writelimits.yaml")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var p admissionregv1.ValidatingAdmissionPolicy
		require.NoError(t, yaml.Unmarshal([]byte(doc), &p))
		if p.Kind == "ValidatingAdmissionPolicy" && strings.HasSuffix(p.Name, suffix) {
			return &p
		}
	}
	t.Fatalf("no ValidatingAdmissionPolicy *%s in the chart", suffix)
	return nil
}

// admitAs reports the messages of the validations a request of the agent
// fails ("" when admitted), with the namespace the apiserver would hand
// the policy as namespaceObject.
func admitAs(t *testing.T, v validating.Validator, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, op admission.Operation,
	namespace *corev1.Namespace, ns, name string, old, obj k8sruntime.Object) string {
	t.Helper()
	var opts k8sruntime.Object = &metav1.UpdateOptions{}
	switch op {
	case admission.Create:
		opts = &metav1.CreateOptions{}
	case admission.Delete:
		opts = &metav1.DeleteOptions{}
	}
	attr := admission.NewAttributesRecord(obj, old, gvk, ns, name, gvr, "", op, opts, false, &user.DefaultInfo{Name: agent})
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk}
	if obj != nil {
		va.VersionedObject = admission.NewLazyObject(obj)
	}
	if old != nil {
		va.VersionedOldObject = admission.NewLazyObject(old)
	}
	res := v.Validate(context.Background(), gvr, va, nil, namespace, celconfig.RuntimeCELCostBudget, nil)
	var msgs []string
	for _, d := range res.Decisions {
		if d.Action != validating.ActionAdmit {
			msgs = append(msgs, d.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

// policy is the write limits' policy.
func policy(t *testing.T) *admissionregv1.ValidatingAdmissionPolicy {
	return policyNamed(t, "-write-limits")
}

// compile builds the policy's validator as the admission plugin does.
func compile(p *admissionregv1.ValidatingAdmissionPolicy) validating.Validator {
	vars := cel.OptionalVariableDeclarations{HasAuthorizer: true}
	compiler, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		panic(err)
	}
	var named []cel.NamedExpressionAccessor
	for _, v := range p.Spec.Variables {
		named = append(named, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
	var conds []cel.ExpressionAccessor
	for _, v := range p.Spec.Validations {
		conds = append(conds, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message})
	}
	var match []cel.ExpressionAccessor
	for i := range p.Spec.MatchConditions {
		match = append(match, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
	}
	matcher := matchconditions.NewMatcher(compiler.CompileCondition(match, vars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	none := func(n int) cel.ConditionEvaluator {
		return compiler.CompileCondition(make([]cel.ExpressionAccessor, n), cel.OptionalVariableDeclarations{}, environment.StoredExpressions)
	}
	return validating.NewValidator(compiler.CompileCondition(conds, vars, environment.StoredExpressions), matcher, none(0), none(len(conds)), p.Spec.FailurePolicy, nil)
}

// admit reports the messages of the validations an update by the agent
// fails ("" when admitted).
func admit(t *testing.T, v validating.Validator, resource string, old, obj k8sruntime.Object) string {
	t.Helper()
	accessor, _ := obj.(metav1.Object)
	return admitAs(t, v, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: resource}, obj.GetObjectKind().GroupVersionKind(),
		admission.Update, nil, accessor.GetNamespace(), accessor.GetName(), old, obj)
}

// fails ("" when admitted).
func statefulSet() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", Labels: map[string]string{"app": "db"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](0)}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db:1"}}}}},
	}
}

func daemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		// The apiserver keeps this annotation at the template's generation.
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "shop", Annotations: map[string]string{"deprecated.daemonset.template.generation": "1"}},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}}},
	}
}

func TestTheWriteLimitsHoldTheAgentToAMoveOnStatefulSetsAndDaemonSets(t *testing.T) {
	v := compile(policy(t))
	move := func(tpl *corev1.PodTemplateSpec, meta *metav1.ObjectMeta) {
		tpl.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-29T12:00:00Z", "sidecar.istio.io/proxyCPU": "50m"}
		meta.Annotations = map[string]string{"meshwave.io/move": `{"revision":"1-26"}`}
	}
	stsCases := []struct {
		name, refused string
		edit          func(s *appsv1.StatefulSet)
	}{
		{"a move", "", func(s *appsv1.StatefulSet) { move(&s.Spec.Template, &s.ObjectMeta) }},
		{"a partition", "StatefulSet's", func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](2) }},
		{"OnDelete", "StatefulSet's", func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		}},
		{"Parallel", "StatefulSet's", func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }},
		{"a volume claim", "StatefulSet's", func(s *appsv1.StatefulSet) {
			s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}
		}},
		{"minReadySeconds", "StatefulSet's", func(s *appsv1.StatefulSet) { s.Spec.MinReadySeconds = 600 }},
		{"replicas", "StatefulSet's", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](0) }},
		{"a label", "workload's metadata", func(s *appsv1.StatefulSet) { s.Labels["team"] = "x" }},
		{"a DaemonSet's generation annotation", "workload's metadata", func(s *appsv1.StatefulSet) {
			s.Annotations = map[string]string{"deprecated.daemonset.template.generation": "9"}
		}},
		{"the image", "StatefulSet's", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "evil:1" }},
		// Every pod made from the template carries its finalizers: added,
		// no pod of the workload could ever finish deleting.
		{"a pod template finalizer", "pod template", func(s *appsv1.StatefulSet) {
			s.Spec.Template.Finalizers = []string{"example.com/hold"}
		}},
	}
	for _, tc := range stsCases {
		t.Run("StatefulSet "+tc.name, func(t *testing.T) {
			old, obj := statefulSet(), statefulSet()
			tc.edit(obj)
			got := admit(t, v, "statefulsets", old, obj)
			if tc.refused == "" {
				require.Empty(t, got)
			} else {
				require.Contains(t, got, tc.refused)
			}
		})
	}
	dsCases := []struct {
		name, refused string
		edit          func(d *appsv1.DaemonSet)
	}{
		// As the policy sees it: the apiserver bumped the template
		// generation annotation before admission.
		{"a move", "", func(d *appsv1.DaemonSet) {
			move(&d.Spec.Template, &d.ObjectMeta)
			d.Annotations["deprecated.daemonset.template.generation"] = "2"
		}},
		{"RollingUpdate", "DaemonSet's", func(d *appsv1.DaemonSet) {
			d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}
		}},
		{"minReadySeconds", "DaemonSet's", func(d *appsv1.DaemonSet) { d.Spec.MinReadySeconds = 600 }},
		{"a node selector", "DaemonSet's", func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.NodeSelector = map[string]string{"none": "x"} }},
		{"a pod template finalizer", "pod template", func(d *appsv1.DaemonSet) {
			d.Spec.Template.Finalizers = []string{"example.com/hold"}
		}},
	}
	for _, tc := range dsCases {
		t.Run("DaemonSet "+tc.name, func(t *testing.T) {
			old, obj := daemonSet(), daemonSet()
			tc.edit(obj)
			got := admit(t, v, "daemonsets", old, obj)
			if tc.refused == "" {
				require.Empty(t, got)
			} else {
				require.Contains(t, got, tc.refused)
			}
		})
	}
}
