package sequential

import "math"

// floorProcess is the evidence against one side of "the treatment's error
// ratio is f": up bets that it is more (against "at most f", the evidence
// of a failed wave), !up that it is less (against "more than f", of a
// healthy one).
//
// The floor lets a wave fail only on errors that matter in absolute terms:
// a treatment with 3 errors in 10,000 requests against a control with none
// has an unbounded ratio, and a floor of 0.1% still passes it.
//
// Each look pays the binomial likelihood ratio of the treatment's errors at
// the plug-in p̃ over f. For any true ratio on the tested side of f, look
// by look, its expectation is at most one.
type floorProcess struct {
	f    float64
	up   bool
	logE float64
	// The treatment's counts so far.
	seen Counts
}

func (p *floorProcess) observe(l Look) {
	c := l.Treatment
	defer func() { p.seen = p.seen.Add(c) }()
	if p.f == 0 {
		// "At most 0" is refuted by one error; "more than 0" by nothing.
		if p.up && c.Errors > 0 {
			p.logE = math.Inf(1)
		}
		return
	}
	q := p.bet()
	if q == p.f {
		return
	}
	if c.Errors > 0 {
		p.logE += c.Errors * math.Log(q/p.f)
	}
	if ok := c.Requests - c.Errors; ok > 0 {
		p.logE += ok * (math.Log1p(-q) - math.Log1p(-p.f))
	}
}

// bet is the plug-in p̃ from the earlier looks: the treatment's error ratio
// with one pseudo-error in 1/f pseudo-requests, so that it starts at f (no
// bet), kept on the process's side of f and within maxLogBet of it.
func (p *floorProcess) bet() float64 {
	pseudo := 1 / p.f
	q := (p.seen.Errors + 1) / (p.seen.Requests + pseudo)
	lo, hi := p.f, math.Min(p.f*math.Exp(maxLogBet), (1+p.f)/2)
	if !p.up {
		lo, hi = p.f*math.Exp(-maxLogBet), p.f
	}
	return math.Min(math.Max(q, lo), hi)
}
