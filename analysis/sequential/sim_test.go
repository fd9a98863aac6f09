package sequential

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/stat/distuv"
)

// arm is one side of a simulated wave: pods serving requests as a Poisson
// stream, each request an error with the probability its look gives.
type arm struct {
	pods       int
	rps        float64
	errorRatio func(look int) float64
	// surge multiplies the traffic from a look on, for both arms alike when
	// both have it.
	surge func(look int) float64
}

func (a arm) draw(src rand.Source, look int, seconds float64) Counts {
	lambda := a.rps * float64(a.pods) * seconds
	if a.surge != nil {
		lambda *= a.surge(look)
	}
	if lambda <= 0 {
		return Counts{}
	}
	n := distuv.Poisson{Lambda: lambda, Src: src}.Rand()
	p := a.errorRatio(look)
	if n == 0 || p <= 0 {
		return Counts{Requests: n}
	}
	return Counts{Requests: n, Errors: distuv.Binomial{N: n, P: p, Src: src}.Rand()}
}

func constant(v float64) func(int) float64 { return func(int) float64 { return v } }

// run looks every 15 s for at most looks looks and returns the decision
// and the look it came at (looks when none came).
func run(t testing.TB, test ErrorTest, seed uint64, looks int, treatment, control arm) (Decision, int) {
	src := rand.NewPCG(seed, 0x6d657368)
	e, err := test.Start()
	require.NoError(t, err)
	for i := 0; i < looks; i++ {
		require.NoError(t, e.Observe(Look{Treatment: treatment.draw(src, i, 15), Control: control.draw(src, i, 15)}))
		if d := e.Decision(); d != Continue {
			return d, i + 1
		}
	}
	return Continue, looks
}

// rates runs many waves and counts each decision.
func rates(t testing.TB, test ErrorTest, runs, looks int, treatment, control arm) map[Decision]int {
	out := map[Decision]int{}
	for s := 0; s < runs; s++ {
		d, _ := run(t, test, uint64(s), looks, treatment, control)
		out[d]++
	}
	return out
}

// runAgainstHistory draws historyLooks looks before the restart (negative
// look numbers), starts the test against them, then looks as run does.
func runAgainstHistory(t testing.TB, test ErrorTest, seed uint64, historyLooks, looks int, treatment, control arm) (Decision, int, Control) {
	src := rand.NewPCG(seed, 0x68697374)
	var history []Look
	for i := -historyLooks; i < 0; i++ {
		history = append(history, Look{Treatment: treatment.draw(src, i, 15), Control: control.draw(src, i, 15)})
	}
	e, err := test.StartAgainstHistory(history)
	require.NoError(t, err)
	for i := 0; i < looks; i++ {
		require.NoError(t, e.Observe(Look{Treatment: treatment.draw(src, i, 15), Control: control.draw(src, i, 15)}))
		if d := e.Decision(); d != Continue {
			return d, i + 1, e.Control()
		}
	}
	return Continue, looks, e.Control()
}

// ratesAgainstHistory runs many waves against 10 minutes of history and
// counts each decision and each control used.
func ratesAgainstHistory(t testing.TB, test ErrorTest, runs, looks int, treatment, control arm) (map[Decision]int, map[Control]int) {
	out, controls := map[Decision]int{}, map[Control]int{}
	for s := 0; s < runs; s++ {
		d, _, c := runAgainstHistory(t, test, uint64(s), 40, looks, treatment, control)
		out[d]++
		controls[c]++
	}
	return out, controls
}
