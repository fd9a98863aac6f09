package canary

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Eviction is a pod of an OnDelete workload to evict through the Eviction
// API, so that its controller recreates it from the restarted template
// and PodDisruptionBudgets are honoured.
type Eviction struct {
	Workload string
	Pod      string
	// UID is the pod's: the eviction is refused if the pod was replaced.
	UID string
	// Message says why, for the Event: which pod of how many.
	Message string
}

// NextEviction returns the pod of an OnDelete workload to replace next, if
// one may go now. A template restart replaces no pod of such a workload,
// so meshwave replaces them one at a time: only when every pod it wants
// is up, Ready and none is going away, and every pod already replaced
// runs the expected revision's proxy, does the next old pod go. A
// StatefulSet's pods go highest ordinal first, as its own rolling update
// would; a DaemonSet's node by node, in node name order. ok is false when
// nothing is to be evicted now; why then says what it waits for ("" when
// every pod is replaced).
func NextEviction(w Workload, expect string) (pod Pod, ok bool, why string) {
	if !w.OnDelete {
		return Pod{}, false, ""
	}
	var old []Pod
	live := 0
	for _, p := range w.Pods {
		if p.Terminating {
			return Pod{}, false, fmt.Sprintf("pod %s is going away", p.Name)
		}
		live++
		if !p.Current {
			old = append(old, p)
			continue
		}
		if !p.Ready {
			return Pod{}, false, fmt.Sprintf("replaced pod %s is not ready yet", p.Name)
		}
		if p.Revision != expect {
			got := "no proxy"
			if p.Injected() {
				got = "a proxy of " + p.Revision
			}
			return Pod{}, false, fmt.Sprintf("replaced pod %s runs %s, not of %s: no further pod is replaced", p.Name, got, expect)
		}
	}
	if len(old) == 0 {
		return Pod{}, false, ""
	}
	if live < int(w.Replicas) {
		return Pod{}, false, fmt.Sprintf("%d of %d pods are up", live, w.Replicas)
	}
	for _, p := range old {
		if !p.Ready {
			return Pod{}, false, fmt.Sprintf("pod %s is not ready: evicting another would take two down", p.Name)
		}
	}
	if w.KindOf() == KindStatefulSet {
		slices.SortFunc(old, func(a, b Pod) int { return cmp.Compare(ordinal(b.Name), ordinal(a.Name)) })
	} else {
		slices.SortFunc(old, func(a, b Pod) int {
			return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Name, b.Name))
		})
	}
	return old[0], true, ""
}

// ordinal is a StatefulSet pod's ordinal, the number after its last dash;
// -1 when it has none.
func ordinal(pod string) int {
	i := strings.LastIndexByte(pod, '-')
	n, err := strconv.Atoi(pod[i+1:])
	if i < 0 || err != nil {
		return -1
	}
	return n
}

// evictions adds the next eviction of each OnDelete member whose move to
// expect is on record for this wave.
func (d *decider) evictions(members []Workload, expect string, rollback bool) {
	for _, w := range members {
		if !w.OnDelete {
			continue
		}
		r, ok := ReadMoveRecord(w.Annotations)
		if !ok || r.Migration != d.st.MigrationID() || r.Rollback != rollback || r.Revision != expect {
			continue
		}
		pod, ok, _ := NextEviction(w, expect)
		if !ok {
			continue
		}
		replaced := 0
		for _, p := range w.Pods {
			if p.Current {
				replaced++
			}
		}
		d.out.Evictions = append(d.out.Evictions, Eviction{Workload: w.Name, Pod: pod.Name, UID: pod.UID,
			Message: fmt.Sprintf("evicting pod %s of %s (%d of %d replaced): its updateStrategy is OnDelete, so it moves to %s one pod at a time", pod.Name, describe(w.Name), replaced, w.Replicas, expect)})
	}
}
