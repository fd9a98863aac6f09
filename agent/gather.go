package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// Istio's naming of injector webhook configurations.
const (
	injectorPrefix = "istio-sidecar-injector-"
	// injectorWebhookSuffix ends the names of the webhooks whose caBundle
	// istiod patches with its own: Istio's webhook patcher writes only
	// those.
	injectorWebhookSuffix = "sidecar-injector.istio.io"
	tagPrefix             = "istio-revision-tag-"
	revisionAnno          = "deployment.kubernetes.io/revision"
)

// Gather reads one namespace and the mesh from the caches into a
// snapshot. It makes no API call. It leaves out the peers: the controller
// reads those only for a decision that asks (Snapshot.ReadPeers).
func (c *Caches) Gather(ns *corev1.Namespace, rootNamespace string) (canary.Snapshot, error) {
	snap := canary.Snapshot{Namespace: canary.Namespace{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}}
	var err error
	if snap.Workloads, err = c.workloads(ns.Name); err != nil {
		return snap, err
	}
	if snap.Unmovable, err = c.unmovable(ns.Name); err != nil {
		return snap, err
	}
	if snap.Mesh, err = c.mesh(rootNamespace); err != nil {
		return snap, err
	}
	snap.Compat = c.compat.gather(ns.Name, rootNamespace)
	return snap, nil
}

// workloads reads a namespace's Deployments, StatefulSets and DaemonSets,
// each with its pods, sorted by ID.
func (c *Caches) workloads(ns string) ([]canary.Workload, error) {
	deps, stss, dss, err := c.workloadObjects(ns)
	if err != nil {
		return nil, err
	}
	if len(deps)+len(stss)+len(dss) == 0 {
		return nil, nil
	}
	rss, err := c.ReplicaSets.In(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	pods, err := c.Pods.In(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	pdbs, err := c.PDBs.PodDisruptionBudgets(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	revs, err := c.Revisions.In(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	// A pod belongs to the Deployment that controls its ReplicaSet, and is
	// current when that ReplicaSet carries the Deployment's revision; it
	// belongs to a StatefulSet or DaemonSet that controls it directly.
	// Every hop is by the controller reference's UID, as Kubernetes'
	// controllers resolve theirs: a pod is evicted and judged as its
	// workload's, and a name is anyone's to write (a ReplicaSet that names
	// a Deployment it does not belong to, another API's Deployment of the
	// same name), and is shared by a DaemonSet and a Deployment of one
	// name.
	type rsInfo struct {
		deployment ownerKey
		revision   string
	}
	replicaSets := map[ownerKey]rsInfo{}
	// rolledOut is the newest restart stamp among the templates each
	// workload's controller rolled out: its ReplicaSets' or its
	// ControllerRevisions'.
	rolledOut := map[ownerKey]time.Time{}
	for _, rs := range rss {
		if owner, ok := controllerKey(rs); ok && owner.kind == canary.OwnerDeployment {
			replicaSets[keyOf(canary.OwnerReplicaSet, rs)] = rsInfo{deployment: owner, revision: rs.Revision}
			noteRestart(rolledOut, owner, rs.RestartedAt)
		}
	}
	newestRevision := map[ownerKey]*CachedControllerRevision{}
	for _, r := range revs {
		owner, ok := controllerKey(r)
		if !ok || owner.kind != canary.OwnerStatefulSet && owner.kind != canary.OwnerDaemonSet {
			continue
		}
		noteRestart(rolledOut, owner, r.RestartedAt)
		if n := newestRevision[owner]; n == nil || r.Revision > n.Revision {
			newestRevision[owner] = r
		}
	}
	podsOf := map[ownerKey][]*CachedPod{}
	rsOf := map[*CachedPod]rsInfo{}
	for _, p := range pods {
		owner, ok := controllerKey(p)
		if !ok {
			continue
		}
		switch owner.kind {
		case canary.OwnerReplicaSet:
			info, ok := replicaSets[owner]
			if !ok {
				continue
			}
			podsOf[info.deployment] = append(podsOf[info.deployment], p)
			rsOf[p] = info
		case canary.OwnerStatefulSet, canary.OwnerDaemonSet:
			podsOf[owner] = append(podsOf[owner], p)
		}
	}
	out := make([]canary.Workload, 0, len(deps)+len(stss)+len(dss))
	for _, d := range deps {
		w := workloadOf(d)
		w.Facts = c.facts.deployments.get(d, &w)
		key := keyOf(canary.OwnerDeployment, d)
		for _, p := range podsOf[key] {
			pod := podOf(p)
			pod.Current = rsOf[p].revision != "" && rsOf[p].revision == d.Annotations[revisionAnno]
			w.Pods = append(w.Pods, pod)
		}
		w.HasPDB = coveredByPDB(d.Spec.Template.Labels, pdbs)
		w.RolledOutRestart = rolledOut[key]
		out = append(out, w)
	}
	for _, s := range stss {
		w := statefulSetWorkload(s)
		w.Facts = c.facts.statefulSets.get(s, &w)
		key := keyOf(canary.OwnerStatefulSet, s)
		for _, p := range podsOf[key] {
			pod := podOf(p)
			pod.Current = s.Status.UpdateRevision != "" && p.Labels[appsv1.ControllerRevisionHashLabelKey] == s.Status.UpdateRevision
			w.Pods = append(w.Pods, pod)
		}
		w.HasPDB = coveredByPDB(s.Spec.Template.Labels, pdbs)
		w.RolledOutRestart = rolledOut[key]
		out = append(out, w)
	}
	for _, d := range dss {
		w := daemonSetWorkload(d)
		w.Facts = c.facts.daemonSets.get(d, &w)
		key := keyOf(canary.OwnerDaemonSet, d)
		hash := daemonSetHash(newestRevision[key])
		for _, p := range podsOf[key] {
			pod := podOf(p)
			pod.Current = daemonPodCurrent(p, d, hash)
			w.Pods = append(w.Pods, pod)
		}
		w.HasPDB = coveredByPDB(d.Spec.Template.Labels, pdbs)
		w.RolledOutRestart = rolledOut[key]
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// unmovable are the namespace's running pods that carry a proxy and
// belong to no Deployment, StatefulSet or DaemonSet, by owner: a Job (or
// the CronJob behind it), a ReplicaSet without a Deployment, nothing at
// all (a bare pod), anything else.
func (c *Caches) unmovable(ns string) ([]canary.Unmovable, error) {
	pods, err := c.Pods.In(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	byID := map[string]map[string]int{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
			continue
		}
		if _, ok := p.Annotations[canary.AnnotationSidecar]; !ok {
			continue
		}
		owner := c.ownerOf(p)
		switch owner.Kind {
		case "Deployment", "StatefulSet", "DaemonSet":
			continue
		}
		rev := p.Revision
		if rev == "" {
			continue // an unreadable sidecar status names no revision
		}
		id := owner.Kind + "/" + owner.Name
		if byID[id] == nil {
			byID[id] = map[string]int{}
		}
		byID[id][rev]++
	}
	out := make([]canary.Unmovable, 0, len(byID))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		out = append(out, canary.Unmovable{ID: id, Revisions: byID[id]})
	}
	return out, nil
}

func workloadOf(d *appsv1.Deployment) canary.Workload {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	return canary.Workload{
		Namespace: d.Namespace, Name: d.Name, Kind: canary.KindDeployment, ResourceVersion: d.ResourceVersion,
		Labels: d.Labels, Annotations: d.Annotations,
		TemplateLabels: d.Spec.Template.Labels, TemplateAnnotations: d.Spec.Template.Annotations,
		Replicas: replicas, Paused: d.Spec.Paused, Generation: d.Generation,
		Status: canary.RolloutStatus{
			ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.Replicas,
			UpdatedReplicas: d.Status.UpdatedReplicas, ReadyReplicas: d.Status.ReadyReplicas,
			AvailableReplicas: d.Status.AvailableReplicas,
		},
	}
}

func statefulSetWorkload(s *appsv1.StatefulSet) canary.Workload {
	replicas := int32(1)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	w := canary.Workload{
		Namespace: s.Namespace, Name: canary.WorkloadID(canary.KindStatefulSet, s.Name), Kind: canary.KindStatefulSet,
		ResourceVersion: s.ResourceVersion, Labels: s.Labels, Annotations: s.Annotations,
		TemplateLabels: s.Spec.Template.Labels, TemplateAnnotations: s.Spec.Template.Annotations,
		Replicas: replicas, Generation: s.Generation,
		OnDelete: s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType,
		Status: canary.RolloutStatus{
			ObservedGeneration: s.Status.ObservedGeneration, Replicas: s.Status.Replicas,
			UpdatedReplicas: s.Status.UpdatedReplicas, ReadyReplicas: s.Status.ReadyReplicas,
			AvailableReplicas: s.Status.AvailableReplicas,
			CurrentRevision:   s.Status.CurrentRevision, UpdateRevision: s.Status.UpdateRevision,
		},
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; !w.OnDelete && ru != nil && ru.Partition != nil {
		w.Partition = *ru.Partition
	}
	return w
}

func daemonSetWorkload(d *appsv1.DaemonSet) canary.Workload {
	return canary.Workload{
		Namespace: d.Namespace, Name: canary.WorkloadID(canary.KindDaemonSet, d.Name), Kind: canary.KindDaemonSet,
		ResourceVersion: d.ResourceVersion, Labels: d.Labels, Annotations: d.Annotations,
		TemplateLabels: d.Spec.Template.Labels, TemplateAnnotations: d.Spec.Template.Annotations,
		Replicas: d.Status.DesiredNumberScheduled, Generation: d.Generation,
		OnDelete: d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType,
		Status: canary.RolloutStatus{
			ObservedGeneration: d.Status.ObservedGeneration, Replicas: d.Status.CurrentNumberScheduled,
			UpdatedReplicas: d.Status.UpdatedNumberScheduled, ReadyReplicas: d.Status.NumberReady,
			AvailableReplicas: d.Status.NumberAvailable,
		},
	}
}

// ownerKey names a controller as a controller reference does: by kind,
// name and UID. Kubernetes' controllers take a reference as theirs only
// when it carries their object's UID (resolveControllerRef); the name
// alone may be anyone's.
type ownerKey struct {
	kind, name string
	uid        types.UID
}

// keyOf is the key of obj as a controller of kind.
func keyOf(kind string, obj metav1.Object) ownerKey {
	return ownerKey{kind: kind, name: obj.GetName(), uid: obj.GetUID()}
}

// controllerKey is the key of obj's controller; false when it has none.
func controllerKey(obj metav1.Object) (ownerKey, bool) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil {
		return ownerKey{}, false
	}
	return ownerKey{kind: ref.Kind, name: ref.Name, uid: ref.UID}, true
}

// noteRestart keeps in newest the later of owner's stamp there and stamp,
// a kubectl.kubernetes.io/restartedAt value; an unreadable one counts for
// nothing.
func noteRestart(newest map[ownerKey]time.Time, owner ownerKey, stamp string) {
	if at, err := time.Parse(time.RFC3339, stamp); err == nil && at.After(newest[owner]) {
		newest[owner] = at
	}
}

// daemonSetHash is the controller-revision-hash of a DaemonSet's newest
// ControllerRevision: the template its controller rolls out. "" when none
// is cached yet.
func daemonSetHash(newest *CachedControllerRevision) string {
	if newest == nil {
		return ""
	}
	return newest.Hash
}

// daemonPodCurrent applies the DaemonSet controller's own test of an
// updated pod: its hash is the newest revision's, or its
// pod-template-generation is the DaemonSet's template generation. That is
// the deprecated.daemonset.template.generation annotation, not
// metadata.generation: a change of anything else in the spec
// (minReadySeconds, the update strategy) moves the one and not the other,
// e.g. generation 5 with template generation 3.
func daemonPodCurrent(p *CachedPod, d *appsv1.DaemonSet, hash string) bool {
	if hash != "" && p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
		return true
	}
	gen, ok := d.Annotations[appsv1.DeprecatedTemplateGeneration]
	if _, err := strconv.ParseInt(gen, 10, 64); !ok || err != nil {
		return false
	}
	return p.Labels[appsv1.DeprecatedTemplateGeneration] == gen
}

func podOf(p *CachedPod) canary.Pod {
	return canary.Pod{
		Name: p.Name, Labels: p.Labels, Annotations: p.Annotations,
		CreatedAt:   p.CreationTimestamp.Time,
		Running:     p.Phase == corev1.PodRunning,
		Ready:       p.Ready,
		Terminating: p.DeletionTimestamp != nil,
		Waiting:     p.Waiting,
		Node:        p.Node,
		UID:         string(p.UID),
		Revision:    p.Revision,
	}
}

func coveredByPDB(template map[string]string, pdbs []*policyv1.PodDisruptionBudget) bool {
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(template)) {
			return true
		}
	}
	return false
}

// revisions reads the mesh's revisions and tags from the injector
// webhooks, without their istiods: enough to resolve a target.
func (c *Caches) revisions() (canary.Mesh, error) {
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
			m.Revisions[rev] = canary.Revision{Name: rev, Roots: rootsOf(mwc)}
		}
	}
	if rev, ok := m.Tags["default"]; ok {
		m.Auto, m.AutoFrom = rev, "the tag default"
	}
	if c.compat != nil {
		if rev, from := sailActiveRevision(c.compat.list(sailIstiosResource, "")); rev != "" {
			m.Auto, m.AutoFrom = rev, from
		}
	}
	return m, nil
}

// sailActiveRevision is the active revision of the Sail Operator's Istio
// resource named default, else of the only one that names one, with where
// it was read; "" when none does, or several do and none is named default:
// which one the mesh means cannot be told.
func sailActiveRevision(istios []*unstructured.Unstructured) (rev, from string) {
	var named []*unstructured.Unstructured
	for _, u := range istios {
		if r, _, _ := unstructured.NestedString(u.Object, "status", "activeRevisionName"); r != "" {
			if u.GetName() == "default" {
				return r, "Sail's Istio default, status.activeRevisionName"
			}
			named = append(named, u)
		}
	}
	if len(named) != 1 {
		return "", ""
	}
	r, _, _ := unstructured.NestedString(named[0].Object, "status", "activeRevisionName")
	return r, "Sail's Istio " + named[0].GetName() + ", status.activeRevisionName"
}

// mesh reads the installed revisions and tags from the injector webhook
// configurations, and istiod's readiness from its pods.
func (c *Caches) mesh(rootNamespace string) (canary.Mesh, error) {
	m, err := c.revisions()
	if err != nil {
		return m, err
	}
	istiods, err := c.Pods.In(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "istiod"}))
	if err != nil {
		return m, err
	}
	sort.Slice(istiods, func(i, j int) bool { return istiods[i].Name < istiods[j].Name })
	for _, p := range istiods {
		rev, ok := m.Revisions[p.Labels[canary.LabelRev]]
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		rev.Istiods++
		ready := p.Ready && p.Phase == corev1.PodRunning
		if ready {
			rev.ReadyIstiods++
		}
		// The first Ready istiod's image names the version; a replica
		// that is not Ready only until one is.
		if image := istiodImage(p); image != "" && (rev.VersionFrom == "" || ready && rev.ReadyIstiods == 1) {
			if v := canary.VersionFromImage(image); v != "" {
				rev.ProxyVersion, rev.VersionFrom = v, "istiod image "+image
			}
		}
		m.Revisions[rev.Name] = rev
	}
	if m.Ztunnels, err = c.readyByNode(rootNamespace, labels.Set{"app": "ztunnel"}); err != nil {
		return m, err
	}
	if m.CNINodeAgents, err = c.readyByNode(rootNamespace, labels.Set{"k8s-app": "istio-cni-node"}); err != nil {
		return m, err
	}
	for name, rev := range m.Revisions {
		if rev.ProxyVersion == "" {
			if v := canary.VersionFromRevision(name); v != "" {
				rev.ProxyVersion, rev.VersionFrom = v, "revision name "+name
				m.Revisions[name] = rev
			}
		}
	}
	return m, nil
}

// readyByNode says, for each node a pod of the namespace that set selects
// is scheduled on, whether one of them is Ready there; nil when none is
// scheduled.
func (c *Caches) readyByNode(namespace string, set labels.Set) (map[string]bool, error) {
	pods, err := c.Pods.In(namespace).List(labels.SelectorFromSet(set))
	if err != nil {
		return nil, err
	}
	var out map[string]bool
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Node == "" {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[p.Node] = out[p.Node] || p.Ready && p.Phase == corev1.PodRunning
	}
	return out, nil
}

// istiodImage is the image of istiod's discovery container, as Istio's
// chart names it, or of its only container.
func istiodImage(p *CachedPod) string {
	for _, c := range p.Containers {
		if c.Name == "discovery" {
			return c.Image
		}
	}
	if len(p.Containers) == 1 {
		return p.Containers[0].Image
	}
	return ""
}

// Istiods returns a lister of the Ready istiod pods of a revision, with
// their IPs, for the sync gate.
func (c *Caches) Istiods(rootNamespace string) func(string) []analysis.Istiod {
	return func(rev string) []analysis.Istiod {
		pods, err := c.Pods.In(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "istiod", canary.LabelRev: rev}))
		if err != nil {
			return nil
		}
		var out []analysis.Istiod
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.IP != "" && p.Ready {
				out = append(out, analysis.Istiod{Pod: p.Name, IP: p.IP, Revision: rev})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
		return out
	}
}

// Ztunnels returns a lister of the ztunnel pods (app=ztunnel, as Istio's
// chart labels its DaemonSet's pods) in the root namespace on a node.
func (c *Caches) Ztunnels(rootNamespace string) func(node string) []analysis.ZtunnelPod {
	return func(node string) []analysis.ZtunnelPod {
		pods, err := c.Pods.In(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "ztunnel"}))
		if err != nil {
			return nil
		}
		var out []analysis.ZtunnelPod
		for _, p := range pods {
			if p.Node == node && p.DeletionTimestamp == nil {
				out = append(out, analysis.ZtunnelPod{Pod: p.Name, Namespace: p.Namespace, Ready: p.Ready})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
		return out
	}
}

// peers are the other namespaces that opted in or still carry a status.
// resolve resolves their targets as the decisions do (canary.Mesh.Resolve).
func (c *Caches) peers(self string, resolve func(string) (string, bool)) ([]canary.Peer, error) {
	nss, err := c.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []canary.Peer
	for _, ns := range nss {
		if ns.Name == self {
			continue
		}
		if p, ok := c.peerOf(ns, resolve); ok {
			out = append(out, p)
		}
	}
	if c.peerMemo.size() > len(nss) {
		names := make(map[string]bool, len(nss))
		for _, ns := range nss {
			names[ns.Name] = true
		}
		c.peerMemo.keepOnly(names)
	}
	return out, nil
}

// peerOf reads ns as a peer: its target, priority and whether it holds a
// migration slot (canary.PeerOf).
func (c *Caches) peerOf(ns *corev1.Namespace, resolve func(string) (string, bool)) (canary.Peer, bool) {
	return c.peerMemo.of(ns, resolve, func() ([]canary.Workload, error) { return c.recordsOf(ns.Name) }, func() (uint64, bool) {
		if c.stamps == nil {
			return 0, false
		}
		return c.stamps.of(ns.Name), true
	})
}

// workloadObjects are a namespace's cached Deployments, StatefulSets and
// DaemonSets: the kinds meshwave moves.
func (c *Caches) workloadObjects(ns string) ([]*appsv1.Deployment, []*appsv1.StatefulSet, []*appsv1.DaemonSet, error) {
	deps, err := c.Deployments.Deployments(ns).List(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	stss, err := c.StatefulSets.StatefulSets(ns).List(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	dss, err := c.DaemonSets.DaemonSets(ns).List(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	return deps, stss, dss, nil
}

// recordsOf are a namespace's Deployments, StatefulSets and DaemonSets as
// a peer's move records are read from them: with their kept facts, without
// their pods.
func (c *Caches) recordsOf(ns string) ([]canary.Workload, error) {
	deps, stss, dss, err := c.workloadObjects(ns)
	if err != nil {
		return nil, err
	}
	out := make([]canary.Workload, 0, len(deps)+len(stss)+len(dss))
	for _, d := range deps {
		w := workloadOf(d)
		w.Facts = c.facts.deployments.get(d, &w)
		out = append(out, w)
	}
	for _, s := range stss {
		w := statefulSetWorkload(s)
		w.Facts = c.facts.statefulSets.get(s, &w)
		out = append(out, w)
	}
	for _, d := range dss {
		w := daemonSetWorkload(d)
		w.Facts = c.facts.daemonSets.get(d, &w)
		out = append(out, w)
	}
	return out, nil
}

// workloadMeta returns the cached object a workload ID names.
func (c *Caches) workloadMeta(ns, id string) (metav1.Object, runtime.Object, bool) {
	kind, name, ok := canary.SplitWorkloadID(id)
	if !ok {
		return nil, nil, false
	}
	var err error
	var obj interface {
		metav1.Object
		runtime.Object
	}
	switch kind {
	case canary.KindStatefulSet:
		obj, err = c.StatefulSets.StatefulSets(ns).Get(name)
	case canary.KindDaemonSet:
		obj, err = c.DaemonSets.DaemonSets(ns).Get(name)
	default:
		obj, err = c.Deployments.Deployments(ns).Get(name)
	}
	if err != nil {
		return nil, nil, false
	}
	return obj, obj, true
}

// rootsOf are the fingerprints of the certificates in the caBundle istiod
// wrote into its injector webhook configuration: the root of trust the
// revision distributes, sorted; nil when none is there.
func rootsOf(mwc *admissionregv1.MutatingWebhookConfiguration) []string {
	for _, h := range mwc.Webhooks {
		if !strings.HasSuffix(h.Name, injectorWebhookSuffix) || len(h.ClientConfig.CABundle) == 0 {
			continue
		}
		var roots []string
		rest := h.ClientConfig.CABundle
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			sum := sha256.Sum256(block.Bytes)
			if fp := "sha256:" + hex.EncodeToString(sum[:]); !slices.Contains(roots, fp) {
				roots = append(roots, fp)
			}
		}
		slices.Sort(roots)
		return roots
	}
	return nil
}
