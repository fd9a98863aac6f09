package analysis

import (
	"context"
	"time"

	"github.com/meshwave/meshwave/canary"
)

// Gate is one named check of a wave.
type Gate interface {
	// Name is the gate's name in verdicts, events and metrics.
	Name() string
	// Evaluate judges the wave at now. A gate that cannot reach what it
	// asks returns Inconclusive, never an error: a provider's failure is a
	// result, not a failed reconcile.
	Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict
}

// Chain runs gates in order and stops at the first that does not pass, so
// a later gate never judges a wave an earlier one has not cleared.
type Chain []Gate

// Evaluate returns the verdicts up to and including the first that is not
// a Pass.
func (c Chain) Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) []canary.Verdict {
	var out []canary.Verdict
	for _, g := range c {
		v := g.Evaluate(ctx, wave, now)
		v.Gate = g.Name()
		if v.At.IsZero() {
			v.At = now
		}
		out = append(out, v)
		if v.Result != canary.ResultPass {
			break
		}
	}
	return out
}

// applier is a gate that runs only on some waves.
type applier interface {
	Applies(wave canary.WaveUnderTest) bool
}

// Applicable is the chain without the gates that do not run on wave: a
// check of L7 telemetry on a wave into ambient without a waypoint, where
// no proxy sees a request. When that would leave none of the chain's
// metric checks, the chain stays whole: a wave is never passed
// unmeasured, and those checks say, inconclusive, that they cannot
// measure it.
func Applicable(c Chain, wave canary.WaveUnderTest) Chain {
	out := make(Chain, 0, len(c))
	checks, left := 0, 0
	for _, g := range c {
		if a, ok := g.(applier); ok {
			checks++
			if !a.Applies(wave) {
				continue
			}
			left++
		}
		out = append(out, g)
	}
	if checks > 0 && left == 0 {
		return c
	}
	return out
}
