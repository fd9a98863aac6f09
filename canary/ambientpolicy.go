package canary

import (
	"fmt"
	"slices"
	"strings"
)

// policiesUnread says which of the policy kinds could not be read, and
// why, or "": missing data never lets a move to ambient start, nor its
// next wave; it waits for them, and goes on once they are read.
func policiesUnread(c Compat) string {
	var out []string
	for _, u := range c.Unread {
		out = append(out, "cannot read "+u)
	}
	return strings.Join(out, "; ")
}

// PeerAuthentication is the part of a security.istio.io PeerAuthentication
// the move to ambient's precheck reads.
type PeerAuthentication struct {
	Namespace, Name string
	// MatchLabels is spec.selector.matchLabels; empty applies to the whole
	// namespace (or the mesh, in the root namespace).
	MatchLabels map[string]string
	// Mode is spec.mtls.mode; DisabledPorts the ports of spec.portLevelMtls
	// whose mode is DISABLE.
	Mode          string
	DisabledPorts []string
	// MeshWide is true for one in the root namespace with no selector: it
	// applies to every namespace.
	MeshWide bool
}

// AuthorizationPolicy is the part of a security.istio.io
// AuthorizationPolicy the move to ambient's precheck reads.
type AuthorizationPolicy struct {
	Namespace, Name string
	// MatchLabels is spec.selector.matchLabels; empty with no TargetRefs
	// applies to the whole namespace.
	MatchLabels map[string]string
	// TargetRefs is true when it binds to a waypoint or a gateway
	// (spec.targetRef or spec.targetRefs): ztunnel leaves it alone.
	TargetRefs bool
	// L7 names what ztunnel cannot enforce in it (L7Features).
	L7 []string
	// MeshWide is true for one in the root namespace with no selector.
	// One in the root namespace with a selector applies in every
	// namespace to what it selects.
	MeshWide bool
	// UID names this very policy: one of the same name made since is
	// another.
	UID string
	// Action is spec.action, ALLOW when unset; Rules is spec.rules as
	// canonical JSON: a replacement holds the same.
	Action, Rules string
	// Refs are its targetRefs (and targetRef), each as Kind/name.
	Refs []string
	// Replaces are the policies its meshwave.io/replaces names.
	Replaces []string
	// Copy is the policy as meshwave would create it again (kind, name,
	// labels, annotations, spec), as JSON; "" when it cannot be kept.
	Copy string
	// DryRun is a policy that only logs what it would decide.
	DryRun bool
	// RootNamespace is a policy of the mesh's root namespace: with a
	// selector, it applies to what it selects in every namespace.
	RootNamespace bool
	// ManagedBy names the GitOps tool that applies it, "" for none.
	ManagedBy string
}

// L7Features names what of an AuthorizationPolicy (its object as plain
// data, as the apiserver serves it) ztunnel cannot enforce, as istiod's
// ambient conversion flags it (pilot/pkg/serviceregistry/ambient/
// authorization.go, handleRule; docs/ambient-facts.md §6): the CUSTOM and
// AUDIT actions; hosts, methods, paths, requestPrincipals and
// remoteIpBlocks (and their not* forms); and any when key other than
// source.ip, source.namespace, source.principal, destination.ip and
// destination.port. Sorted, each once.
func L7Features(obj map[string]any) []string {
	spec, _ := obj["spec"].(map[string]any)
	var out []string
	if a, _ := spec["action"].(string); a == "CUSTOM" || a == "AUDIT" {
		out = append(out, "action "+a)
	}
	rules, _ := spec["rules"].([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		for _, part := range []struct{ list, field string }{{"to", "operation"}, {"from", "source"}} {
			items, _ := rule[part.list].([]any)
			for _, it := range items {
				m, _ := it.(map[string]any)
				fields, _ := m[part.field].(map[string]any)
				for k := range fields {
					base := strings.TrimPrefix(k, "not")
					if base == "" {
						continue
					}
					base = strings.ToLower(base[:1]) + base[1:]
					switch base {
					case "hosts", "methods", "paths", "requestPrincipals", "remoteIpBlocks":
						out = append(out, part.list+"."+part.field+"."+k)
					}
				}
			}
		}
		conds, _ := rule["when"].([]any)
		for _, c := range conds {
			m, _ := c.(map[string]any)
			key, _ := m["key"].(string)
			switch key {
			case "source.ip", "source.namespace", "source.principal", "destination.ip", "destination.port":
			default:
				out = append(out, "when "+key)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// policyBlocks says why the policies of the namespace keep its workloads
// from leaving their sidecars, or "":
//   - a PeerAuthentication with mode DISABLE that applies to them (Istio's
//     guide lists it as a blocker: ambient always uses mTLS between mesh
//     workloads, and the policy would be silently ignored);
//   - an AuthorizationPolicy that ztunnel would enforce for them (by
//     selector, or namespace-wide, not bound with targetRefs) that holds
//     rules ztunnel cannot enforce: an ALLOW made only of such rules
//     becomes deny-all, a DENY made only of them does nothing. It must
//     move to targetRefs on a waypoint first; meshwave never deletes it.
//
// What could not be read is policiesUnread's.
func policyBlocks(m *machine, plan NamespacePlan) string {
	c, ns, moved := m.snap().Compat, m.ns, plannedWorkloads(m, plan)
	var out []string
	if m.settings.DeleteReplacedPolicies {
		if why := replacesProblem(c, ns); why != "" {
			out = append(out, why)
		}
	}
	for _, pa := range c.PeerAuthentications {
		if !pa.MeshWide && (pa.Namespace != ns || !selectsAny(pa.MatchLabels, moved)) {
			continue
		}
		switch {
		case pa.Mode == "DISABLE":
			out = append(out, fmt.Sprintf("PeerAuthentication %s/%s sets mTLS mode DISABLE: ambient always uses mTLS between mesh workloads, and ignores it; remove it, or set PERMISSIVE", pa.Namespace, pa.Name))
		case len(pa.DisabledPorts) > 0:
			out = append(out, fmt.Sprintf("PeerAuthentication %s/%s sets mTLS mode DISABLE on port %s: ambient always uses mTLS between mesh workloads, and ignores it; remove it, or set PERMISSIVE", pa.Namespace, pa.Name, strings.Join(pa.DisabledPorts, ", ")))
		}
	}
	for _, ap := range c.AuthorizationPolicies {
		// One of another namespace is the root namespace's (Compat holds
		// no other): it applies in every namespace, to what its selector
		// matches, as istiod binds it for ztunnel too.
		if ap.TargetRefs || len(ap.L7) == 0 || !selectsAny(ap.MatchLabels, moved) {
			continue
		}
		if deletesReplaced(ap, ns) {
			if r := replacementOf(c, ns, m.settings.Waypoint, ap); r != "" {
				if !m.settings.DeleteReplacedPolicies {
					out = append(out, fmt.Sprintf("AuthorizationPolicy %s/%s selects workloads by spec.selector and holds what ztunnel cannot enforce (%s), and %s replaces it on the waypoint: once the pods leave their sidecar, ztunnel denies all their traffic under it (an ALLOW) or drops its HTTP conditions (a DENY); delete it then, as Istio's guide does, with %s=true, which keeps its copy for a rollback", ap.Namespace, ap.Name, strings.Join(ap.L7, ", "), r, AnnotationDeleteReplacedPolicies))
				} else if why := replacedBlock(m, ap, plan); why != "" {
					out = append(out, why)
				}
				continue
			}
		}
		how := "selects workloads by spec.selector"
		switch {
		case ap.MeshWide:
			how = "applies to the whole mesh"
		case len(ap.MatchLabels) == 0:
			how = "applies to the whole namespace"
		}
		out = append(out, fmt.Sprintf("AuthorizationPolicy %s/%s %s and holds what ztunnel cannot enforce (%s): once the pods leave their sidecar, ztunnel denies all their traffic (an ALLOW) or drops its HTTP conditions (a DENY: wider, or void when it has no other); move it to targetRefs on a waypoint first", ap.Namespace, ap.Name, how, strings.Join(ap.L7, ", ")))
	}
	return strings.Join(out, "; ")
}
