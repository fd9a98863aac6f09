package canary

import (
	"fmt"
	"strings"
)

// subsetWarnings are the routing Istio's guide asks a person to move
// before a namespace leaves its sidecars, which meshwave reports as a
// compatibility warning (prechecks.strict blocks on it): the subsets its
// VirtualServices route to and its DestinationRules define.
func subsetWarnings(m *machine) []string {
	var out []string
	for _, r := range m.snap().Compat.SubsetRoutes {
		verb := "routes to"
		if r.Kind == "DestinationRule" {
			verb = "defines"
		}
		out = append(out, fmt.Sprintf("%s %s/%s %s subsets (%s): a pod in ambient is reached through ztunnel, which applies no subset, and a waypoint applies VirtualServices only in part; move them to an HTTPRoute with a Service per version, as Istio's guide says",
			r.Kind, r.Namespace, r.Name, verb, strings.Join(r.Subsets, ", ")))
	}
	return out
}

// reporterWarning is the guide's note on telemetry, for every move to
// ambient: what meshwave cannot see (a dashboard, an alert elsewhere), it
// says once, without blocking.
const reporterWarning = `dashboards and alerts keyed on reporter="destination" lose the moved workloads' requests: in ambient no sidecar reports them; a waypoint reports them with reporter="waypoint", and ztunnel only connections (istio_tcp_*)`
