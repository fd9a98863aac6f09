package analysis

import (
	"time"

	"github.com/meshwave/meshwave/canary"
)

// ambientTelemetry is the metric checks' verdict on a wave into ambient
// mode: its moved pods run no sidecar, so no series of theirs carries
// reporter="destination" from their own proxy, and the checks do not read
// ztunnel's or a waypoint's series yet. Whatever the sidecar series say
// (the moved workloads' old pods, say), they say nothing of the moved
// pods: inconclusive, never a pass.
func ambientTelemetry(interval time.Duration) canary.Verdict {
	return canary.Verdict{Result: canary.ResultInconclusive, Analysis: true, Checked: true, RetryAfter: interval,
		Reason: "the wave's pods run in ambient mode, without a sidecar: the metric checks do not read ztunnel's or a waypoint's series yet, and the sidecar series say nothing of these pods"}
}
