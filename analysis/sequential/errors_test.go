package sequential

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The defaults the tests and the study share.
var defaultTest = ErrorTest{Alpha: 0.05, Tolerance: 0.2, Floor: 0.001}

func start(t *testing.T, test ErrorTest) *ErrorProcess {
	t.Helper()
	e, err := test.Start()
	require.NoError(t, err)
	return e
}

func TestATestThatCannotRunIsRefusedWithTheValueAndWhatWasExpected(t *testing.T) {
	for _, c := range []struct {
		test ErrorTest
		want string
	}{
		{ErrorTest{Alpha: 0, Tolerance: 0.2}, "alpha 0 is not from 1e-12 up to 1, 1 not included"},
		{ErrorTest{Alpha: 1, Tolerance: 0.2}, "alpha 1 is not from 1e-12 up to 1, 1 not included"},
		{ErrorTest{Alpha: math.NaN()}, "alpha NaN is not from 1e-12 up to 1, 1 not included"},
		{ErrorTest{Alpha: 1e-320}, "alpha 1e-320 is not from 1e-12 up to 1, 1 not included"},
		{ErrorTest{Alpha: 0.05, Tolerance: -0.1}, "tolerance -0.1 is not a number from 0 to 1000"},
		{ErrorTest{Alpha: 0.05, Tolerance: math.Inf(1)}, "tolerance +Inf is not a number from 0 to 1000"},
		{ErrorTest{Alpha: 0.05, Tolerance: 1e308}, "tolerance 1e+308 is not a number from 0 to 1000"},
		{ErrorTest{Alpha: 0.05, Floor: 1}, "floor 1 is not an error ratio from 0 up to, not including, 1"},
		{ErrorTest{Alpha: 0.05, Floor: -0.01}, "floor -0.01 is not an error ratio from 0 up to, not including, 1"},
	} {
		_, err := c.test.Start()
		assert.EqualError(t, err, c.want)
	}
}

func TestCountsNoCounterCouldGiveAreRefusedAndChangeNothing(t *testing.T) {
	e := start(t, defaultTest)
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 5}, Control: Counts{100, 1}}))
	fail, _ := e.FailEvidence()
	pass := e.PassEvidence()
	for _, c := range []struct {
		look Look
		want string
	}{
		{Look{Treatment: Counts{10, 11}, Control: Counts{10, 0}}, "treatment: 11 errors among 10 requests"},
		{Look{Treatment: Counts{10, 1}, Control: Counts{-1, 0}}, "control: requests -1 and errors 0 must be finite and not negative"},
		{Look{Treatment: Counts{math.NaN(), 0}, Control: Counts{10, 0}}, "treatment: requests NaN and errors 0 must be finite and not negative"},
		{Look{Treatment: Counts{10, 0}, Control: Counts{math.Inf(1), 0}}, "control: requests +Inf and errors 0 must be finite and not negative"},
	} {
		assert.EqualError(t, e.Observe(c.look), c.want)
	}
	assert.Equal(t, 1, e.Looks())
	again, _ := e.FailEvidence()
	assert.Equal(t, fail, again)
	assert.Equal(t, pass, e.PassEvidence())
	tr, co := e.Totals()
	assert.Equal(t, Counts{100, 5}, tr)
	assert.Equal(t, Counts{100, 1}, co)
}

// The first look bets on nothing: the plug-in starts at the hypothesis.
// The second pays the likelihood ratio of its split at the ratio the first
// gave, worked out here by hand.
func TestALookPaysTheLikelihoodRatioOfItsSplitAtTheEarlierLooksEstimate(t *testing.T) {
	test := ErrorTest{Alpha: 0.05, Tolerance: 0, Floor: 0.001}
	e := start(t, test)
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 8}, Control: Counts{300, 2}}))
	assert.Equal(t, 0.0, e.ratioFail.evidence(), "the first look bets nothing")
	assert.Equal(t, 0.0, e.floorFail.evidence(), "the first look bets nothing")

	// The plug-in after look 1: request share ω = 1/4, the hypothesis's
	// share θ0 = 1/4; θ̂ = (8 + 2·¼)/(10 + 2) = 8.5/12; ρ̃ = θ̂(1-ω)/((1-θ̂)ω).
	theta := 8.5 / 12
	rho := theta * 0.75 / ((1 - theta) * 0.25)
	require.InDelta(t, rho, e.ratioFail.(*ratioProcess).bet(), 1e-12)
	// Look 2: 200 and 200 requests, 6 and 1 errors. Its split's likelihood
	// ratio: θ = ρ/(ρ+1) against θ0 = 1/2.
	require.NoError(t, e.Observe(Look{Treatment: Counts{200, 6}, Control: Counts{200, 1}}))
	th := rho / (rho + 1)
	want := 6*math.Log(th/0.5) + 1*math.Log((1-th)/0.5)
	assert.InDelta(t, want, e.ratioFail.evidence(), 1e-12)
	// The floor's plug-in after look 1: (8+1)/(100+1000) = 9/1100.
	q := 9.0 / 1100
	wantFloor := 6*math.Log(q/0.001) + 194*math.Log((1-q)/(1-0.001))
	assert.InDelta(t, wantFloor, e.floorFail.evidence(), 1e-12)
	ev, at := e.FailEvidence()
	assert.InDelta(t, math.Min(want, wantFloor), ev, 1e-12)
	assert.Equal(t, math.Log(20), at)
	assert.Equal(t, Continue, e.Decision(), "e^%.2f < 1/α = 20", ev)
}

func TestALookWithAnIdleArmLeavesTheRatioEvidenceAndItsEstimateAlone(t *testing.T) {
	e := start(t, defaultTest)
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 30}, Control: Counts{100, 0}}))
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 30}, Control: Counts{100, 0}}))
	before, bet := e.ratioFail.evidence(), e.ratioFail.(*ratioProcess).bet()
	require.Positive(t, before)
	require.NoError(t, e.Observe(Look{Treatment: Counts{100, 30}, Control: Counts{}}))
	require.NoError(t, e.Observe(Look{Treatment: Counts{}, Control: Counts{100, 3}}))
	assert.Equal(t, before, e.ratioFail.evidence())
	assert.Equal(t, bet, e.ratioFail.(*ratioProcess).bet())
	assert.Equal(t, 4, e.Looks())
}

func TestAFloorOfZeroLeavesTheRatioAloneToDecide(t *testing.T) {
	test := ErrorTest{Alpha: 0.05, Tolerance: 0.2, Floor: 0}
	e := start(t, test)
	require.NoError(t, e.Observe(Look{Treatment: Counts{1000, 1}, Control: Counts{1000, 0}}))
	assert.Equal(t, math.Inf(1), e.floorFail.evidence(), "one error refutes an error ratio of at most 0")
	assert.Equal(t, 0.0, e.floorPass.evidence(), "nothing refutes an error ratio above 0")
	ev, _ := e.FailEvidence()
	assert.Equal(t, e.ratioFail.evidence(), ev)
}

func TestSplitGivesEachWorkloadOfAWaveAnEqualShareOfAlpha(t *testing.T) {
	assert.Equal(t, 0.01, ErrorTest{Alpha: 0.05}.Split(5).Alpha)
	assert.Equal(t, 0.05, ErrorTest{Alpha: 0.05}.Split(1).Alpha)
	assert.Equal(t, 0.05, ErrorTest{Alpha: 0.05}.Split(0).Alpha)
}

// The configuration takes alpha down to 1e-6; shared among the most
// workloads a wave lists, each share still runs.
func TestTheSmallestConfiguredAlphaSharedByAWideWaveStillRuns(t *testing.T) {
	_, err := ErrorTest{Alpha: 1e-6, Tolerance: 0.5}.Split(500).Start()
	assert.NoError(t, err)
}
