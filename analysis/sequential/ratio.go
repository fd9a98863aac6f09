package sequential

import "math"

// maxLogBet bounds how far from the hypothesis a plug-in may bet, in
// natural log units (e^6 ≈ 400 times the ratio tested). A look then
// multiplies the evidence by at most about 400 per error, so a handful of
// errors cannot decide alone, and the bet stays finite when one arm has
// no error at all.
const maxLogBet = 6

// ratioProcess is the evidence against one side of "the treatment's error
// ratio is rho0 times the control's". up bets that it is more (the
// evidence of a failed wave); !up that it is less (of a healthy one).
//
// The test conditions each look on the errors both arms had in it. Were
// the errors of the two arms Poisson with rates proportional to their
// requests, each of a look's k errors fell on the treatment with
// probability θ = ρ·x_T / (ρ·x_T + x_C), where x are the arms' requests in
// the look and ρ the ratio of their error ratios. Whatever made the errors
// of that look more or fewer for both arms (a caller's failures, a traffic
// surge) is in k and cancels: only how they split between the arms counts.
// For errors drawn as binomials the split is less spread than that
// binomial, so a test valid for Poisson counts stays valid (Hoeffding,
// 1963).
//
// Each look pays the likelihood ratio of its split at the plug-in ρ̃ over
// ρ0. For any true ratio on the tested side of ρ0, in any look, that
// factor's expectation is at most one, so the product is a
// supermartingale for the whole composite hypothesis, even when the true
// ratio changes from look to look.
type ratioProcess struct {
	rho0 float64
	up   bool
	logE float64
	// The informative looks so far: both arms served requests.
	treatment, control Counts
}

// observe pays one look.
func (p *ratioProcess) observe(l Look) {
	xt, xc := l.Treatment.Requests, l.Control.Requests
	if xt <= 0 || xc <= 0 {
		// With one arm idle, every error of the look is on the other: the
		// split says nothing about the ratio.
		return
	}
	rho := p.bet()
	if rho != p.rho0 {
		p.logE += l.Treatment.Errors*math.Log(rho/p.rho0) -
			(l.Treatment.Errors+l.Control.Errors)*math.Log((rho*xt+xc)/(p.rho0*xt+xc))
	}
	p.treatment, p.control = p.treatment.Add(l.Treatment), p.control.Add(l.Control)
}

// bet is the plug-in ρ̃ from the earlier looks. It estimates the share of
// errors on the treatment with two pseudo-errors split as ρ0 would split
// them, so that it starts at ρ0 (no bet) and moves only as errors come,
// converts that share into a ratio at the looks' pooled request share,
// and keeps it on the process's side of ρ0, within maxLogBet.
func (p *ratioProcess) bet() float64 {
	const pseudo = 2.0
	xt, xc := p.treatment.Requests, p.control.Requests
	if xt <= 0 || xc <= 0 {
		return p.rho0
	}
	omega := xt / (xt + xc)
	theta0 := p.rho0 * omega / (p.rho0*omega + 1 - omega)
	k := p.treatment.Errors + p.control.Errors
	theta := (p.treatment.Errors + pseudo*theta0) / (k + pseudo)
	rho := theta * (1 - omega) / ((1 - theta) * omega)
	lo, hi := p.rho0, p.rho0*math.Exp(maxLogBet)
	if !p.up {
		lo, hi = p.rho0*math.Exp(-maxLogBet), p.rho0
	}
	switch {
	case math.IsNaN(rho):
		return p.rho0
	case rho < lo:
		return lo
	case rho > hi:
		return hi
	}
	return rho
}
