package analysis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/meshwave/meshwave/canary"
)

// GateRollout is the rollout gate's name.
const GateRollout = "rollout"

// RolloutGate passes when every member of the wave has rolled out: the
// controller saw the latest generation, every replica is updated and
// available, and no pod of an older template is left. A member still
// rolling out past its readiness timeout fails. Either reason names the
// PodDisruptionBudget that last refused to evict one of a member's pods
// (canary.Workload.EvictionRefused).
type RolloutGate struct{}

// Name implements Gate.
func (RolloutGate) Name() string { return GateRollout }

// Evaluate implements Gate.
func (RolloutGate) Evaluate(_ context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	var waiting []string
	var failed []canary.WorkloadState
	var next time.Duration
	for _, m := range wave.Workloads {
		done, detail := RolledOut(m.Workload)
		if done {
			continue
		}
		if m.EvictionRefused != "" {
			// An OnDelete workload whose budget refuses its evictions
			// waits on the budget, not on its controller.
			detail += "; " + m.EvictionRefused
		}
		if !now.Before(m.Deadline) {
			failed = append(failed, canary.WorkloadState{
				Name: m.Name, State: canary.StateFailed,
				Reason: fmt.Sprintf("%s did not roll out within %s: %s", m.Name, m.Timeout, detail),
			})
			continue
		}
		waiting = append(waiting, m.Name+": "+detail)
		if left := m.Deadline.Sub(now); next == 0 || left < next {
			next = left
		}
	}
	switch {
	case len(failed) > 0:
		reasons := make([]string, 0, len(failed))
		for _, f := range failed {
			reasons = append(reasons, f.Reason)
		}
		return canary.Verdict{Result: canary.ResultFail, Reason: strings.Join(reasons, "; "), Failed: failed}
	case len(waiting) > 0:
		return canary.Verdict{
			Result:     canary.ResultPending,
			Reason:     fmt.Sprintf("%d of %d workloads rolling out: %s", len(waiting), len(wave.Workloads), strings.Join(waiting, "; ")),
			RetryAfter: next,
		}
	}
	return canary.Verdict{Result: canary.ResultPass, Reason: fmt.Sprintf("%d of %d workloads rolled out", len(wave.Workloads), len(wave.Workloads))}
}

// RolledOut reports whether a workload has finished rolling out, and if
// not, what it is waiting for. The new pods' readiness comes before the old
// pods: while a surge keeps an old pod up, the reason that matters is why
// the new one is not ready. Each kind is read in its controller's terms: a
// StatefulSet is done when its currentRevision reached its
// updateRevision, a DaemonSet when every node it wants runs an updated,
// available pod.
func RolledOut(w canary.Workload) (bool, string) {
	want := w.Replicas
	s := w.Status
	newReady := int32(0)
	var old []string
	for _, p := range w.Pods {
		switch {
		case !p.Current:
			old = append(old, p.Name)
		case p.Ready && !p.Terminating:
			newReady++
		}
	}
	sort.Strings(old)
	kind := w.KindOf()
	updated, available := "replicas updated", "replicas available"
	if kind == canary.KindDaemonSet {
		updated, available = "nodes run an updated pod (updatedNumberScheduled)", "nodes run an available pod (numberAvailable)"
	}
	switch {
	case s.ObservedGeneration < w.Generation:
		return false, fmt.Sprintf("the %s controller has not seen generation %d yet", strings.ToLower(string(kind)), w.Generation)
	case s.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d of %d %s%s", s.UpdatedReplicas, want, updated, podTrouble(w))
	case newReady < want:
		return false, fmt.Sprintf("%d of %d new pods ready%s", newReady, want, podTrouble(w))
	case s.AvailableReplicas < want:
		return false, fmt.Sprintf("%d of %d %s", s.AvailableReplicas, want, available)
	case len(old) > 0:
		return false, fmt.Sprintf("old pods still present: %s", strings.Join(old, ", "))
	case s.Replicas > want:
		return false, fmt.Sprintf("%d old replicas still running", s.Replicas-want)
	case kind == canary.KindStatefulSet && !w.OnDelete && s.CurrentRevision != s.UpdateRevision:
		// Under OnDelete the controller never advances currentRevision.
		return false, fmt.Sprintf("currentRevision %s has not reached updateRevision %s", s.CurrentRevision, s.UpdateRevision)
	}
	return true, ""
}

// podTrouble names the new pods that are not ready, with the reason a
// container is waiting, e.g. "; pod cart-7f9c-x not ready (CrashLoopBackOff)".
func podTrouble(w canary.Workload) string {
	var out []string
	for _, p := range w.Pods {
		if !p.Current || p.Terminating || p.Ready {
			continue
		}
		s := "pod " + p.Name + " not ready"
		if p.Waiting != "" {
			s += " (" + p.Waiting + ")"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return ""
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("%d more", len(out)-3))
	}
	return "; " + strings.Join(out, ", ")
}
