package mesh

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func selector(reqs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: reqs}
}

func exists(key string, want bool) metav1.LabelSelectorRequirement {
	op := metav1.LabelSelectorOpExists
	if !want {
		op = metav1.LabelSelectorOpDoesNotExist
	}
	return metav1.LabelSelectorRequirement{Key: key, Operator: op}
}

func in_(key string, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpIn, Values: values}
}

func notIn(key string, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOpNotIn, Values: values}
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }

// workloadName is the name of the Deployment that owns pod, derived the way
// Istio's metadata exchange does for ReplicaSet-owned pods: the ReplicaSet
// name without its pod-template-hash suffix. Pods of other owners report
// their own name.
func workloadName(pod *corev1.Pod) string {
	for _, ref := range pod.OwnerReferences {
		if ref.Kind == "ReplicaSet" {
			if hash := pod.Labels["pod-template-hash"]; hash != "" {
				return strings.TrimSuffix(ref.Name, "-"+hash)
			}
			return ref.Name
		}
		if ref.Controller != nil && *ref.Controller {
			return ref.Name
		}
	}
	if pod.GenerateName != "" {
		return strings.TrimSuffix(pod.GenerateName, "-")
	}
	return pod.Name
}
