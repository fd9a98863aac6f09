package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
)

// FleetCluster is one cluster of the fleet, as `meshwave fleet status`
// shows it: its ring, and its namespaces' statuses, or why it could not
// be read.
type FleetCluster struct {
	Cluster    string            `json:"cluster"`
	Ring       string            `json:"ring"`
	Error      string            `json:"error,omitempty"`
	Namespaces []NamespaceStatus `json:"namespaces"`
}

// FleetStatusNow reads every cluster of the rings through its client
// (clients by cluster name; a cluster without one is reported as such),
// in ring order. It writes nothing.
func FleetStatusNow(ctx context.Context, f FleetConfig, clients map[string]kubernetes.Interface, now time.Time) []FleetCluster {
	var out []FleetCluster
	for _, r := range f.Rings {
		for _, c := range r.Clusters {
			row := FleetCluster{Cluster: c, Ring: r.Name}
			client, ok := clients[c]
			if !ok {
				row.Error = "no kubeconfig context of this name"
				out = append(out, row)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			rows, err := StatusNow(rctx, client, now)
			cancel()
			if err != nil {
				row.Error = err.Error()
			}
			row.Namespaces = rows
			out = append(out, row)
		}
	}
	return out
}

// RenderFleetStatus writes the fleet's clusters as a table, one row a
// namespace (with what it waits for), or as JSON.
func RenderFleetStatus(out io.Writer, clusters []FleetCluster, format string) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(clusters)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RING\tCLUSTER\tNAMESPACE\tTARGET\tPHASE\tWAVE\tREASON")
	for _, c := range clusters {
		if c.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\tUnreadable\t-\t%s\n", c.Ring, c.Cluster, oneLine(c.Error))
			continue
		}
		if len(c.Namespaces) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\tno namespace opted in\n", c.Ring, c.Cluster)
			continue
		}
		for _, n := range c.Namespaces {
			st := n.Status
			if st == nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tPending\t-\t-\n", c.Ring, c.Cluster, n.Namespace, n.Target)
				continue
			}
			reason := st.Reason
			if reason == "" {
				reason = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", c.Ring, c.Cluster, n.Namespace, targetLabel(st), st.Phase, st.Wave, st.TotalWaves, oneLine(reason))
		}
	}
	return tw.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
