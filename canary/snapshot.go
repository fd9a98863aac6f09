package canary

import (
	"encoding/json"
	"sort"
	"strings"
	"time"
)

// Snapshot is what the agent gathered about one namespace: plain data read
// from the informer caches, so that every decision is a pure function of it.
type Snapshot struct {
	Namespace Namespace
	Workloads []Workload
	Mesh      Mesh
	// Peers are the other namespaces that opted in, for priority order and
	// concurrency.
	Peers []Peer
	// ReadPeers, when set, reads the peers instead: a decision calls it
	// once, when it decides whether the namespace may start (admission),
	// and not at all otherwise. Reading every other namespace's status on
	// every reconcile of a migration under way was most of a reconcile's
	// time in a cluster of hundreds of opted-in namespaces, and the agent
	// serialises the decisions that read them.
	ReadPeers func() []Peer
	// Compat are the mesh resources the compatibility prechecks read.
	Compat Compat
	// Unmovable are the namespace's other workloads whose running pods
	// carry a proxy, sorted by ID: meshwave accounts for them but never
	// restarts them.
	Unmovable []Unmovable
	// Clusters are the other clusters of the fleet, by name, as the agent
	// read them; nil for a cluster alone.
	Clusters map[string]PeerCluster
	// FleetAlerts reads the alerts of the other clusters' namespaces, for
	// a soak with no alert (Fleet.SoakAlerts); called only while a ring
	// soaks.
	FleetAlerts FleetAlerts
}

// Unmovable is a workload of a kind meshwave never restarts (a Job, a
// CronJob's Job, a ReplicaSet without a Deployment, a bare pod, anything
// else) whose running pods carry a proxy.
type Unmovable struct {
	// ID is Kind/name: "Job/migrate", "CronJob/nightly", "Pod/debug".
	ID string
	// Revisions counts its running pods by their proxy's revision.
	Revisions map[string]int
}

// Namespace is the part of a Namespace meshwave reads.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Workload is a Deployment, StatefulSet or DaemonSet and its pods.
type Workload struct {
	Namespace string
	// Name is its WorkloadID: a Deployment's name, or Kind/name.
	Name                string
	Kind                Kind
	ResourceVersion     string
	Labels              map[string]string
	Annotations         map[string]string
	TemplateLabels      map[string]string
	TemplateAnnotations map[string]string
	// Replicas is how many pods it wants: a DaemonSet's desired number
	// scheduled.
	Replicas int32
	// Paused is the Deployment's spec.paused: a paused Deployment does not
	// roll out a new template.
	Paused bool
	// OnDelete is true for a StatefulSet or DaemonSet whose update strategy
	// is OnDelete: a new template reaches a pod only when it is deleted.
	OnDelete bool
	// Partition is a StatefulSet's rolling update partition: pods with a
	// lower ordinal keep the old template.
	Partition  int32
	Generation int64
	Status     RolloutStatus
	Pods       []Pod
	// HasPDB is true when a PodDisruptionBudget selects its pods.
	HasPDB bool
	// RolledOutRestart is the newest kubectl.kubernetes.io/restartedAt
	// among the templates its controller rolled out: a Deployment's
	// ReplicaSets', a StatefulSet's or DaemonSet's ControllerRevisions'
	// (each matched to it by its controller reference's UID); zero when
	// none carries one. It shows a restart whose stamp was taken out of
	// the template since.
	RolledOutRestart time.Time
	// EvictionRefused, when set, says which PodDisruptionBudget last
	// refused to evict one of its old pods in the wave or rollback under
	// test, with the apiserver's answer ("PodDisruptionBudget db-pdb
	// refused to evict pod db-2: Cannot evict pod as it would violate the
	// pod's disruption budget. ..."), at most 512 bytes: the rollout gate
	// names it in its reasons. The agent fills it from its own memory of
	// the evictions it sent, not from the caches, so a restarted agent or
	// a new leader fills it again only once one of its evictions is
	// refused.
	EvictionRefused string
	// Facts, when set, are ReadFacts of this workload, read earlier from
	// the very same labels and annotations and kept: a decision takes them
	// instead of reading those maps again. Nil: the decision reads them.
	Facts *Facts
}

// RolloutStatus is the part of a workload's status the rollout gate reads,
// in a Deployment's terms. A DaemonSet's status maps onto it: Replicas is
// its current number scheduled, UpdatedReplicas its updated number
// scheduled, ReadyReplicas and AvailableReplicas its number ready and
// available.
type RolloutStatus struct {
	ObservedGeneration int64
	Replicas           int32
	UpdatedReplicas    int32
	ReadyReplicas      int32
	AvailableReplicas  int32
	// CurrentRevision and UpdateRevision are a StatefulSet's: its rollout
	// is over when they are equal.
	CurrentRevision string
	UpdateRevision  string
}

// Pod is the part of a pod meshwave reads.
type Pod struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	CreatedAt   time.Time
	Running     bool
	Ready       bool
	Terminating bool
	// Current is true when the pod runs the workload's newest template: it
	// belongs to the Deployment's newest ReplicaSet, or carries the
	// StatefulSet's update revision or the DaemonSet's template.
	Current bool
	// Revision is the revision in sidecar.istio.io/status; "" when the pod
	// was not injected.
	Revision string
	// Waiting is why a container is waiting, e.g. CrashLoopBackOff.
	Waiting string
	// Node is the node the pod runs on.
	Node string
	// UID tells a pod from the one its controller recreates under the same
	// name.
	UID string
}

// Injected reports whether Istio injected the pod.
func (p Pod) Injected() bool { return p.Revision != "" }

// Mesh is what the cluster says about the Istio control planes.
type Mesh struct {
	// Revisions are the installed revisions, by name: each has an injector
	// webhook configuration istio-sidecar-injector-<name>.
	Revisions map[string]Revision
	// Tags maps each revision tag to the revision it points at.
	Tags map[string]string
	// Auto is the revision the target auto stands for: the Sail
	// Operator's active revision, else the default tag's; "" when neither
	// names one. AutoFrom says where it was read, for messages.
	Auto     string
	AutoFrom string
	// Ztunnels says, for each node a ztunnel pod (app=ztunnel in the root
	// namespace) is scheduled on, whether one of them is Ready there.
	Ztunnels map[string]bool
	// CNINodeAgents says the same of the istio-cni node agent's pods
	// (k8s-app=istio-cni-node in the root namespace).
	CNINodeAgents map[string]bool
}

// Revision is one installed control-plane revision.
type Revision struct {
	Name string
	// Istiods and ReadyIstiods count its istiod pods.
	Istiods      int
	ReadyIstiods int
	// ProxyVersion is the Istio version its proxies report as
	// ISTIO_VERSION (e.g. "1.26.1"); "" when it cannot be told.
	// VersionFrom says where it was read, for messages.
	ProxyVersion string
	VersionFrom  string
	// Roots are the fingerprints (sha256:<hex>) of the certificates in
	// the caBundle its istiod writes into its injector webhook
	// configuration: the root of trust it distributes. nil when none is
	// read.
	Roots []string
}

// Resolve returns the revision a revision or tag name stands for.
func (m Mesh) Resolve(name string) (string, bool) {
	if name == TargetAuto {
		return m.Auto, m.Auto != ""
	}
	if _, ok := m.Revisions[name]; ok {
		return name, true
	}
	if rev, ok := m.Tags[name]; ok {
		return rev, true
	}
	return "", false
}

// Peer is another opted-in namespace.
type Peer struct {
	Name     string
	Priority int
	Phase    Phase
	// HoldsSlot is true while it counts against the concurrency limit.
	HoldsSlot bool
	// WaitsForRing is true while it waits for the ring before its own: it
	// is no one's turn ahead.
	WaitsForRing bool
}

// sidecarStatus is the part of Istio's sidecar.istio.io/status meshwave reads.
type sidecarStatus struct {
	Revision string `json:"revision"`
}

// SidecarRevision reads the revision out of a pod's sidecar.istio.io/status.
// Istio writes "default" when the revision is unnamed. It returns "" when
// the annotation is absent or unreadable.
func SidecarRevision(annotations map[string]string) string {
	raw, ok := annotations[AnnotationSidecar]
	if !ok {
		return ""
	}
	var s sidecarStatus
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return ""
	}
	if s.Revision == "" {
		return "default"
	}
	return s.Revision
}

// livePods are the pods that are not being deleted, sorted by name.
func (w Workload) livePods() []Pod {
	var out []Pod
	for _, p := range w.Pods {
		if !p.Terminating {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// gatewayReason says why w is a gateway, or "" when it is not. It follows
// the runbook's test (the operator component label ending in Gateways, or a
// gateway injection template) and the labels Istio's gateway installs use.
func gatewayReason(w *Workload) string {
	for _, labels := range []map[string]string{w.Labels, w.TemplateLabels} {
		if c := labels["operator.istio.io/component"]; strings.HasSuffix(c, "Gateways") {
			return "gateway (operator.istio.io/component=" + c + ")"
		}
	}
	if t := w.TemplateAnnotations[AnnotationTemplates]; strings.Contains(t, "gateway") {
		return "gateway (inject.istio.io/templates=" + t + ")"
	}
	for _, labels := range []map[string]string{w.Labels, w.TemplateLabels} {
		switch v := labels["istio"]; v {
		case "ingressgateway", "egressgateway", "eastwestgateway":
			return "gateway (istio=" + v + ")"
		}
		if _, ok := labels["gateway.istio.io/managed"]; ok {
			return "gateway (gateway.istio.io/managed)"
		}
		if _, ok := labels["gateway.networking.k8s.io/gateway-name"]; ok {
			return "gateway (gateway.networking.k8s.io/gateway-name)"
		}
	}
	return ""
}
