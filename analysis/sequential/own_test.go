package sequential

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rollout is a wave whose workload's old pods keep serving beside its
// moved ones for the first rolling looks, as a rolling restart or an
// OnDelete workload between evictions does; after them, only the moved
// pods and the namespace's others serve.
type rollout struct {
	moved, old, others arm
	rolling            int
}

// run draws 40 looks of history (the old pods against the others), then
// the wave's looks, and returns the decision, the look it came at, and
// how many looks were held to the old pods.
func (r rollout) run(t testing.TB, test ErrorTest, seed uint64, looks int) (Decision, int, int) {
	src := rand.NewPCG(seed, 0x6f776e)
	var history []Look
	for i := -40; i < 0; i++ {
		history = append(history, Look{Treatment: r.old.draw(src, i, 15), Control: r.others.draw(src, i, 15)})
	}
	e, err := test.StartAgainstHistory(history)
	require.NoError(t, err)
	for i := 0; i < looks; i++ {
		l := Look{Treatment: r.moved.draw(src, i, 15), Control: r.others.draw(src, i, 15)}
		if i < r.rolling {
			l.Own = r.old.draw(src, i, 15)
		}
		require.NoError(t, e.Observe(l))
		if d := e.Decision(); d != Continue {
			n, _, _ := e.OwnLooks()
			return d, i + 1, n
		}
	}
	n, _, _ := e.OwnLooks()
	return Continue, looks, n
}

// A healthy wave stays failed at most α of the time when its first looks
// are held to its own old pods and the rest to the history's control, at
// every traffic level, with errors
// rising for every arm at once in the middle of it.
func TestLooksHeldToTheWorkloadsOwnOldPodsFailAHealthyWaveAtMostAlphaOfTheTime(t *testing.T) {
	const runs = 1000
	rise := func(look int) float64 {
		if look >= 8 {
			return 0.05
		}
		return 0.01
	}
	for _, rps := range trafficLevels {
		for _, rolling := range []int{20} {
			for _, errs := range []func(int) float64{constant(0.01), rise} {
				r := rollout{moved: arm{pods: 2, rps: rps, errorRatio: errs}, old: arm{pods: 2, rps: rps, errorRatio: errs},
					others: arm{pods: 4, rps: rps, errorRatio: errs}, rolling: rolling}
				got := map[Decision]int{}
				for s := range runs {
					d, _, _ := r.run(t, defaultTest, uint64(s), looks)
					got[d]++
				}
				atMostAlpha(t, defaultTest, runs, got, Fail, fmt.Sprintf("%g rps, %d looks rolling, errors %.2f then %.2f", rps, rolling, errs(0), errs(looks)))
			}
		}
	}
}

// A rollout that errs where its old pods do not is failed on the looks in
// which both served, before the old pods are gone: at one request a
// second a pod and 30% of errors, within the first eight looks.
func TestABrokenRolloutFailsAgainstTheWorkloadsOwnOldPods(t *testing.T) {
	r := rollout{moved: arm{pods: 2, rps: 1, errorRatio: constant(0.3)}, old: arm{pods: 2, rps: 1, errorRatio: constant(0)},
		others: arm{pods: 4, rps: 1, errorRatio: constant(0)}, rolling: 8}
	for s := uint64(0); s < 200; s++ {
		d, at, own := r.run(t, defaultTest, s, looks)
		if !assert.Equal(t, Fail, d, "seed %d", s) || !assert.LessOrEqual(t, at, 8, "seed %d failed at look %d", s, at) ||
			!assert.Equal(t, at, own, "seed %d: every look before the fail was held to the old pods", s) {
			return
		}
	}
}

// The old pods are the control of a look only when both they and the
// moved pods served in it; the history's control takes every other look,
// and the totals say which arm was counted where.
func TestALookIsHeldToTheOldPodsOnlyWhenBothServed(t *testing.T) {
	history := []Look{{Treatment: Counts{1000, 10}, Control: Counts{2000, 20}}}
	e, err := defaultTest.StartAgainstHistory(history)
	require.NoError(t, err)
	require.Equal(t, Others, e.Control())
	for _, l := range []Look{
		{Treatment: Counts{100, 1}, Control: Counts{200, 2}, Own: Counts{100, 1}},
		{Treatment: Counts{0, 0}, Control: Counts{200, 2}, Own: Counts{100, 1}},
		{Treatment: Counts{100, 2}, Control: Counts{200, 2}},
	} {
		require.NoError(t, e.Observe(l))
	}
	n, treated, own := e.OwnLooks()
	assert.Equal(t, 1, n)
	assert.Equal(t, Counts{100, 1}, treated)
	assert.Equal(t, Counts{100, 1}, own)
	treatment, control := e.Totals()
	assert.Equal(t, Counts{200, 3}, treatment)
	assert.Equal(t, Counts{600, 6}, control, "every look's, the pass side reading each against the history")
}

// A concurrent test's control is already the pods at the same time: it
// reads no Own, and counts no look as held to them.
func TestAConcurrentTestReadsNoOwnPods(t *testing.T) {
	e, err := defaultTest.Start()
	require.NoError(t, err)
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 30}, Control: Counts{100, 0}, Own: Counts{100, 0}}))
	n, _, _ := e.OwnLooks()
	assert.Zero(t, n)
	assert.Error(t, e.Observe(Look{Treatment: Counts{100, 1}, Control: Counts{100, 0}, Own: Counts{1, 2}}), "more errors than requests")
}
