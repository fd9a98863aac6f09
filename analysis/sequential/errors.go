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

// Validate reports a setting the test cannot run with.
func (t ErrorTest) Validate() error {
	var errs []error
	if !(t.Alpha > 0 && t.Alpha < 1) {
		errs = append(errs, fmt.Errorf("alpha %g is not between 0 and 1", t.Alpha))
	}
	if !finiteNonNegative(t.Tolerance) {
		errs = append(errs, fmt.Errorf("tolerance %g is not a finite number of zero or more", t.Tolerance))
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

// ErrorProcess is the evidence an ErrorTest has gathered. Its zero value
// is not usable: start one with ErrorTest.Start.
//
// The healthy hypothesis is a union, "within the tolerance of the control
// or under the floor", so the evidence against it is the smaller of the
// evidence against each part: a wave fails only when both are refuted.
// The unhealthy one is an intersection, so refuting either part passes;
// each part is then held to 2/α, and the two chances of a wrong pass add
// up to α.
type ErrorProcess struct {
	test                 ErrorTest
	ratioFail, ratioPass ratioProcess
	floorFail, floorPass floorProcess
	looks                int
	treatment, control   Counts
}

// Start begins the evidence with no look yet.
func (t ErrorTest) Start() (*ErrorProcess, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	rho0 := 1 + t.Tolerance
	return &ErrorProcess{
		test:      t,
		ratioFail: ratioProcess{rho0: rho0, up: true}, ratioPass: ratioProcess{rho0: rho0},
		floorFail: floorProcess{f: t.Floor, up: true}, floorPass: floorProcess{f: t.Floor},
	}, nil
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
	e.ratioFail.observe(l)
	e.ratioPass.observe(l)
	e.floorFail.observe(l.Treatment)
	e.floorPass.observe(l.Treatment)
	e.looks++
	e.treatment, e.control = e.treatment.add(l.Treatment), e.control.add(l.Control)
	return nil
}

// FailEvidence is the evidence against "healthy", as a natural log: the
// wave fails when it reaches log(1/α).
func (e *ErrorProcess) FailEvidence() float64 {
	return math.Min(e.ratioFail.logE, e.floorFail.logE)
}

// PassEvidence is the evidence against "unhealthy", as a natural log: the
// wave passes when it reaches log(2/α).
func (e *ErrorProcess) PassEvidence() float64 {
	return math.Max(e.ratioPass.logE, e.floorPass.logE)
}

// Decision is what the looks so far allow. Fail is read first: once both
// are proven, the evidence of a failure is not outweighed.
func (e *ErrorProcess) Decision() Decision {
	switch {
	case e.FailEvidence() >= math.Log(1/e.test.Alpha):
		return Fail
	case e.PassEvidence() >= math.Log(2/e.test.Alpha):
		return Pass
	}
	return Continue
}

// Looks is how many looks were observed.
func (e *ErrorProcess) Looks() int { return e.looks }

// Totals are the arms' counts over every look.
func (e *ErrorProcess) Totals() (treatment, control Counts) { return e.treatment, e.control }
