package agent

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshwave/meshwave/canary"
)

// ambientHolders lists the pods that run no sidecar, enrolled in ambient
// mode (by their own istio.io/dataplane-mode=ambient, or by their
// namespace's unless they say none) and redirected to ztunnel by the
// istio-cni node agent (ambient.istio.io/redirection: enabled: a pod on
// the host's network, or one it has not reached, is never redirected and
// holds nothing), on nodes where a ztunnel of revision
// runs (a pod app=ztunnel of the root namespace annotated istio.io/rev of
// it, as Istio's chart writes it, or labelled so; neither is "default"): removing the revision leaves them without
// a data plane. Grouped by namespace and owner, in name order.
func (c *Caches) ambientHolders(rootNamespace, revision string) ([]canary.AmbientHolder, int, error) {
	served, err := c.ztunnelRevisions(rootNamespace)
	if err != nil {
		return nil, 0, err
	}
	if !servesAny(served, revision) {
		return nil, 0, nil
	}
	ambientNS, err := c.enrolledNamespaces()
	if err != nil {
		return nil, 0, err
	}
	pods, err := c.Pods.List(labels.Everything())
	if err != nil {
		return nil, 0, err
	}
	type key struct{ ns, kind, name string }
	groups := map[key]*canary.AmbientHolder{}
	total := 0
	for _, p := range pods {
		if !slices.Contains(served[p.Node], revision) || !inAmbient(p, ambientNS[p.Namespace], rootNamespace) {
			continue
		}
		o := c.ownerOf(p)
		k := key{p.Namespace, o.Kind, o.Name}
		g := groups[k]
		if g == nil {
			g = &canary.AmbientHolder{Namespace: p.Namespace, Kind: o.Kind, Name: o.Name}
			groups[k] = g
		}
		g.Pods = append(g.Pods, p.Name)
		if !slices.Contains(g.Nodes, p.Node) {
			g.Nodes = append(g.Nodes, p.Node)
		}
		total++
	}
	out := make([]canary.AmbientHolder, 0, len(groups))
	for _, g := range groups {
		slices.Sort(g.Pods)
		slices.Sort(g.Nodes)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b canary.AmbientHolder) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out, total, nil
}

// ztunnelRevisions are the revisions of the ztunnels running on each
// node, in name order: pods app=ztunnel of the root namespace, Running
// and not deleted, annotated istio.io/rev (as Istio's chart writes it) or
// labelled so, "default" with neither. A node with none is absent. A pod
// that ended (evicted, failed) or has not started serves nothing; two
// running on one node (an upgrade's overlap) both count, as the pods
// there may be held by either.
func (c *Caches) ztunnelRevisions(rootNamespace string) (map[string][]string, error) {
	ztunnels, err := c.Pods.In(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "ztunnel"}))
	if err != nil {
		return nil, err
	}
	served := map[string][]string{}
	for _, z := range ztunnels {
		rev := cmp.Or(z.Annotations[canary.LabelRev], z.Labels[canary.LabelRev], "default")
		if z.DeletionTimestamp == nil && z.Node != "" && z.Phase == corev1.PodRunning && !slices.Contains(served[z.Node], rev) {
			served[z.Node] = append(served[z.Node], rev)
			slices.Sort(served[z.Node])
		}
	}
	return served, nil
}

// enrolledNamespaces says which namespaces are labelled
// istio.io/dataplane-mode=ambient.
func (c *Caches) enrolledNamespaces() (map[string]bool, error) {
	nss, err := c.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, ns := range nss {
		out[ns.Name] = ns.Labels[canary.LabelDataplaneMode] == canary.DataplaneAmbient
	}
	return out, nil
}

// inAmbient reports whether p runs in ambient mode: no sidecar, enrolled
// (by its own istio.io/dataplane-mode=ambient, or by its namespace's
// unless it says none), redirected to ztunnel by istio-cni, alive, and
// no ztunnel itself.
func inAmbient(p *CachedPod, namespaceEnrolled bool, rootNamespace string) bool {
	mode := p.Labels[canary.LabelDataplaneMode]
	enrolled := mode == canary.DataplaneAmbient || namespaceEnrolled && mode != "none"
	switch {
	case !enrolled, p.Annotations[canary.AnnotationRedirection] != canary.RedirectionEnabled,
		p.Revision != "", p.DeletionTimestamp != nil,
		p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed, p.Namespace == rootNamespace && p.Labels["app"] == "ztunnel":
		return false
	}
	return true
}

// countAmbient calls count with the namespace of each of pods that runs
// in ambient, and the revision of each ztunnel running on its node.
func (c *Caches) countAmbient(pods []*CachedPod, rootNamespace string, count func(namespace, revision string)) error {
	served, err := c.ztunnelRevisions(rootNamespace)
	if err != nil || len(served) == 0 {
		return err
	}
	enrolled, err := c.enrolledNamespaces()
	if err != nil {
		return err
	}
	for _, p := range pods {
		if revs, ok := served[p.Node]; ok && inAmbient(p, enrolled[p.Namespace], rootNamespace) {
			for _, rev := range revs {
				count(p.Namespace, rev)
			}
		}
	}
	return nil
}

// servesAny reports whether a ztunnel of revision runs on any node.
func servesAny(served map[string][]string, revision string) bool {
	for _, revs := range served {
		if slices.Contains(revs, revision) {
			return true
		}
	}
	return false
}
