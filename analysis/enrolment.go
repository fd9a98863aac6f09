package analysis

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshwave/meshwave/canary"
)

// enrolment is the injection gate of a wave that moves into ambient mode:
// every new pod runs no sidecar, carries the label that enrols it, and
// carries the annotation the istio-cni node agent writes once its traffic
// is redirected to ztunnel (ambient.istio.io/redirection: enabled). A pod
// still injected, or not labelled, fails at once with its name. A Running
// pod not redirected yet waits for its node agent until the member's
// readiness deadline, then fails with its name: the node agent annotates a
// pod as its sandbox is set up, so a pod that runs without it is not
// redirected.
func enrolment(wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	var failed []canary.WorkloadState
	var waiting []string
	var retry time.Duration
	checked := 0
	for _, m := range wave.Workloads {
		var wrong []string
		for _, p := range m.Pods {
			if !p.Current || p.Terminating {
				continue
			}
			checked++
			switch {
			case p.Injected():
				wrong = append(wrong, fmt.Sprintf("pod %s still runs a sidecar of %s", p.Name, p.Revision))
			case p.Labels[canary.LabelDataplaneMode] != canary.DataplaneAmbient:
				wrong = append(wrong, fmt.Sprintf("pod %s is not labelled %s=%s", p.Name, canary.LabelDataplaneMode, canary.DataplaneAmbient))
			case p.Annotations[canary.AnnotationRedirection] == canary.RedirectionEnabled:
			case !p.Running:
				// Not set up yet: the rollout gate waits for it.
			case !now.Before(m.Deadline):
				wrong = append(wrong, fmt.Sprintf("pod %s runs but was never redirected to ztunnel: no %s: %s from the istio-cni node agent of node %s", p.Name, canary.AnnotationRedirection, canary.RedirectionEnabled, nodeName(p.Node)))
			default:
				waiting = append(waiting, fmt.Sprintf("pod %s is not redirected to ztunnel yet", p.Name))
				if d := m.Deadline.Sub(now); retry == 0 || d < retry {
					retry = d
				}
			}
		}
		if len(wrong) > 0 {
			failed = append(failed, canary.WorkloadState{Name: m.Name, State: canary.StateFailed, Reason: strings.Join(wrong, "; ")})
		}
	}
	if len(failed) > 0 {
		return failedPods(failed)
	}
	if len(waiting) > 0 {
		return canary.Verdict{Result: canary.ResultPending, Reason: strings.Join(waiting, "; "), RetryAfter: min(retry, 5*time.Second)}
	}
	return canary.Verdict{Result: canary.ResultPass, Reason: fmt.Sprintf("%d new pods in ambient: no sidecar, redirected to ztunnel", checked)}
}

func nodeName(n string) string {
	if n == "" {
		return "(unscheduled)"
	}
	return n
}
