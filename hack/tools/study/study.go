package main

import (
	"slices"

	"gonum.org/v1/gonum/stat"

	"github.com/meshwave/meshwave/analysis/sequential"
)

// trafficLevels are the requests a second a pod the study runs at.
var trafficLevels = []float64{0.1, 1, 10, 100}

// maxLooks is the sequential mode's maximum duration: 15 minutes.
const maxLooks = 60

// sequentialTest is the sequential mode at the settings the study
// proposes as its defaults.
var sequentialTest = sequential.ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}

// tally is how one mode ended the runs of one scenario at one level.
type tally struct {
	runs                int
	failed, passed      int
	failTimes, passTime []float64 // seconds
}

func (t *tally) add(o outcome) {
	t.runs++
	switch o.decision {
	case sequential.Fail:
		t.failed++
		t.failTimes = append(t.failTimes, float64(o.at))
	case sequential.Pass:
		t.passed++
		t.passTime = append(t.passTime, float64(o.at))
	}
}

func (t tally) undecided() int { return t.runs - t.failed - t.passed }

// quantile of times, or -1 when there are none.
func quantile(p float64, times []float64) float64 {
	if len(times) == 0 {
		return -1
	}
	s := slices.Sorted(slices.Values(times))
	return stat.Quantile(p, stat.Empirical, s, nil)
}

// cell is one scenario at one traffic level.
type cell struct {
	rps                            float64
	sequential, history, threshold tally
}

// result is the whole study.
type result struct {
	runs  int
	cells map[string][]cell // by scenario name, in trafficLevels' order
	// trade is the sequential mode at other tolerances: by tolerance, then
	// scenario name, in trafficLevels' order.
	trade map[float64]map[string][]tally
}

// tradeTolerances are the tolerances the study compares the default's
// with, on tradeScenarios.
var (
	tradeTolerances = []float64{0.2, 0.5, 1}
	tradeScenarios  = []int{0, 2, 3} // A/A at 1%, +50%, +100%
)

// study runs every scenario at every level, runs times each, both modes on
// the same streams. Run r of a scenario at a level draws from seed r.
func study(runs int) (result, error) {
	threshold, err := newThresholdMode()
	if err != nil {
		return result{}, err
	}
	res := result{runs: runs, cells: map[string][]cell{}}
	for _, sc := range scenarios {
		for _, rps := range trafficLevels {
			c := cell{rps: rps}
			for r := 0; r < runs; r++ {
				st := sc.draw(uint64(r), rps, maxLooks)
				seq, err := sequentialMode(sequentialTest, st)
				if err != nil {
					return result{}, err
				}
				hist, err := historyMode(sequentialTest, st)
				if err != nil {
					return result{}, err
				}
				thr, err := threshold.run(st)
				if err != nil {
					return result{}, err
				}
				c.sequential.add(seq)
				c.history.add(hist)
				c.threshold.add(thr)
			}
			res.cells[sc.name] = append(res.cells[sc.name], c)
		}
	}
	res.trade = map[float64]map[string][]tally{}
	for _, tol := range tradeTolerances {
		test := sequentialTest
		test.Tolerance = tol
		res.trade[tol] = map[string][]tally{}
		for _, i := range tradeScenarios {
			sc := scenarios[i]
			for _, rps := range trafficLevels {
				var t tally
				for r := 0; r < runs; r++ {
					o, err := sequentialMode(test, sc.draw(uint64(r), rps, maxLooks))
					if err != nil {
						return result{}, err
					}
					t.add(o)
				}
				res.trade[tol][sc.name] = append(res.trade[tol][sc.name], t)
			}
		}
	}
	return res, nil
}
