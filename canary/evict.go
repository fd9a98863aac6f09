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

// NextEviction returns the pod to evict next, if one may go now, and
// otherwise what it waits for (why is "" when nothing is left to do).
//
// A template restart replaces no pod of an OnDelete workload, so meshwave
// replaces them one at a time: only when every pod it wants is up, none is
// going away and every pod already replaced is Ready and runs the expected
// revision's proxy does the next old pod go. Among the old pods, one that
// is not Ready goes first (it serves nothing), but only once every wanted
// pod is there: never two out at once. Otherwise a StatefulSet's pods go highest ordinal first, as its own
// rolling update would, and a DaemonSet's node by node, in node name order.
//
// A StatefulSet rolling back under RollingUpdate needs the same help for
// one pod: its controller waits forever for a pod of the bad template that
// never got Ready before it rolls anything back, so such a pod (one that
// does not run the expected proxy) is evicted and recreated from the
// restored template.
func NextEviction(w Workload, expect Place, rollback bool) (pod Pod, ok bool, why string) {
	stuckRollback := rollback && !w.OnDelete && w.KindOf() == KindStatefulSet
	if !w.OnDelete && !stuckRollback {
		return Pod{}, false, ""
	}
	var old, down []Pod
	live := 0
	for _, p := range w.Pods {
		if p.Terminating {
			return Pod{}, false, fmt.Sprintf("pod %s is going away", p.Name)
		}
		live++
		switch {
		case !p.Current && !p.Ready && stuckRollback && p.At(expect):
			// Already on the source's proxy: not a pod of the moved
			// template, and its controller replaces it once it is Ready
			// again; evicted, it would be one more pod down.
		case !p.Current && !p.Ready:
			down = append(down, p)
		case !p.Current:
			old = append(old, p)
		case stuckRollback:
			// Its own controller replaces the rest.
		case !p.Ready:
			return Pod{}, false, fmt.Sprintf("replaced pod %s is not ready yet", p.Name)
		case !p.At(expect):
			got := "no proxy"
			switch {
			case p.Injected():
				got = "a proxy of " + p.Revision
			case p.InAmbient():
				got = "in ambient"
			}
			return Pod{}, false, fmt.Sprintf("replaced pod %s runs %s, not %s: no further pod is replaced", p.Name, got, expectedPlace(expect))
		}
	}
	if stuckRollback {
		if len(down) > 0 {
			return w.firstToGo(down), true, ""
		}
		return Pod{}, false, ""
	}
	if len(old)+len(down) == 0 {
		return Pod{}, false, ""
	}
	// Never two out at once, not even an unready one beside a missing
	// one: a quorum of three survives one. An OrderedReady StatefulSet
	// whose missing pod waits for that unready one stalls instead, and
	// its readiness timeout ends the wave.
	if live < int(w.Replicas) {
		return Pod{}, false, fmt.Sprintf("%d of %d pods are up", live, w.Replicas)
	}
	if len(down) > 0 {
		return w.firstToGo(down), true, ""
	}
	return w.firstToGo(old), true, ""
}

// firstToGo orders pods the way the workload's controller would replace
// them: a StatefulSet's highest ordinal first, anything else by node.
func (w Workload) firstToGo(pods []Pod) Pod {
	if w.KindOf() == KindStatefulSet {
		slices.SortFunc(pods, func(a, b Pod) int { return cmp.Compare(ordinal(b.Name), ordinal(a.Name)) })
	} else {
		slices.SortFunc(pods, func(a, b Pod) int {
			return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Name, b.Name))
		})
	}
	return pods[0]
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
// expect is on record for this wave, unless the move did not pass its
// wave (an outcome on its record) or the workload now carries
// meshwave.io/skip.
func evictions(m *machine, members []parsedWorkload, expect Place, rollback bool) {
	for _, w := range members {
		if !w.OnDelete && (!rollback || w.KindOf() != KindStatefulSet) {
			continue
		}
		r := w.record
		if r == nil || r.Migration != m.st.MigrationID() || r.Rollback != rollback || r.Revision != expect.Revision || r.Outcome != "" {
			continue
		}
		if w.settings.Skip {
			continue // meshwave.io/skip: never touched
		}
		pod, ok, _ := NextEviction(*w.Workload, expect, rollback)
		if !ok {
			continue
		}
		replaced := 0
		for _, p := range w.Pods {
			if p.Current {
				replaced++
			}
		}
		msg := fmt.Sprintf("evicting pod %s of %s (%d of %d replaced): its updateStrategy is OnDelete, so it moves to %s one pod at a time", pod.Name, describe(w.Name), replaced, w.Replicas, expect)
		if !w.OnDelete {
			msg = fmt.Sprintf("evicting pod %s of %s: it never got ready, and its controller rolls nothing back to %s while it waits for it", pod.Name, describe(w.Name), expect)
		}
		m.out.Evictions = append(m.out.Evictions, Eviction{Workload: w.Name, Pod: pod.Name, UID: pod.UID, Message: msg})
		// Each pod's replacement shows in the status: one write per pod,
		// which also fences the eviction with the namespace's
		// resourceVersion, as every restart is.
		for i := range m.st.Workloads {
			if m.st.Workloads[i].Name == w.Name {
				m.st.Workloads[i].Reason = fmt.Sprintf("%d of %d pods replaced; evicting %s", replaced, w.Replicas, pod.Name)
			}
		}
	}
}
