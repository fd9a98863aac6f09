package canary

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// unmovable says, for each workload meshwave never restarts, how many of
// its running pods carry a proxy of another revision than target, and
// why they stay there. label is the namespace's istio.io/rev: where a new
// pod starts. At most maxSkipped are listed, the last one saying how many
// more there are.
func unmovable(ws []Unmovable, target, label string) []Exclusion {
	var out []Exclusion
	for _, w := range ws {
		n := 0
		var revs []string
		for _, rev := range slices.Sorted(maps.Keys(w.Revisions)) {
			if rev != target && w.Revisions[rev] > 0 {
				n += w.Revisions[rev]
				revs = append(revs, rev)
			}
		}
		if n == 0 {
			continue
		}
		on := fmt.Sprintf("%d running %s a proxy of %s", n, plural(n, "pod carries", "pods carry"), strings.Join(revs, ", "))
		kind, _, _ := strings.Cut(w.ID, "/")
		var why string
		switch kind {
		case "CronJob":
			why = "meshwave never restarts a Job: the running one finishes where it started"
			if label != "" {
				why += fmt.Sprintf("; the next run starts with %s=%s", LabelRev, label)
			}
		case "Job":
			why = "meshwave never restarts a Job: it finishes where it started"
		case "ReplicaSet":
			why = "no Deployment owns this ReplicaSet, so nothing restarts its pods: it needs a person"
		case "Pod":
			why = "a bare pod has no controller to create it again: it needs a person"
		default:
			why = fmt.Sprintf("its owner is a %s, which meshwave does not restart: it needs a person", kind)
		}
		// A pod's owner reference may name any kind, and its sidecar
		// status any revision: the status is written with these, so
		// each is cut to its bound here, where it is made.
		out = append(out, Exclusion{Workload: cut(w.ID, maxItemReason), Reason: cut(on+": "+why, maxItemReason)})
	}
	if len(out) > maxSkipped {
		rest := len(out) - maxSkipped + 1
		out = append(out[:maxSkipped-1], Exclusion{Workload: "*", Reason: fmt.Sprintf("and %d more: see meshwave holders", rest)})
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
