package canary

import (
	"fmt"
	"strings"
)

// unfoundedCompletion says why a Completed status is not believed, or "":
// nothing in the namespace shows the migration it says completed, while
// workloads its plan would move still run elsewhere. A migration completes
// only after its waves' patches (each with its move record) and their
// gates, and a completion with nothing to move only when every injected
// workload already ran the target; either switches the namespace's label.
// Such a status was written by hand, or copied from another namespace.
// Believed, it would stand for ever over workloads that never moved, and
// tell the fleet's later rings that this one is done.
//
// What founds a completion:
//   - the namespace's label shows the switch: istio.io/rev on the target,
//     or, for a move that enrolled the namespace in ambient,
//     istio.io/dataplane-mode=ambient (a label a person put back is the
//     revert check's to name);
//   - the status records that meshwave gave the label up to the GitOps
//     tool that owns the namespace, as the namespace's own marks name it:
//     the label then shows that tool's value (a record of a label given
//     up to no owner, or to another, is the status's word alone);
//   - a workload carries a move record of the migration;
//   - a pod runs where the migration moves workloads (move records a
//     person removed after a real completion leave the pods there).
//
// What is left out of a migration is the plan's to say, from the
// workloads as they are (plan.place), never the status's: a status under
// test could list every workload as skipped.
func unfoundedCompletion(records func() workloadSet, st *Status, ns Namespace) string {
	if st == nil || st.unblockedPhase() != PhaseCompleted {
		return ""
	}
	if o, ok := OwnerOf(ns.Labels, ns.Annotations); ok && st.labelHeldBy(o.ID()) {
		return ""
	}
	labels := ns.Labels
	if st.NamespaceEnrolled {
		if labels[LabelDataplaneMode] == DataplaneAmbient {
			return ""
		}
	} else if rev, ok := labels[LabelRev]; ok && rev == st.label() {
		return ""
	}
	id, target := st.MigrationID(), st.targetPlace()
	var elsewhere []string
	for _, w := range records() {
		if id != "" && w.record != nil && w.record.Migration == id {
			return ""
		}
		for _, p := range w.livePods() {
			if p.At(target) {
				return ""
			}
		}
		var plan NamespacePlan
		if _, moves := plan.place(w, target, id); moves {
			elsewhere = append(elsewhere, describe(w.Name))
		}
	}
	if len(elsewhere) == 0 {
		return ""
	}
	more := ""
	if len(elsewhere) > 3 {
		more, elsewhere = fmt.Sprintf(" and %d more", len(elsewhere)-3), elsewhere[:3]
	}
	shows := fmt.Sprintf("the namespace is not labelled %s=%s", LabelRev, st.label())
	if st.NamespaceEnrolled {
		shows = fmt.Sprintf("the namespace is not labelled %s=%s", LabelDataplaneMode, DataplaneAmbient)
	}
	said := fmt.Sprintf("the status says migration %s completed %d waves", id, st.Wave)
	if st.Wave == 0 || id == "" {
		said = fmt.Sprintf("the status says every injected workload already ran %s", target)
	}
	return fmt.Sprintf("%s, but %s, no workload carries a move record of it and no pod runs %s, while %s%s still run elsewhere",
		said, shows, target, strings.Join(elsewhere, ", "), more)
}
