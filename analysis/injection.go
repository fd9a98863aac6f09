package analysis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meshwave/meshwave/canary"
)

// GateInjection is the injection gate's name.
const GateInjection = "injection"

// InjectionGate passes when every new pod of the wave was injected by the
// expected revision, as its sidecar.istio.io/status says: the target, or
// the source during a rollback. A pod injected by another revision, or not
// injected at all, fails the gate and is named.
type InjectionGate struct{}

// Name implements Gate.
func (InjectionGate) Name() string { return GateInjection }

// failedPods is the failing verdict of the workloads whose pods were
// named, their reasons joined.
func failedPods(failed []canary.WorkloadState) canary.Verdict {
	reasons := make([]string, 0, len(failed))
	for _, f := range failed {
		reasons = append(reasons, f.Reason)
	}
	return canary.Verdict{Result: canary.ResultFail, Reason: strings.Join(reasons, "; "), Failed: failed}
}

// Evaluate implements Gate.
func (InjectionGate) Evaluate(_ context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	if wave.Ambient {
		return enrolment(wave, now)
	}
	var failed []canary.WorkloadState
	checked := 0
	for _, m := range wave.Workloads {
		var wrong []string
		for _, p := range m.Pods {
			if !p.Current || p.Terminating {
				continue
			}
			checked++
			switch {
			case p.Revision == "":
				wrong = append(wrong, fmt.Sprintf("pod %s was not injected", p.Name))
			case p.Revision != wave.Expect:
				wrong = append(wrong, fmt.Sprintf("pod %s was injected by %s, not %s", p.Name, p.Revision, wave.Expect))
			}
		}
		if len(wrong) > 0 {
			failed = append(failed, canary.WorkloadState{Name: m.Name, State: canary.StateFailed, Reason: strings.Join(wrong, "; ")})
		}
	}
	if len(failed) > 0 {
		return failedPods(failed)
	}
	return canary.Verdict{Result: canary.ResultPass, Reason: fmt.Sprintf("%d new pods injected by %s", checked, wave.Expect)}
}
