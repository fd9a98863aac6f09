package agent

import (
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// Istio's naming of injector webhook configurations.
const (
	injectorPrefix = "istio-sidecar-injector-"
	tagPrefix      = "istio-revision-tag-"
	revisionAnno   = "deployment.kubernetes.io/revision"
)

// Gather reads one namespace and the mesh from the caches into a
// snapshot. It makes no API call.
func (c *Caches) Gather(ns *corev1.Namespace, rootNamespace string) (canary.Snapshot, error) {
	snap := canary.Snapshot{Namespace: canary.Namespace{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}}
	var err error
	if snap.Workloads, err = c.workloads(ns.Name); err != nil {
		return snap, err
	}
	if snap.Mesh, err = c.mesh(rootNamespace); err != nil {
		return snap, err
	}
	if snap.Peers, err = c.peers(ns.Name); err != nil {
		return snap, err
	}
	return snap, nil
}

func (c *Caches) workloads(ns string) ([]canary.Workload, error) {
	deps, err := c.Deployments.Deployments(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	if len(deps) == 0 {
		return nil, nil
	}
	rss, err := c.ReplicaSets.ReplicaSets(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	pods, err := c.Pods.Pods(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	pdbs, err := c.PDBs.PodDisruptionBudgets(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	// A pod belongs to the Deployment that owns its ReplicaSet, and is
	// current when that ReplicaSet carries the Deployment's revision.
	type rsInfo struct {
		deployment, revision string
	}
	rsOwner := map[string]rsInfo{}
	for _, rs := range rss {
		if owner := metav1.GetControllerOf(rs); owner != nil && owner.Kind == "Deployment" {
			rsOwner[rs.Name] = rsInfo{deployment: owner.Name, revision: rs.Annotations[revisionAnno]}
		}
	}
	podsOf := map[string][]*corev1.Pod{}
	rsOf := map[*corev1.Pod]rsInfo{}
	for _, p := range pods {
		owner := metav1.GetControllerOf(p)
		if owner == nil || owner.Kind != "ReplicaSet" {
			continue
		}
		info, ok := rsOwner[owner.Name]
		if !ok {
			continue
		}
		podsOf[info.deployment] = append(podsOf[info.deployment], p)
		rsOf[p] = info
	}
	out := make([]canary.Workload, 0, len(deps))
	for _, d := range deps {
		w := workloadOf(d)
		for _, p := range podsOf[d.Name] {
			pod := podOf(p)
			pod.Current = rsOf[p].revision != "" && rsOf[p].revision == d.Annotations[revisionAnno]
			w.Pods = append(w.Pods, pod)
		}
		w.HasPDB = coveredByPDB(d, pdbs)
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func workloadOf(d *appsv1.Deployment) canary.Workload {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	return canary.Workload{
		Namespace: d.Namespace, Name: d.Name, ResourceVersion: d.ResourceVersion,
		Labels: d.Labels, Annotations: d.Annotations,
		TemplateLabels: d.Spec.Template.Labels, TemplateAnnotations: d.Spec.Template.Annotations,
		Replicas: replicas, Paused: d.Spec.Paused, Generation: d.Generation,
		Status: canary.DeploymentStatus{
			ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.Replicas,
			UpdatedReplicas: d.Status.UpdatedReplicas, ReadyReplicas: d.Status.ReadyReplicas,
			AvailableReplicas: d.Status.AvailableReplicas,
		},
	}
}

func podOf(p *corev1.Pod) canary.Pod {
	out := canary.Pod{
		Name: p.Name, Labels: p.Labels, Annotations: p.Annotations,
		CreatedAt:   p.CreationTimestamp.Time,
		Running:     p.Status.Phase == corev1.PodRunning,
		Terminating: p.DeletionTimestamp != nil,
		Revision:    canary.SidecarRevision(p.Annotations),
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			out.Waiting = cs.State.Waiting.Reason
		}
	}
	return out
}

func coveredByPDB(d *appsv1.Deployment, pdbs []*policyv1.PodDisruptionBudget) bool {
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			return true
		}
	}
	return false
}

// mesh reads the installed revisions and tags from the injector webhook
// configurations, and istiod's readiness from its pods.
func (c *Caches) mesh(rootNamespace string) (canary.Mesh, error) {
	m := canary.Mesh{Revisions: map[string]canary.Revision{}, Tags: map[string]string{}}
	mwcs, err := c.Webhooks.List(labels.Everything())
	if err != nil {
		return m, err
	}
	for _, mwc := range mwcs {
		switch {
		case strings.HasPrefix(mwc.Name, tagPrefix) && mwc.Labels[canary.LabelTag] != "":
			if rev := mwc.Labels[canary.LabelRev]; rev != "" {
				m.Tags[mwc.Labels[canary.LabelTag]] = rev
			}
		case strings.HasPrefix(mwc.Name, injectorPrefix):
			rev := strings.TrimPrefix(mwc.Name, injectorPrefix)
			if l := mwc.Labels[canary.LabelRev]; l != "" {
				rev = l
			}
			m.Revisions[rev] = canary.Revision{Name: rev}
		}
	}
	istiods, err := c.Pods.Pods(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "istiod"}))
	if err != nil {
		return m, err
	}
	for _, p := range istiods {
		rev, ok := m.Revisions[p.Labels[canary.LabelRev]]
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		rev.Istiods++
		if podOf(p).Ready && p.Status.Phase == corev1.PodRunning {
			rev.ReadyIstiods++
		}
		m.Revisions[rev.Name] = rev
	}
	return m, nil
}

// Istiods returns a lister of the Ready istiod pods of a revision, with
// their IPs, for the sync gate.
func (c *Caches) Istiods(rootNamespace string) func(string) []analysis.Istiod {
	return func(rev string) []analysis.Istiod {
		pods, err := c.Pods.Pods(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "istiod", canary.LabelRev: rev}))
		if err != nil {
			return nil
		}
		var out []analysis.Istiod
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podOf(p).Ready {
				out = append(out, analysis.Istiod{Pod: p.Name, IP: p.Status.PodIP, Revision: rev})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
		return out
	}
}

// peers are the other namespaces that opted in or still carry a status.
func (c *Caches) peers(self string) ([]canary.Peer, error) {
	nss, err := c.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []canary.Peer
	for _, ns := range nss {
		if ns.Name == self {
			continue
		}
		movedOnRecord := func() bool { return c.movedOnRecord(ns.Name) }
		if p, ok := canary.PeerOf(ns.Name, ns.Annotations, movedOnRecord); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// movedOnRecord reports whether any Deployment of ns carries a move record.
func (c *Caches) movedOnRecord(ns string) bool {
	deps, err := c.Deployments.Deployments(ns).List(labels.Everything())
	if err != nil {
		return true // unknown: the careful answer
	}
	for _, d := range deps {
		if _, ok := canary.ReadMoveRecord(d.Annotations); ok {
			return true
		}
	}
	return false
}
