package sequential

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// A wave's moved workloads usually have no pod left on the source
// revision by the time they are judged, so their control is what was
// measured before their restart: how their errors split against the
// namespace's other workloads then, or their own error ratio then. The
// history is fixed before the first look; what it says is a confidence
// bound, and the test of the looks is held to that bound. The chance that
// the bound misses is part of the test's α.

// rateBounds are Clopper and Pearson's exact bounds on an error ratio from
// its counts: each misses the true ratio with chance at most a. The upper
// bound is 1 and the lower 0 where the counts cannot say more.
func rateBounds(c Counts, a float64) (lo, hi float64) {
	n, e := math.Round(c.Requests), math.Round(c.Errors)
	lo, hi = 0, 1
	if e > 0 {
		lo = distuv.Beta{Alpha: e, Beta: n - e + 1}.Quantile(a)
	}
	if e < n {
		hi = distuv.Beta{Alpha: e + 1, Beta: n - e}.Quantile(1 - a)
	}
	return lo, hi
}

// ratioUpper and ratioLower bound ρ, the ratio of the treatment's error
// ratio to the control's, from looks in which both arms served: each bound
// misses with chance at most a. Conditioned on each look's errors k, the
// treatment's share of them is binomial with θ = ρ·x_T/(ρ·x_T + x_C) (see
// ratioProcess), and their sum over the looks moves with ρ. Chernoff's
// bound on that sum's tails is inverted in ρ: the bounds are wider than
// exact ones, never narrower. The upper bound is +Inf and the lower 0
// where the looks cannot bound ρ, as when one arm served no error at all.
func ratioUpper(looks []Look, a float64) float64 {
	informative, s := splits(looks)
	if len(informative) == 0 {
		return math.Inf(1)
	}
	// ρ is ruled out from above when even its most favourable Chernoff
	// bound on P(S ≤ s) is at most a.
	return invert(func(logRho float64) bool { return chernoff(informative, s, logRho, false) <= math.Log(a) }, true)
}

func ratioLower(looks []Look, a float64) float64 {
	informative, s := splits(looks)
	if len(informative) == 0 {
		return 0
	}
	return invert(func(logRho float64) bool { return chernoff(informative, s, logRho, true) <= math.Log(a) }, false)
}

// splits are the looks whose errors can split, and the treatment's errors
// in them.
func splits(looks []Look) (informative []Look, s float64) {
	for _, l := range looks {
		if l.Treatment.Requests > 0 && l.Control.Requests > 0 && l.Treatment.Errors+l.Control.Errors > 0 {
			informative = append(informative, l)
			s += l.Treatment.Errors
		}
	}
	return informative, s
}

// boundLimit is how far in log ρ the bounds are sought: e^30 is far past
// any ratio of two error ratios that Prometheus can count.
const boundLimit = 30.0

// invert finds, by bisection in log ρ, the edge of the ρ that excluded
// rules out: above the edge (up) or below it. It gives +Inf or 0 when no
// ρ within boundLimit is ruled out.
func invert(excluded func(logRho float64) bool, up bool) float64 {
	inside, outside := -boundLimit, boundLimit
	if !up {
		inside, outside = boundLimit, -boundLimit
	}
	if !excluded(outside) {
		if up {
			return math.Inf(1)
		}
		return 0
	}
	in, out := inside, outside
	if excluded(in) {
		// Even the far side is excluded: the bound sits at the limit.
		return math.Exp(in)
	}
	for range 100 {
		mid := (in + out) / 2
		if excluded(mid) {
			out = mid
		} else {
			in = mid
		}
		if math.Abs(out-in) < 1e-6 {
			break
		}
	}
	return math.Exp(out)
}

// chernoff is the log of Chernoff's bound at ρ = e^logRho on P(S ≤ s)
// (upper false) or P(S ≥ s) (upper true), S the treatment's errors summed
// over the looks, each look's binomial in its errors.
func chernoff(looks []Look, s, logRho float64, upper bool) float64 {
	// Each look's log-odds of an error falling on the treatment at ρ:
	// θ = σ(z0). Worked in log-odds, θ never rounds to 1 when the control
	// served a sliver of the treatment's requests.
	z0 := make([]float64, len(looks))
	for i, l := range looks {
		z0[i] = logRho + math.Log(l.Treatment.Requests) - math.Log(l.Control.Requests)
	}
	sign := -1.0
	if upper {
		sign = 1
	}
	// g(λ) = -sign·λ·s + Σ k log(1 - θ + θ e^{sign·λ}) is convex in λ;
	// its least value over λ ≥ 0 bounds the log of the tail. Any λ gives a
	// bound, so stopping Newton's method early only widens it. With
	// z = z0 + sign·λ, each look's term is softplus(z) - softplus(z0), and
	// the tilted share q = σ(z).
	g := func(lambda float64) (v, d1, d2 float64) {
		v = -sign * lambda * s
		d1 = -sign * s
		for i, l := range looks {
			k := l.Treatment.Errors + l.Control.Errors
			z := z0[i] + sign*lambda
			q, notQ := sigmoid(z), sigmoid(-z)
			v += k * (softplus(z) - softplus(z0[i]))
			d1 += k * sign * q
			d2 += k * q * notQ
		}
		return v, d1, d2
	}
	const maxLambda = 700 // e^700 is near the largest float
	best := 0.0           // λ = 0: the bound 1
	lambda := 0.0
	for range 200 {
		v, d1, d2 := g(lambda)
		best = math.Min(best, v)
		if d1 >= 0 && lambda == 0 {
			break // the least value is at 0
		}
		if d2 <= 0 || math.IsNaN(v) || math.IsNaN(d1) {
			break
		}
		// Far from the least value the curvature is tiny and a full step
		// would overshoot past what exp can hold: a step is at most 2.
		step := math.Max(-2, math.Min(2, d1/d2))
		next := math.Min(maxLambda, math.Max(0, lambda-step))
		if math.Abs(next-lambda) < 1e-9 {
			break
		}
		lambda = next
	}
	return best
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// softplus is log(1 + e^z), without overflow.
func softplus(z float64) float64 {
	return math.Max(z, 0) + math.Log1p(math.Exp(-math.Abs(z)))
}
