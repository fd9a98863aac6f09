package analysis

import (
	"time"

	"github.com/meshwave/meshwave/canary"
)

// formOf is the form of the check for a wave into ambient mode: its
// waypoint form behind a waypoint, its ztunnel form without; nil when
// the check has none.
func (g *MetricGate) formOf(wave canary.WaveUnderTest) *parsedForm {
	if wave.Waypoint != "" {
		return g.waypoint
	}
	return g.ztunnel
}

// Applies reports whether the check runs on the wave at all: a built-in
// check of L7 telemetry with no form for a wave into ambient does not (the
// latency without a waypoint, where no proxy sees a request; the outbound
// check, whose series come from the callers' own sidecars). The wave is
// then judged by the other checks (Applicable keeps it when none is
// left). A configured check stays, inconclusive.
func (g *MetricGate) Applies(wave canary.WaveUnderTest) bool {
	return !(wave.Ambient && g.Check.L7 && g.formOf(wave) == nil)
}

func modeOf(wave canary.WaveUnderTest) string {
	if wave.Waypoint != "" {
		return "behind waypoint " + wave.Waypoint
	}
	return "without a waypoint"
}

// ambientTelemetry is the verdict of a check that has no form for a wave
// into ambient mode (a configured check with only a sidecar query): its
// moved pods run no sidecar, so no series of theirs carries
// reporter="destination" from their own proxy. Whatever the sidecar series
// say (the moved workloads' old pods, say), they say nothing of the moved
// pods: inconclusive, never a pass.
func ambientTelemetry(interval time.Duration, mode string) canary.Verdict {
	return canary.Verdict{Result: canary.ResultInconclusive, Analysis: true, Checked: true, RetryAfter: interval,
		Reason: "the wave's pods run in ambient mode " + mode + ", without a sidecar, and this check has no query for them: the sidecar series say nothing of these pods"}
}

// Applies reports whether the sequential check runs on the wave: its
// latency form does not on a wave into ambient without a waypoint.
func (g *SequentialGate) Applies(wave canary.WaveUnderTest) bool {
	_, latency := g.Measure.(SequentialLatency)
	return !(wave.Ambient && wave.Waypoint == "" && latency)
}
