package sequential

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The traffic levels of the study: requests per second per pod.
var trafficLevels = []float64{0.1, 1, 10, 100}

// A wave is looked at every 15 s for 15 minutes.
const looks = 60

// atMostAlpha asserts that a wrong decision came in at most α of runs.
func atMostAlpha(t *testing.T, test ErrorTest, runs int, got map[Decision]int, wrong Decision, what string) {
	t.Helper()
	t.Logf("%s: %v", what, got)
	assert.LessOrEqual(t, float64(got[wrong]), test.Alpha*float64(runs), "%s: %d of %d runs ended %s", what, got[wrong], runs, wrong)
}

func TestAHealthyWaveIsFailedAtMostAlphaOfTheTimeAtEveryTrafficLevel(t *testing.T) {
	const runs = 2000
	for _, rps := range trafficLevels {
		for _, p := range []float64{0, 0.01, 0.2} {
			got := rates(t, defaultTest, runs, looks,
				arm{pods: 2, rps: rps, errorRatio: constant(p)}, arm{pods: 4, rps: rps, errorRatio: constant(p)})
			atMostAlpha(t, defaultTest, runs, got, Fail, fmt.Sprintf("%g rps, both arms at %g", rps, p))
		}
	}
}

// At the edge of the tolerance the wave is as healthy as the test allows:
// failing it is as wrong as failing an A/A wave, and passing it as wrong
// as passing a broken one.
func TestAWaveAtTheEdgeOfTheToleranceIsFailedOrPassedAtMostAlphaOfTheTime(t *testing.T) {
	const runs = 2000
	for _, rps := range trafficLevels {
		got := rates(t, defaultTest, runs, looks,
			arm{pods: 2, rps: rps, errorRatio: constant(0.012)}, arm{pods: 4, rps: rps, errorRatio: constant(0.01)})
		what := fmt.Sprintf("%g rps, 1.2%% against 1%%", rps)
		atMostAlpha(t, defaultTest, runs, got, Fail, what)
		atMostAlpha(t, defaultTest, runs, got, Pass, what)
	}
}

// The control is what makes a change that reaches both arms harmless: the
// callers' failures rising tenfold at look 20 while the wave's pods take
// ever more of the traffic, or a surge that doubles every arm's traffic.
// A comparison with the workload's own past would read either as the
// revision's fault.
func TestAChangeThatReachesBothArmsDoesNotFailAHealthyWave(t *testing.T) {
	const runs = 2000
	rise := func(look int) float64 {
		if look >= 20 {
			return 0.1
		}
		return 0.01
	}
	ramp := func(look int) float64 { return 1 + float64(look)/10 }
	surge := func(look int) float64 {
		if look >= 20 {
			return 2
		}
		return 1
	}
	for _, rps := range trafficLevels {
		got := rates(t, defaultTest, runs, looks,
			arm{pods: 2, rps: rps, errorRatio: rise, surge: ramp}, arm{pods: 4, rps: rps, errorRatio: rise})
		atMostAlpha(t, defaultTest, runs, got, Fail, fmt.Sprintf("%g rps, errors rising for both arms", rps))
		got = rates(t, defaultTest, runs, looks,
			arm{pods: 2, rps: rps, errorRatio: constant(0.01), surge: surge}, arm{pods: 4, rps: rps, errorRatio: constant(0.01), surge: surge})
		atMostAlpha(t, defaultTest, runs, got, Fail, fmt.Sprintf("%g rps, traffic doubling for both arms", rps))
	}
}

// The demo's broken revision answers 30% of requests with a 5xx while the
// pods not yet moved answer none: at one request a second a pod, every run
// fails, within two minutes.
func TestAWaveServingThirtyPercentErrorsFailsWithinTwoMinutes(t *testing.T) {
	for s := uint64(0); s < 500; s++ {
		d, at := run(t, defaultTest, s, looks, arm{pods: 2, rps: 1, errorRatio: constant(0.3)}, arm{pods: 4, rps: 1, errorRatio: constant(0)})
		if !assert.Equal(t, Fail, d, "seed %d", s) || !assert.LessOrEqual(t, at, 8, "seed %d failed at look %d", s, at) {
			return
		}
	}
}

// A workload that serves no error passes once its requests show, beyond
// the chance α/2, that its error ratio is under the floor. Knowing the
// ratio is 0 from the start, 3,700 requests would show it at a floor of
// 0.1% (e^(0.001 n) ≥ 2/α); the plug-in learns it from the requests, and
// takes about 6,000: 20 looks of two pods at 10 requests a second.
func TestAWaveWithoutErrorsPassesOnTheFloorOnceItsRequestsShowIt(t *testing.T) {
	for s := uint64(0); s < 200; s++ {
		d, at := run(t, defaultTest, s, looks, arm{pods: 2, rps: 10, errorRatio: constant(0)}, arm{pods: 4, rps: 10, errorRatio: constant(0)})
		if !assert.Equal(t, Pass, d, "seed %d", s) || !assert.LessOrEqual(t, at, 21, "seed %d passed at look %d", s, at) {
			return
		}
	}
}
