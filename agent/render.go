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
	t := p.Target
	if p.TargetRevision != "" && p.TargetRevision != p.Target {
		t = p.Target + " (" + p.TargetRevision + ")"
	}
	switch {
	case p.Ambient:
		t += " ambient"
	case p.AmbientNext:
		t += " sidecar, then ambient"
	}
	if p.Waypoint != "" && (p.Ambient || p.AmbientNext) {
		t += " behind waypoint " + p.Waypoint
	}
	return t
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
	labels := make([]string, 0, len(c.Labels))
	for k := range c.Labels {
		labels = append(labels, k)
	}
	sort.Strings(labels)
	for _, k := range labels {
		parts = append(parts, "label "+k+"="+c.Labels[k])
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
	t := st.Target
	if st.TargetRevision != "" && st.TargetRevision != st.Target {
		t = st.Target + " (" + st.TargetRevision + ")"
	}
	if st.Mode == canary.ModeAmbient {
		t += " ambient"
	}
	return t
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

// RenderHolders writes what holds a revision: a summary line, then a table
// of the pods that run its proxy, by namespace and owner, each with what
// meshwave does about it and why, and a table of the completed and failed
// pods apart, named so that they can be deleted; or JSON when format is
// "json".
func RenderHolders(out io.Writer, h canary.Holders, format string) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(h)
	}
	fmt.Fprintln(out, holdersSummary(h))
	if h.Note != "" {
		fmt.Fprintln(out, "note: "+h.Note)
	}
	if len(h.Holders) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tOWNER\tPODS\tSTATE\tWHY")
		for _, x := range h.Holders {
			fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%s\t%s\n", x.Namespace, x.Kind, x.Name, len(x.Pods), holderState(x), x.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(h.Ambient) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "IN AMBIENT\tOWNER\tPODS\tNODES")
		for _, x := range h.Ambient {
			fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%s\n", x.Namespace, x.Kind, x.Name, len(x.Pods), strings.Join(x.Nodes, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(h.Finished) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COMPLETED OR FAILED\tOWNER\tPHASE\tPODS")
		for _, x := range h.Finished {
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\n", x.Namespace, x.Kind, x.Name, x.Phase, strings.Join(x.Pods, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// holdersSummary is one line: how many pods run the revision's proxy, in
// how many workloads, and how many completed or failed pods still carry it.
func holdersSummary(h canary.Holders) string {
	if h.Pods == 0 && h.FinishedPods == 0 && h.AmbientPods == 0 {
		return "revision " + h.Revision + " holds no pod"
	}
	s := "revision " + h.Revision + ": "
	if h.Pods == 0 {
		s += "no pod runs its proxy"
	} else {
		s += fmt.Sprintf("%s in %s still %s its proxy", plural(h.Pods, "pod"), plural(len(h.Holders), "workload"), verb(h.Pods, "runs", "run"))
	}
	if h.FinishedPods > 0 {
		s += fmt.Sprintf("; %s still %s it", plural(h.FinishedPods, "completed or failed pod"), verb(h.FinishedPods, "carries", "carry"))
	}
	if h.AmbientPods > 0 {
		s += fmt.Sprintf("; %s in %s %s in ambient through its ztunnels", plural(h.AmbientPods, "pod"), plural(len(h.Ambient), "workload"), verb(h.AmbientPods, "runs", "run"))
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// holderState is a holder's state in words, with its wave.
func holderState(h canary.Holder) string {
	switch h.State {
	case canary.HolderWillMove:
		return fmt.Sprintf("will move (wave %d)", h.Wave)
	case canary.HolderMoving:
		if h.Wave > 0 {
			return fmt.Sprintf("is moving (wave %d)", h.Wave)
		}
		return "is moving"
	case canary.HolderLeaving:
		return "is leaving"
	}
	return string(h.State)
}
