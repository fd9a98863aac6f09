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
	ztunnels, err := c.Pods.In(rootNamespace).List(labels.SelectorFromSet(labels.Set{"app": "ztunnel"}))
	if err != nil {
		return nil, 0, err
	}
	served := map[string]bool{}
	for _, z := range ztunnels {
		// Istio's chart annotates its pods with their revision.
		rev := z.Annotations[canary.LabelRev]
		if rev == "" {
			rev = z.Labels[canary.LabelRev]
		}
		if rev == "" {
			rev = "default"
		}
		if rev == revision && z.DeletionTimestamp == nil && z.Node != "" {
			served[z.Node] = true
		}
	}
	if len(served) == 0 {
		return nil, 0, nil
	}
	nss, err := c.Namespaces.List(labels.Everything())
	if err != nil {
		return nil, 0, err
	}
	ambientNS := map[string]bool{}
	for _, ns := range nss {
		ambientNS[ns.Name] = ns.Labels[canary.LabelDataplaneMode] == canary.DataplaneAmbient
	}
	pods, err := c.Pods.List(labels.Everything())
	if err != nil {
		return nil, 0, err
	}
	type key struct{ ns, kind, name string }
	groups := map[key]*canary.AmbientHolder{}
	total := 0
	for _, p := range pods {
		mode := p.Labels[canary.LabelDataplaneMode]
		enrolled := mode == canary.DataplaneAmbient || ambientNS[p.Namespace] && mode != "none"
		switch {
		case !enrolled, p.Annotations[canary.AnnotationRedirection] != canary.RedirectionEnabled,
			p.Revision != "", p.DeletionTimestamp != nil, !served[p.Node],
			p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed, p.Namespace == rootNamespace && p.Labels["app"] == "ztunnel":
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
