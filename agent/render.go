package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshwave/meshwave/canary"
)

// RenderPlan writes a plan as a table, or as JSON when format is "json".
func RenderPlan(out io.Writer, plan Plan, format string) error {
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

// RenderStatus writes a table per namespace, in migration order: phase,
// wave k/n, workloads moved, failed and total, how long it has been paused,
// and the last verdicts with their numbers; or JSON when format is "json".
func RenderStatus(out io.Writer, rows []NamespaceStatus, format string) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(out, "no namespace carries "+canary.AnnotationTargetRevision)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tTARGET\tPHASE\tWAVE\tMOVED\tFAILED\tTOTAL\tPAUSED\tLAST VERDICTS")
	for _, r := range rows {
		st := r.Status
		if st == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\n", r.Namespace, r.Target, "Pending")
			continue
		}
		paused := "-"
		if r.PausedFor > 0 {
			paused = time.Duration(r.PausedFor * float64(time.Second)).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\n", r.Namespace, targetLabel(st), st.Phase, st.Wave, st.TotalWaves,
			st.Counts.Moved, st.Counts.Failed, st.Counts.Total, paused, verdictSummary(st.Verdicts))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Status != nil && r.Status.Reason != "" {
			fmt.Fprintf(out, "\n%s: %s", r.Namespace, r.Status.Reason)
		}
	}
	fmt.Fprintln(out)
	return nil
}

func targetLabel(st *canary.Status) string {
	if st.TargetRevision != "" && st.TargetRevision != st.Target {
		return st.Target + " (" + st.TargetRevision + ")"
	}
	return st.Target
}

// verdictSummary renders the last verdicts compactly, with the worst
// measured value of each metric check against its threshold.
func verdictSummary(vs []canary.Verdict) string {
	if len(vs) == 0 {
		return "-"
	}
	var parts []string
	for _, v := range vs {
		s := v.Gate + " " + strings.ToLower(string(v.Result))
		if v.Analysis && len(v.Measurements) > 0 && v.Measurements[0].Threshold != nil {
			m := v.Measurements[0]
			s += fmt.Sprintf(" %.4g/%.4g", m.Value, *m.Threshold)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
