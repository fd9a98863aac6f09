package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
)

func renderPlan(out io.Writer, plan agent.Plan, format string) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(plan)
	}
	if len(plan.Namespaces) == 0 {
		_, err := fmt.Fprintln(out, "no namespace carries "+canary.AnnotationTargetRevision)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPRIORITY\tTARGET\tWAVE\tWORKLOAD\tPATCH")
	prio := map[string]canary.NamespacePlan{}
	for _, p := range plan.Namespaces {
		prio[p.Namespace] = p
	}
	for _, w := range plan.Workloads {
		p := prio[w.Namespace]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", w.Namespace, p.Priority, targetOf(p), w.Wave, w.Workload, describeChanges(w.Changes))
	}
	for _, p := range plan.Namespaces {
		if len(p.Waves) == 0 {
			fmt.Fprintf(tw, "%s\t%d\t%s\t-\t-\tnothing to move\n", p.Namespace, p.Priority, targetOf(p))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var left [][3]string
	for _, p := range plan.Namespaces {
		for _, x := range p.Excluded {
			left = append(left, [3]string{p.Namespace, x.Workload, x.Reason})
		}
	}
	if len(left) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEFT OUT\tWORKLOAD\tREASON")
	for _, l := range left {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l[0], l[1], l[2])
	}
	return tw.Flush()
}

func targetOf(p canary.NamespacePlan) string {
	if p.TargetRevision != "" && p.TargetRevision != p.Target {
		return p.Target + " (" + p.TargetRevision + ")"
	}
	return p.Target
}

// describeChanges renders a move's template changes compactly: the
// restart, then the persisted keys.
func describeChanges(c canary.TemplateChanges) string {
	parts := []string{"restartedAt"}
	keys := make([]string, 0, len(c.Annotations))
	for k := range c.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%s", k, c.Annotations[k]))
	}
	if app, ok := c.Labels["app"]; ok {
		parts = append(parts, "label app="+app)
	}
	return strings.Join(parts, ", ")
}
