package main

import (
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/meshwave/meshwave/analysis/sequential"
)

// lookSeconds is the time between two looks: Prometheus's scrape interval
// in Istio's usual set-up, and so the finest the counts can be cut.
const lookSeconds = 15

// Pods on each arm: two moved, four not yet, as in a wave midway through
// a workload of six, or a namespace whose other workloads have four.
const treatmentPods, controlPods = 2, 4

// historyLooks is the history before the restart: the 10 minutes the
// sequential check reads by default. Today's mode takes its baseline from
// the treatment's last minute of it (baselineLooks).
const (
	historyLooks  = 40
	baselineLooks = 4
)

// scenario is one kind of wave: the error ratio each arm serves, look by
// look, and what the traffic does. Looks count from the wave being up;
// negative looks are the treatment's history.
type scenario struct {
	name string
	// healthy says which verdict is right: a pass (true) or a fail.
	healthy bool
	// treatment and control give the error ratio at a look.
	treatment, control func(look int) float64
	// traffic multiplies both arms' requests at a look; nil is 1.
	traffic func(look int) float64
}

// stream is one run's counts, drawn once and read by both modes.
type stream struct {
	history []sequential.Look // both arms, before the restart
	looks   []sequential.Look
}

// draw makes a run's stream at rps requests a second a pod: requests are
// a Poisson stream, each an error with its look's probability.
func (s scenario) draw(seed uint64, rps float64, looks int) stream {
	src := rand.NewPCG(seed, 0x73747564)
	counts := func(pods int, look int, ratio func(int) float64) sequential.Counts {
		lambda := rps * float64(pods) * lookSeconds
		if s.traffic != nil {
			lambda *= s.traffic(look)
		}
		n := distuv.Poisson{Lambda: lambda, Src: src}.Rand()
		p := ratio(look)
		if n == 0 || p <= 0 {
			return sequential.Counts{Requests: n}
		}
		return sequential.Counts{Requests: n, Errors: distuv.Binomial{N: n, P: p, Src: src}.Rand()}
	}
	var st stream
	// Before the restart the treatment's pods ran the source revision:
	// they served the control's error ratio.
	for l := -historyLooks; l < 0; l++ {
		st.history = append(st.history, sequential.Look{Treatment: counts(treatmentPods, l, s.control), Control: counts(controlPods, l, s.control)})
	}
	for l := 0; l < looks; l++ {
		st.looks = append(st.looks, sequential.Look{
			Treatment: counts(treatmentPods, l, s.treatment),
			Control:   counts(controlPods, l, s.control),
		})
	}
	return st
}

func constant(v float64) func(int) float64 { return func(int) float64 { return v } }

// from gives before until look at, then after.
func from(at int, before, after float64) func(int) float64 {
	return func(l int) float64 {
		if l >= at {
			return after
		}
		return before
	}
}

// baseRatio is the error ratio of the workloads before the wave: 1%.
const baseRatio = 0.01

// changeAt is when the traffic changes in the shift scenarios: 2 minutes
// into the wave, inside the window of today's first run.
const changeAt = 2

var scenarios = []scenario{
	{name: "A/A: both arms 1% errors", healthy: true, treatment: constant(baseRatio), control: constant(baseRatio)},
	{name: "A/A: no errors at all", healthy: true, treatment: constant(0), control: constant(0)},
	{name: "+50%: 1.5% against 1%", treatment: constant(1.5 * baseRatio), control: constant(baseRatio)},
	{name: "+100%: 2% against 1%", treatment: constant(2 * baseRatio), control: constant(baseRatio)},
	{name: "+30 points: 31% against 1%", treatment: constant(baseRatio + 0.3), control: constant(baseRatio)},
	{name: "shift: both arms' traffic doubles at 30 s", healthy: true, treatment: constant(baseRatio), control: constant(baseRatio),
		traffic: from(changeAt, 1, 2)},
	{name: "shift: the callers' errors rise to 4% for both arms at 30 s", healthy: true,
		treatment: from(changeAt, baseRatio, 4*baseRatio), control: from(changeAt, baseRatio, 4*baseRatio)},
}
