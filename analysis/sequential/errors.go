package sequential

import (
	"errors"
	"fmt"
	"math"
)

// ErrorTest tests a moved workload's error ratio against its control's:
// it is healthy while its error ratio is at most (1 + Tolerance) times the
// control's, or at most Floor.
type ErrorTest struct {
	// Alpha is the chance, at most, that a healthy workload is ever
	// failed, however long and however often it is looked at. It is also
	// the chance, at most, that an unhealthy one is ever passed.
	Alpha float64
	// Tolerance is how much worse than the control's the treatment's error
	// ratio may be: 0.2 allows 1.2 times.
	Tolerance float64
	// Floor is the error ratio under which the treatment is healthy
	// whatever the control's: 0.001 is 0.1%.
	Floor float64
}

// MinAlpha is the smallest alpha a test runs at, a workload's share of a
// wave's included: its bounds and thresholds stay ordinary floats (below
// 1e-308, 2/α would overflow).
const MinAlpha = 1e-12

// MaxTolerance is the largest tolerance: a thousand times the control's
// ratio is already no test, and far larger ones overflow the bets.
const MaxTolerance = 1000

// Validate reports a setting the test cannot run with.
func (t ErrorTest) Validate() error {
	var errs []error
	if !(t.Alpha >= MinAlpha && t.Alpha < 1) {
		errs = append(errs, fmt.Errorf("alpha %g is not from %g up to 1, 1 not included", t.Alpha, MinAlpha))
	}
	if !(t.Tolerance >= 0 && t.Tolerance <= MaxTolerance) {
		errs = append(errs, fmt.Errorf("tolerance %g is not a number from 0 to %d", t.Tolerance, MaxTolerance))
	}
	if !(t.Floor >= 0 && t.Floor < 1) {
		errs = append(errs, fmt.Errorf("floor %g is not an error ratio from 0 up to, not including, 1", t.Floor))
	}
	return errors.Join(errs...)
}

// Decision is what the evidence so far allows.
type Decision int

const (
	// Continue: neither verdict is proven yet.
	Continue Decision = iota
	// Fail: the treatment is worse than the test allows.
	Fail
	// Pass: the treatment is within what the test allows.
	Pass
)

func (d Decision) String() string {
	switch d {
	case Fail:
		return "fail"
	case Pass:
		return "pass"
	}
	return "continue"
}

// Control is what a moved workload's errors are held against.
type Control int

const (
	// Concurrent: the workload's own pods not yet replaced, over the same
	// looks. Each look's errors split between the arms as their error
	// ratios and requests say, whatever made them more or fewer for both.
	Concurrent Control = iota
	// Others: the namespace's workloads not yet moved. How the errors split
	// between them and the workload before its restart bounds that split's
	// ratio; the looks are held to the bound, which takes out what the
	// workloads differ by and what changed for both since (difference in
	// differences).
	Others
	// Past: the workload's own error ratio before its restart, with nothing
	// measured at the same time: a change that reaches every workload
	// (a caller failing) reads as the revision's, as a baseline does.
	Past
)

func (c Control) String() string {
	switch c {
	case Others:
		return "the namespace's workloads not yet moved, against their split before the restart"
	case Past:
		return "its own error ratio before the restart"
	}
	return "its pods not yet replaced"
}

// process is one running e-process, as a natural log.
type process interface {
	observe(Look)
	evidence() float64
}

func (p *ratioProcess) evidence() float64 { return p.logE }
func (p *floorProcess) evidence() float64 { return p.logE }

// never is a hypothesis the counts cannot refute, such as "at most a
// ratio the history could not bound".
type never struct{}

func (never) observe(Look)      {}
func (never) evidence() float64 { return 0 }

// ErrorProcess is the evidence an ErrorTest has gathered, started by
// ErrorTest.Start or ErrorTest.StartAgainstHistory.
//
// The healthy hypothesis is a union, "within the tolerance of the control
// or under the floor", so the evidence against it is the smaller of the
// evidence against each part: a wave fails only when both are refuted.
// The unhealthy one is an intersection, so refuting either part passes.
// α is shared out so that the chances of a wrong verdict add up to at
// most α each way; see the thresholds in Start and StartAgainstHistory.
type ErrorProcess struct {
	test                 ErrorTest
	against              Control
	ratioFail, ratioPass process
	floorFail, floorPass process
	// The log thresholds: the wave fails when the smaller fail evidence
	// reaches failAt, passes when either pass evidence reaches its own.
	failAt, passRatioAt, passFloorAt float64
	looks                            int
	treatment, control               Counts
	// ownFail holds the looks in which the workload's own pods not yet
	// replaced served beside its moved ones (Look.Own), against
	// (1 + Tolerance) times their ratio; nil for a concurrent test, whose
	// control is already that. On the fail side a look is paid to it or
	// to ratioFail, never to both: whether the old pods served is in the
	// look's requests, which every factor is conditioned on, so each
	// factor is still an e-value against "healthy next to what the look
	// was held to", and their product an e-process. The pass side reads
	// every look against the history: old pods that fail beside the moved
	// ones (a draining pod's 503s) would otherwise vouch for a broken
	// revision.
	ownFail           *ratioProcess
	ownLooks          int
	ownTreatment, own Counts
}

// Start begins the evidence against a Concurrent control, with no look
// yet. A wave fails at 1/α. It passes when the ratio's evidence reaches
// 2/α or the floor's does: α/2 each.
func (t ErrorTest) Start() (*ErrorProcess, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	rho0 := 1 + t.Tolerance
	return &ErrorProcess{
		test: t, against: Concurrent,
		ratioFail: &ratioProcess{rho0: rho0, up: true}, ratioPass: &ratioProcess{rho0: rho0},
		floorFail: &floorProcess{f: t.Floor, up: true}, floorPass: &floorProcess{f: t.Floor},
		failAt: math.Log(1 / t.Alpha), passRatioAt: math.Log(2 / t.Alpha), passFloorAt: math.Log(2 / t.Alpha),
	}, nil
}

// StartAgainstHistory begins the evidence against what the arms served
// before the restart: history holds the looks of that time, the treatment
// being the workload's pods then (on the source revision) and the control
// the namespace's workloads not yet moved, if there are any.
//
// A later look in which the workload's own pods not yet replaced served
// beside its moved ones (Look.Own) is held to those pods instead on the
// fail side, as Start's test would hold it: they run the same code on the
// source revision at the same time, the best control there is. A pass
// stands on the history alone.
//
// The control is Others when the history bounds the split's ratio from
// above, else Past: the choice reads only the history, before the first
// look. For a fail, each way of choosing spends α/4 on its history bound
// and the looks are held to 2/α: a healthy wave fails with chance at most
// α/4 + α/4 + α/2. For a pass, the bounds take α/8 each, the ratio's
// evidence must reach 4/α, and the floor's 2/α.
func (t ErrorTest) StartAgainstHistory(history []Look) (*ErrorProcess, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	var past Counts
	for _, l := range history {
		if err := l.Treatment.valid(); err != nil {
			return nil, fmt.Errorf("history: treatment: %w", err)
		}
		if err := l.Control.valid(); err != nil {
			return nil, fmt.Errorf("history: control: %w", err)
		}
		past = past.Add(l.Treatment)
	}
	rho0 := 1 + t.Tolerance
	e := &ErrorProcess{
		test:      t,
		floorFail: &floorProcess{f: t.Floor, up: true}, floorPass: &floorProcess{f: t.Floor},
		failAt: math.Log(2 / t.Alpha), passRatioAt: math.Log(4 / t.Alpha), passFloorAt: math.Log(2 / t.Alpha),
		ownFail: &ratioProcess{rho0: rho0, up: true},
	}
	if hi := ratioUpper(history, t.Alpha/4); !math.IsInf(hi, 1) {
		lo := ratioLower(history, t.Alpha/8)
		e.against = Others
		e.ratioFail = &ratioProcess{rho0: rho0 * hi, up: true}
		e.ratioPass = never{}
		if lo > 0 {
			e.ratioPass = &ratioProcess{rho0: rho0 * lo}
		}
		return e, nil
	}
	e.against = Past
	_, hi := rateBounds(past, t.Alpha/4)
	lo, _ := rateBounds(past, t.Alpha/8)
	e.ratioFail, e.ratioPass = never{}, never{}
	if f := rho0 * hi; f < 1 {
		e.ratioFail = &floorProcess{f: f, up: true}
	}
	if f := rho0 * lo; f > 0 && f < 1 {
		e.ratioPass = &floorProcess{f: f}
	}
	return e, nil
}

// Split is the test each of n workloads of one wave runs so that the
// wave's own chances of a wrong verdict stay at most Alpha: Alpha/n each
// (Bonferroni), since the wave fails when any one of them fails.
func (t ErrorTest) Split(n int) ErrorTest {
	if n > 1 {
		t.Alpha /= float64(n)
	}
	return t
}

// Observe adds one look. Counts no counter could give (negative, not
// finite, more errors than requests) are refused and change nothing.
func (e *ErrorProcess) Observe(l Look) error {
	if err := l.Treatment.valid(); err != nil {
		return fmt.Errorf("treatment: %w", err)
	}
	if err := l.Control.valid(); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if err := l.Own.valid(); err != nil {
		return fmt.Errorf("own pods not yet replaced: %w", err)
	}
	e.looks++
	e.treatment = e.treatment.Add(l.Treatment)
	e.floorFail.observe(l)
	e.floorPass.observe(l)
	if e.against == Past {
		// Only the workload's own history counts: pods measured at the same
		// time are not its control.
		l.Control = Counts{}
	}
	e.ratioPass.observe(l)
	e.control = e.control.Add(l.Control)
	if e.ownFail != nil && l.Own.Requests > 0 && l.Treatment.Requests > 0 {
		e.ownFail.observe(Look{Treatment: l.Treatment, Control: l.Own})
		e.ownLooks++
		e.ownTreatment, e.own = e.ownTreatment.Add(l.Treatment), e.own.Add(l.Own)
		return nil
	}
	e.ratioFail.observe(l)
	return nil
}

// OwnLooks are the looks held to the workload's own pods not yet replaced,
// with what the moved pods and those pods served in them.
func (e *ErrorProcess) OwnLooks() (looks int, treatment, own Counts) {
	return e.ownLooks, e.ownTreatment, e.own
}

// ratioEvidence is a ratio process's evidence with that of the looks held
// to the workload's own old pods, which test the same side.
func (e *ErrorProcess) ratioEvidence(p process, own *ratioProcess) float64 {
	if own == nil {
		return p.evidence()
	}
	return p.evidence() + own.evidence()
}

// Control is what the workload was held against.
func (e *ErrorProcess) Control() Control { return e.against }

// FailEvidence is the evidence against "healthy", as a natural log, and
// the log threshold at which the wave fails.
func (e *ErrorProcess) FailEvidence() (evidence, threshold float64) {
	return math.Min(e.ratioEvidence(e.ratioFail, e.ownFail), e.floorFail.evidence()), e.failAt
}

// PassEvidence is the larger of the evidence against "unhealthy" of the
// ratio and of the floor, each as a natural log less its threshold: the
// wave passes when it reaches 0.
func (e *ErrorProcess) PassEvidence() float64 {
	return math.Max(e.ratioPass.evidence()-e.passRatioAt, e.floorPass.evidence()-e.passFloorAt)
}

// HealthEvidence is the larger of the evidence against "unhealthy" of the
// ratio and of the floor, as a natural log, with that part's threshold.
func (e *ErrorProcess) HealthEvidence() (evidence, threshold float64) {
	r := e.ratioPass.evidence()
	if r-e.passRatioAt >= e.floorPass.evidence()-e.passFloorAt {
		return r, e.passRatioAt
	}
	return e.floorPass.evidence(), e.passFloorAt
}

// Decision is what the looks so far allow. Fail is read first: a wave
// whose evidence proves both keeps the failure.
func (e *ErrorProcess) Decision() Decision {
	if ev, at := e.FailEvidence(); ev >= at {
		return Fail
	}
	if e.PassEvidence() >= 0 {
		return Pass
	}
	return Continue
}

// Looks is how many looks were observed.
func (e *ErrorProcess) Looks() int { return e.looks }

// Totals are the arms' counts over every look.
func (e *ErrorProcess) Totals() (treatment, control Counts) { return e.treatment, e.control }
