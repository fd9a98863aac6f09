package sequential

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/stat/distuv"
)

// Clopper and Pearson's interval for 10 errors in 100 requests at 95% is
// 4.90% to 17.62%; for none in 100 the upper bound is 1 - 0.025^(1/100).
func TestAnErrorRatiosBoundsAreClopperAndPearsons(t *testing.T) {
	lo, hi := rateBounds(Counts{100, 10}, 0.025)
	assert.InDelta(t, 0.0490, lo, 1e-4)
	assert.InDelta(t, 0.1762, hi, 1e-4)
	lo, hi = rateBounds(Counts{100, 0}, 0.025)
	assert.Equal(t, 0.0, lo)
	assert.InDelta(t, 1-math.Pow(0.025, 0.01), hi, 1e-9)
	lo, hi = rateBounds(Counts{}, 0.025)
	assert.Equal(t, [2]float64{0, 1}, [2]float64{lo, hi}, "no request bounds nothing")
}

// Each bound of the split's ratio misses the true ratio with chance at
// most its a, whatever the ratio and the looks' request shares.
func TestTheSplitsBoundsMissTheRatioAtMostAsOftenAsAllowed(t *testing.T) {
	const runs, a = 1000, 0.05
	for _, rho := range []float64{0.25, 1, 4} {
		src := rand.NewPCG(uint64(rho*100), 1)
		missLo, missHi := 0, 0
		for range runs {
			var looks []Look
			for i := range 40 {
				xt, xc := 30.0+float64(i%3)*10, 60.0
				pc := 0.02
				looks = append(looks, Look{
					Treatment: Counts{xt, distuv.Binomial{N: xt, P: rho * pc, Src: src}.Rand()},
					Control:   Counts{xc, distuv.Binomial{N: xc, P: pc, Src: src}.Rand()},
				})
			}
			lo, hi := ratioLower(looks, a), ratioUpper(looks, a)
			require.LessOrEqual(t, lo, hi)
			if lo > rho {
				missLo++
			}
			if hi < rho {
				missHi++
			}
		}
		t.Logf("ρ %g: lower bound above it %d, upper below it %d of %d", rho, missLo, missHi, runs)
		assert.LessOrEqual(t, float64(missLo), a*runs, "ρ %g", rho)
		assert.LessOrEqual(t, float64(missHi), a*runs, "ρ %g", rho)
	}
}

func TestASplitWithoutErrorsOnOneArmBoundsTheRatioOnOneSideOnly(t *testing.T) {
	looks := []Look{{Treatment: Counts{1000, 10}, Control: Counts{1000, 0}}}
	lo, hi := ratioLower(looks, 0.05), ratioUpper(looks, 0.05)
	assert.Greater(t, lo, 1.0, "ten errors against none: the treatment's ratio is higher")
	assert.True(t, math.IsInf(hi, 1), "no error on the control: no upper bound")
	looks = []Look{{Treatment: Counts{1000, 0}, Control: Counts{1000, 10}}}
	lo, hi = ratioLower(looks, 0.05), ratioUpper(looks, 0.05)
	assert.Equal(t, 0.0, lo)
	assert.Less(t, hi, 1.0)
	none := []Look{{Treatment: Counts{1000, 0}, Control: Counts{1000, 0}}}
	lo, hi = ratioLower(none, 0.05), ratioUpper(none, 0.05)
	assert.Equal(t, [2]float64{0, math.Inf(1)}, [2]float64{lo, hi})
}

func TestTheHistoryChoosesTheOtherWorkloadsWhenTheirSplitBoundsTheRatioElseThePast(t *testing.T) {
	test := ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}
	e, err := test.StartAgainstHistory([]Look{{Treatment: Counts{1000, 20}, Control: Counts{2000, 10}}})
	require.NoError(t, err)
	assert.Equal(t, Others, e.Control())
	_, at := e.FailEvidence()
	assert.Equal(t, math.Log(40), at, "2/α: the history's bound took α/4")

	e, err = test.StartAgainstHistory([]Look{{Treatment: Counts{1000, 0}, Control: Counts{2000, 0}}})
	require.NoError(t, err)
	assert.Equal(t, Past, e.Control())
	// Against its past, a look's control does not count.
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 30}, Control: Counts{100, 30}}))
	_, control := e.Totals()
	assert.Equal(t, Counts{}, control)

	_, err = test.StartAgainstHistory([]Look{{Treatment: Counts{10, 11}}})
	assert.EqualError(t, err, "history: treatment: 11 errors among 10 requests")
}

// Workloads that differ (the moved one used to fail 2% of its requests, the
// others 0.5%) and a change that reaches them all (errors four times as
// many from 30 s on, or twice the traffic): the difference in differences
// takes both out, and the healthy wave fails at most α of the time.
func TestAgainstTheOtherWorkloadsAHealthyWaveIsFailedAtMostAlphaOfTheTime(t *testing.T) {
	const runs = 500
	test := ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}
	times := func(before, after float64) func(int) float64 {
		return func(l int) float64 {
			if l >= 2 {
				return after
			}
			return before
		}
	}
	for _, rps := range trafficLevels {
		for _, c := range []struct {
			name             string
			treatment, other arm
		}{
			{"as before", arm{pods: 2, rps: rps, errorRatio: constant(0.02)}, arm{pods: 4, rps: rps, errorRatio: constant(0.005)}},
			{"errors rising for all", arm{pods: 2, rps: rps, errorRatio: times(0.02, 0.08)}, arm{pods: 4, rps: rps, errorRatio: times(0.005, 0.02)}},
			{"traffic doubling for all", arm{pods: 2, rps: rps, errorRatio: constant(0.02), surge: times(1, 2)}, arm{pods: 4, rps: rps, errorRatio: constant(0.005), surge: times(1, 2)}},
		} {
			got, controls := ratesAgainstHistory(t, test, runs, looks, c.treatment, c.other)
			atMostAlpha(t, test, runs, got, Fail, fmt.Sprintf("%g rps, %s (controls %v)", rps, c.name, controls))
		}
	}
}

// The same workloads, the moved one now failing twice as often: at 100
// requests a second a pod, found within 15 minutes in at least 95% of runs,
// and never passed.
func TestAgainstTheOtherWorkloadsADoubledErrorRatioIsFound(t *testing.T) {
	test := ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}
	moved := func(l int) float64 {
		if l >= 0 {
			return 0.04
		}
		return 0.02
	}
	got, controls := ratesAgainstHistory(t, test, 200, looks, arm{pods: 2, rps: 100, errorRatio: moved}, arm{pods: 4, rps: 100, errorRatio: constant(0.005)})
	assert.GreaterOrEqual(t, got[Fail], 190, "%v", got)
	assert.Zero(t, got[Pass], "%v", got)
	assert.Equal(t, map[Control]int{Others: 200}, controls)
}

// The demo's namespace: no workload failed a request before the wave, so
// the history cannot bound the split, and the moved workload is held to
// its own past. Serving 30% errors at one request a second a pod, it
// fails within two minutes.
func TestAWorkloadWhoseNamespaceHadNoErrorsIsHeldToItsPastAndFailsOnThirtyPercent(t *testing.T) {
	test := ErrorTest{Alpha: 0.05, Tolerance: 0.5, Floor: 0.005}
	broken := func(l int) float64 {
		if l >= 0 {
			return 0.3
		}
		return 0
	}
	for s := uint64(0); s < 200; s++ {
		d, at, c := runAgainstHistory(t, test, s, 40, looks, arm{pods: 2, rps: 1, errorRatio: broken}, arm{pods: 4, rps: 1, errorRatio: constant(0)})
		require.Equal(t, Past, c)
		if !assert.Equal(t, Fail, d, "seed %d", s) || !assert.LessOrEqual(t, at, 8, "seed %d failed at look %d", s, at) {
			return
		}
	}
}

// A control that served a sliver of the treatment's requests still bounds
// the split when it had errors: the bound is worked in log-odds, where the
// treatment's share of an error never rounds to 1.
func TestTheSplitsUpperBoundHoldsWhenTheControlServedASliver(t *testing.T) {
	history := func(controlShare float64) []Look {
		var looks []Look
		for i := range 40 {
			ce := 0.0
			if i%10 < 3 {
				ce = 1
			}
			looks = append(looks, Look{Treatment: Counts{15000, 75}, Control: Counts{15000 * controlShare, ce}})
		}
		return looks
	}
	for _, share := range []float64{1e-2, 1e-3, 1e-6} {
		hi := ratioUpper(history(share), 0.0125)
		assert.False(t, math.IsInf(hi, 1), "control share %g: upper bound %g", share, hi)
	}
	e, err := ErrorTest{Alpha: 0.05, Tolerance: 0.2, Floor: 0.001}.StartAgainstHistory(history(1e-3))
	require.NoError(t, err)
	assert.Equal(t, Others, e.Control(), "the other workload had 12 errors before the restart")
	// Every workload's errors rise fourfold: against the others this
	// cancels.
	for range 20 {
		require.NoError(t, e.Observe(Look{Treatment: Counts{15000, 300}, Control: Counts{15, 1}}))
	}
	assert.NotEqual(t, Fail, e.Decision())
}
