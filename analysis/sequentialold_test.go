package analysis

import (
	"context"
	"math"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// rolling is reviews restarted at t0 with two old pods serving 0% errors
// through the history and the first `overlap` looks after the restart,
// and two new pods serving from the first look on with errAfter of 5xx;
// ratings, not moved, serves throughout without error. Each pod serves
// req requests a look.
func rolling(overlap, after int, req, errAfter float64) (model.Matrix, promv1.Range) {
	start := t0.Add(-10 * time.Minute)
	steps := 40 + after + 1
	series := func(from, to int, errs float64) (ok, bad []float64) {
		o, b := 0.0, 0.0
		for k := range steps {
			if k < from || k > to {
				ok, bad = append(ok, math.NaN()), append(bad, math.NaN())
				continue
			}
			ok, bad = append(ok, o), append(bad, b)
			o += req * (1 - errs)
			b += req * errs
		}
		return ok, bad
	}
	var m model.Matrix
	for _, p := range []string{"reviews-old-1", "reviews-old-2"} {
		ok, _ := series(0, 40+overlap, 0)
		m = append(m, sampled("reviews", p, "200", start, ok...))
	}
	for _, p := range []string{"reviews-new-1", "reviews-new-2"} {
		ok, bad := series(41, steps, errAfter)
		m = append(m, sampled("reviews", p, "200", start, ok...), sampled("reviews", p, "503", start, bad...))
	}
	ok, _ := series(0, steps, 0)
	m = append(m, sampled("ratings", "ratings-1", "200", start, ok...))
	return m, promv1.Range{Start: start, End: start.Add(time.Duration(steps-1) * 15 * time.Second), Step: 15 * time.Second}
}

func rollingWave(ready time.Time) canary.WaveUnderTest {
	w := wave(member("reviews", pod("reviews-new-1", "1-26"), pod("reviews-new-2", "1-26")))
	w.Workloads[0].Pods[0].CreatedAt, w.Workloads[0].Pods[1].CreatedAt = t0.Add(time.Second), t0.Add(2*time.Second)
	w.Unmoved = []string{"ratings"}
	w.Analysis.ReadyAt = &ready
	return w
}

// A rollout whose new pods answer 30% of 5xx beside old pods that answer
// none is failed on the looks in which both served, and the reason says
// the old pods were the control.
func TestARollingRestartIsHeldToTheWorkloadsPodsNotYetReplaced(t *testing.T) {
	m, r := rolling(6, 6, 30, 0.3)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), rollingWave(t0.Add(90*time.Second)), r.End.Add(15*time.Second))
	require.Equal(t, canary.ResultFail, v.Result, v.Reason)
	assert.Equal(t, "reviews: error ratio 30.00% (36/120), 30.00% (36/120) of it against its pods not yet replaced's 0.00% (0/120) in the 2 looks both served, against 0.00% (0/2400) before the restart; "+
		"control: its pods not yet replaced in 2 looks, else its own error ratio before the restart; evidence 4.72e+03 of 40: fail", v.Reason)
	require.Len(t, v.Measurements, 1)
	assert.Equal(t, "its pods not yet replaced in 2 looks, else its own error ratio before the restart", v.Measurements[0].Control)
}

// The same rollout, healthy, the new pods answering no 5xx, as the old
// ones: the looks held to the old pods carry no evidence of harm.
func TestAHealthyRollingRestartIsNotFailedByItsOldPods(t *testing.T) {
	m, r := rolling(6, 10, 30, 0)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), rollingWave(t0.Add(90*time.Second)), r.End.Add(15*time.Second))
	assert.NotEqual(t, canary.ResultFail, v.Result, v.Reason)
	require.Len(t, v.Measurements, 1)
	assert.Contains(t, v.Measurements[0].Control, "its pods not yet replaced in ")
}

// An old pod's first 5xx after the restart begins a series of its own: it
// is still the old pod's, not the moved pods'.
func TestAnOldPodsSeriesBegunAfterTheRestartStaysItsOwn(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("reviews", "reviews-old-1", "200", start, 0, 10, 20, 30, 40)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)
	looks := increases(model.Matrix{
		sampled("reviews", "reviews-old-1", "200", t0, 40, 50, 60),
		sampled("reviews", "reviews-old-1", "503", t0, math.NaN(), 3, 6),
		sampled("reviews", "reviews-new-1", "503", t0, math.NaN(), 1, 2),
	}, r, 1)
	w := member("reviews", pod("reviews-new-1", "1-26"))
	moved, old := splitOld(looks, r, w, "1-26", t0, hist)
	assert.Equal(t, []float64{0, 3, 3, 0, 0}, sumLooks(old, "503"), "the old pod's errors")
	assert.Equal(t, []float64{0, 1, 1, 0, 0}, sumLooks(moved, "503"), "the new pod's errors")
	assert.Equal(t, []float64{0, 10, 10, 0, 0}, sumLooks(old, "200"))
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(moved, "200"))
}

// A StatefulSet recreates its pod under the same name on the new revision:
// the pod's samples are the old pod's before the new one was created, the
// moved pod's from then on. Until the cache shows the new pod, all are
// the old one's.
func TestARecreatedPodOfTheSameNameIsTheMovedOneFromItsCreation(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("web", "web-0", "200", start, 0, 10, 20, 30, 40)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)
	looks := increases(model.Matrix{sampled("web", "web-0", "200", t0, 40, 50, 60, 5, 15)}, r, 1)
	recreated := pod("web-0", "1-26")
	recreated.CreatedAt = t0.Add(40 * time.Second)
	w := member("web", recreated)
	moved, old := splitOld(looks, r, w, "1-26", t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 0, 0}, sumLooks(old, "200"))
	assert.Equal(t, []float64{0, 0, 0, 5, 10}, sumLooks(moved, "200"))

	stale := pod("web-0", "1-25")
	stale.Current, stale.CreatedAt = false, t0.Add(-time.Hour)
	moved, old = splitOld(looks, r, member("web", stale), "1-26", t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 5, 10}, sumLooks(old, "200"), "the cache has not seen the new pod yet")
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(moved, "200"))
}

// Series without a pod label, as a Prometheus without Istio's pod
// relabelling holds them, are all the moved pods': no old pod is told
// apart.
func TestSeriesWithoutAPodAreTheMovedPods(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("web", "", "200", start, 0, 10, 20, 30, 40)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)
	looks := increases(model.Matrix{sampled("web", "", "200", t0, 40, 50, 60)}, r, 1)
	moved, old := splitOld(looks, r, member("web"), "1-26", t0, hist)
	assert.Empty(t, old)
	assert.Equal(t, []float64{0, 10, 10, 0, 0}, sumLooks(moved, "200"))
}

// sumLooks adds up, look by look, the counters of one response code.
func sumLooks(cs []counter, code string) []float64 {
	var out []float64
	for _, c := range cs {
		if c.code != code {
			continue
		}
		if out == nil {
			out = make([]float64, len(c.looks))
		}
		for k, v := range c.looks {
			out[k] += v
		}
	}
	return out
}

// A pod that already ran the expected revision before the restart (its
// workload restarted again) is a moved pod, never the control.
func TestAPodAlreadyOnTheTargetIsNeverTheControl(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("web", "web-abc", "503", start, 0, 3, 6, 9, 12)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)
	looks := increases(model.Matrix{sampled("web", "web-abc", "503", t0, 12, 15, 18)}, r, 1)
	already := pod("web-abc", "1-26")
	already.Current, already.CreatedAt = false, t0.Add(-time.Hour)
	moved, old := splitOld(looks, r, member("web", already), "1-26", t0, hist)
	assert.Equal(t, []float64{0, 3, 3, 0, 0}, sumLooks(moved, "503"))
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(old, "503"))
}
