package canary

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind is a kind of workload meshwave moves through waves: one whose pods
// come from a template it can restart.
type Kind string

// The kinds meshwave moves, in their default order within a wave group:
// Deployments first, then StatefulSets, then DaemonSets.
const (
	KindDeployment  Kind = "Deployment"
	KindStatefulSet Kind = "StatefulSet"
	KindDaemonSet   Kind = "DaemonSet"
)

// kindRanks is the number of ranks: rank gives 0 to kindRanks-1.
const kindRanks = 3

// rank is a kind's place in the default order.
func (k Kind) rank() int {
	switch k {
	case KindStatefulSet:
		return 1
	case KindDaemonSet:
		return 2
	}
	return 0
}

// WorkloadID names a workload in plans, statuses, Events and metrics: a
// Deployment by its name, as it always has been, and any other kind as
// Kind/name ("StatefulSet/db"). An object name holds no "/", so an ID reads
// back without doubt.
func WorkloadID(kind Kind, name string) string {
	if kind == KindDeployment || kind == "" {
		return name
	}
	return string(kind) + "/" + name
}

// SplitWorkloadID returns the kind and object name an ID stands for; ok is
// false when it names no kind meshwave moves or no valid object name.
func SplitWorkloadID(id string) (kind Kind, name string, ok bool) {
	kind, name = KindDeployment, id
	if k, n, found := strings.Cut(id, "/"); found {
		kind, name = Kind(k), n
		if kind == KindDeployment {
			return "", "", false // a Deployment's ID is its bare name
		}
	}
	switch kind {
	case KindDeployment, KindStatefulSet, KindDaemonSet:
	default:
		return "", "", false
	}
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", false
	}
	return kind, name, true
}

// ObjectName is the name of the workload's object, without its kind.
func (w Workload) ObjectName() string {
	if _, name, found := strings.Cut(w.Name, "/"); found {
		return name
	}
	return w.Name
}

// KindOf is the workload's kind; a Workload built without one is a
// Deployment.
func (w Workload) KindOf() Kind {
	if w.Kind == "" {
		return KindDeployment
	}
	return w.Kind
}

// kindOfID is the kind an ID names, without validating it.
func kindOfID(id string) Kind {
	if k, _, found := strings.Cut(id, "/"); found {
		return Kind(k)
	}
	return KindDeployment
}

// describe names a workload in a message: "deployment cart",
// "statefulset db".
func describe(id string) string {
	kind, name := kindOfID(id), id
	if _, n, found := strings.Cut(id, "/"); found {
		name = n
	}
	return strings.ToLower(string(kind)) + " " + name
}
