package canary

import (
	"fmt"
	"strings"
)

// unfoundedCompletion says why a Completed status is not believed, or "":
// it says waves of its migration ran, yet the namespace does not carry
// the label the migration switched, no workload carries a move record of
// that migration and no pod runs where it moved them, while injected pods
// of workloads it did not leave out still run elsewhere. A migration completes only after
// its waves' patches (each with its record) and their gates: such a
// status was written by hand, or copied from another namespace. Believed,
// it would stand for ever over workloads that never moved, and tell the
// fleet's later rings that this one is done. Move records a person
// removed after a real completion leave the pods on the target, which
// found it.
func unfoundedCompletion(records func() workloadSet, st *Status, labels map[string]string) string {
	if st == nil || st.unblockedPhase() != PhaseCompleted || st.Wave == 0 || st.MigrationID() == "" {
		return ""
	}
	if rev, ok := labels[LabelRev]; st.NamespaceEnrolled || ok && rev == st.label() {
		// The namespace shows the switch; a label a person put back is
		// the revert check's to name.
		return ""
	}
	left := map[string]bool{}
	for _, x := range append(append([]Exclusion{}, st.Skipped...), st.Unmovable...) {
		left[x.Workload] = true
	}
	id, target := st.MigrationID(), st.targetPlace()
	var elsewhere []string
	for _, w := range records() {
		if w.record != nil && w.record.Migration == id {
			return ""
		}
		off := false
		for _, p := range w.livePods() {
			if p.At(target) {
				return ""
			}
			off = off || p.Injected()
		}
		if off && w.gateway == "" && !left[w.Name] {
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
	return fmt.Sprintf("the status says migration %s completed %d waves, but the namespace is not labelled %s=%s, no workload carries a move record of it and no pod runs %s, while %s%s still run elsewhere",
		id, st.Wave, LabelRev, st.label(), target, strings.Join(elsewhere, ", "), more)
}
