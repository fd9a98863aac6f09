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
	moved, old, _ := splitOld(looks, r, w, "1-26", t0, t0, hist)
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
	moved, old, _ := splitOld(looks, r, w, "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 0, 0}, sumLooks(old, "200"))
	assert.Equal(t, []float64{0, 0, 0, 5, 10}, sumLooks(moved, "200"))

	stale := pod("web-0", "1-25")
	stale.Current, stale.CreatedAt = false, t0.Add(-time.Hour)
	moved, old, _ = splitOld(looks, r, member("web", stale), "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 5, 10}, sumLooks(old, "200"), "the cache has not seen the new pod yet")
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(moved, "200"))
}

// Series without a pod label, as a Prometheus without Istio's pod
// relabelling holds them, are the moved pods' once the wave is up: no old
// pod is told apart.
func TestSeriesWithoutAPodAreTheMovedPods(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("web", "", "200", start, 0, 10, 20, 30, 40)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)
	looks := increases(model.Matrix{sampled("web", "", "200", t0, 40, 50, 60)}, r, 1)
	moved, old, _ := splitOld(looks, r, member("web"), "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(old, "200"))
	assert.Equal(t, []float64{0, 10, 10, 0, 0}, sumLooks(moved, "200"))

	// Before the wave was up, such series may still hold old pods: they
	// count for neither arm.
	moved, old, _ = splitOld(looks, r, member("web"), "1-26", t0, t0.Add(20*time.Second), hist)
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(old, "200"))
	assert.Equal(t, []float64{0, 0, 10, 0, 0}, sumLooks(moved, "200"))
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
	moved, old, _ := splitOld(looks, r, member("web", already), "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 3, 3, 0, 0}, sumLooks(moved, "503"))
	assert.Equal(t, []float64{0, 0, 0, 0, 0}, sumLooks(old, "503"))
}

// life is one incarnation of a pod: the steps (of a 15s grid from the
// matrix's start, both ends included) at which its proxy was scraped,
// what it served a look, and the instance label it was scraped under.
type life struct {
	from, to  int
	req, errs float64
	instance  string
}

// lives builds a pod's istio_requests_total series over steps steps:
// one series per instance and response code, an incarnation that shares
// its instance with an earlier one showing as a counter reset. pod ""
// leaves the pod label out (a Prometheus without Istio's pod relabelling).
func lives(workload, pod string, start time.Time, steps int, ls ...life) model.Matrix {
	type key struct{ instance, code string }
	vals := map[key][]float64{}
	var order []key
	for _, l := range ls {
		for _, code := range []string{"200", "503"} {
			share := 1 - l.errs
			if code == "503" {
				share = l.errs
			}
			if share == 0 {
				continue
			}
			k := key{l.instance, code}
			if vals[k] == nil {
				vals[k] = make([]float64, steps)
				for i := range vals[k] {
					vals[k][i] = math.NaN()
				}
				order = append(order, k)
			}
			c := 0.0
			for s := l.from; s <= l.to && s < steps; s++ {
				c += l.req * share
				vals[k][s] = c
			}
		}
	}
	var m model.Matrix
	for _, k := range order {
		s := sampled(workload, pod, k.code, start, vals[k]...)
		if pod == "" {
			delete(s.Metric, "pod")
		}
		if k.instance != "" {
			s.Metric["instance"] = model.LabelValue(k.instance)
		}
		m = append(m, s)
	}
	return m
}

// step is the time of step k of a matrix begun at start.
func step(start time.Time, k int) time.Time { return start.Add(time.Duration(k) * 15 * time.Second) }

// A StatefulSet pod recreated on the (broken) target, then evicted and
// recreated again, is the moved pod from its first recreation on: the
// snapshot's CreatedAt is only its latest incarnation's. Held to its own
// earlier target incarnation, the broken revision passes against itself.
func TestAStatefulSetPodRecreatedTwiceOnTheTargetIsNeverItsOwnControl(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 65 // t0 is step 40
	var m model.Matrix
	// web-0: old until step 44, recreated on the target (30% of 5xx) at step 45.
	m = append(m, lives("web", "web-0", start, steps, life{0, 44, 200, 0, ""}, life{45, steps, 200, 0.3, ""})...)
	// web-1: old until step 41, on the target from step 42, evicted and
	// recreated on the target again at step 61.
	m = append(m, lives("web", "web-1", start, steps, life{0, 41, 200, 0, ""}, life{42, 59, 200, 0.3, ""}, life{61, steps, 200, 0.3, ""})...)
	r := promv1.Range{Start: start, End: step(start, steps-1), Step: 15 * time.Second}

	w0, w1 := pod("web-0", "1-26"), pod("web-1", "1-26")
	w0.CreatedAt, w1.CreatedAt = step(start, 45).Add(-5*time.Second), step(start, 61).Add(-5*time.Second)
	ready := step(start, 62)
	wv := wave(member("web", w0, w1))
	wv.Analysis.ReadyAt = &ready

	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), wv, r.End.Add(15*time.Second))
	assert.Equal(t, canary.ResultFail, v.Result, "every pod served 30%% of 5xx on the target against none before the restart: %s", v.Reason)
}

// The same wave judged while web-1 is between its eviction and its
// recreation (absent from the snapshot, as a node drain leaves it): its
// target incarnation's 5xx are not the control either.
func TestATargetPodMissingFromTheSnapshotIsNotTheControl(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 65
	var m model.Matrix
	m = append(m, lives("web", "web-0", start, steps, life{0, 44, 200, 0, ""}, life{45, steps, 200, 0.3, ""})...)
	m = append(m, lives("web", "web-1", start, steps, life{0, 41, 200, 0, ""}, life{42, steps - 2, 200, 0.3, ""})...)
	r := promv1.Range{Start: start, End: step(start, steps-1), Step: 15 * time.Second}

	w0 := pod("web-0", "1-26")
	w0.CreatedAt = step(start, 45).Add(-5 * time.Second)
	ready := step(start, 50)
	wv := wave(member("web", w0)) // web-1 evicted, not yet recreated
	wv.Analysis.ReadyAt = &ready

	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), wv, r.End.Add(15*time.Second))
	assert.Equal(t, canary.ResultFail, v.Result, v.Reason)
}

// onDelete is a ten-pod workload whose pods are replaced one a minute:
// nine old pods serving 0.1% of 5xx beside one new pod serving 3% (six
// times the floor: broken), 1000 requests a look each, through twenty
// looks after the restart at t0 (step 40).
func onDelete(podLabel bool) (model.Matrix, promv1.Range) {
	start, steps := t0.Add(-10*time.Minute), 61
	var m model.Matrix
	for i := range 10 {
		name := "web-" + string(rune('0'+i))
		p := name
		if !podLabel {
			p = ""
		}
		inst := "10.0.0." + string(rune('0'+i)) + ":15020"
		if i == 0 {
			m = append(m, lives("web", p, start, steps, life{0, 40, 1000, 0.001, inst}, life{41, steps, 1000, 0.03, inst + "-new"})...)
			continue
		}
		m = append(m, lives("web", p, start, steps, life{0, steps, 1000, 0.001, inst})...)
	}
	return m, promv1.Range{Start: start, End: step(start, steps-1), Step: 15 * time.Second}
}

func onDeleteWave(ready time.Time) canary.WaveUnderTest {
	pods := []canary.Pod{pod("web-0", "1-26")}
	pods[0].CreatedAt = t0.Add(10 * time.Second)
	for i := 1; i < 10; i++ {
		p := pod("web-"+string(rune('0'+i)), "1-25")
		p.Current, p.CreatedAt = false, t0.Add(-time.Hour)
		pods = append(pods, p)
	}
	w := wave(member("web", pods...))
	w.Analysis.ReadyAt = &ready
	return w
}

// With the pod label, the new pod's 3% is held to the old pods' 0.1%
// and fails: the reference for the next test.
func TestABrokenPodBesideNineOldOnesFails(t *testing.T) {
	m, r := onDelete(true)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), onDeleteWave(r.End), r.End.Add(15*time.Second))
	assert.Equal(t, canary.ResultFail, v.Result, v.Reason)
}

// Without a pod label (a setup the README supports: "the control is the
// history's alone"), the rollout's looks hold the nine old pods' traffic
// beside the new pod's: counted as the moved workload's, the mix would be
// under the floor. They count from the moment the wave was up.
func TestWithoutAPodLabelARolloutIsNotPassedOnItsOldPods(t *testing.T) {
	m, r := onDelete(false)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), onDeleteWave(r.End), r.End.Add(15*time.Second))
	assert.NotEqual(t, canary.ResultPass, v.Result, v.Reason)
}

// Old pods the snapshot shows on the source revision, whose proxies
// served nothing before the restart (pods an HPA or a Deployment's
// proportional scaling added to the old ReplicaSet during the rollout),
// are old pods: counted as moved, their 0.1% dilutes the new pod's 3%
// under the floor and passes it.
func TestAPodTheSnapshotShowsOnTheSourceIsNeverAMovedOne(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	var m model.Matrix
	m = append(m, lives("web", "web-0", start, steps, life{0, 40, 1000, 0.001, "a"}, life{41, steps, 1000, 0.03, "b"})...)
	for i := 1; i < 10; i++ {
		m = append(m, lives("web", "web-"+string(rune('0'+i)), start, steps, life{41, steps, 1000, 0.001, "c"})...)
	}
	r := promv1.Range{Start: start, End: step(start, steps-1), Step: 15 * time.Second}
	wv := onDeleteWave(r.End)
	for i := 1; i < 10; i++ {
		wv.Workloads[0].Pods[i].CreatedAt = t0.Add(5 * time.Second)
	}
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), wv, r.End.Add(15*time.Second))
	assert.NotEqual(t, canary.ResultPass, v.Result, v.Reason)
}

// One old pod lingering through the rollout (a long terminationGrace-
// PeriodSeconds, a preStop hook) and answering its few requests with
// 503, as a draining pod does or as a namespace owner can arrange, is a
// control with a tiny denominator: the new pods' 30% of 5xx (none before
// the restart) is "within 1.5 times" its 100%. Those looks never pass the
// revision (a pass reads every look against the history), and once the
// old pod is gone the history's looks fail it.
func TestAFewFailedRequestsOfAnOldPodDoNotPassABrokenRevision(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	var m model.Matrix
	m = append(m, lives("web", "web-old", start, steps, life{0, 40, 400, 0, ""}, life{41, 50, 2, 1, ""})...)
	m = append(m, lives("web", "web-new", start, steps, life{41, steps, 400, 0.3, ""})...)
	p := pod("web-new", "1-26")
	p.CreatedAt = t0.Add(2 * time.Second)
	ready := step(start, 45)
	wv := wave(member("web", p))
	wv.Analysis.ReadyAt = &ready
	g := newSequentialGate(t, &rangeProm{matrix: m})

	v := g.Evaluate(context.Background(), wv, step(start, 51))
	assert.Equal(t, canary.ResultPending, v.Result, "while the old pod serves: %s", v.Reason)
	assert.Contains(t, v.Reason, "of it against its pods not yet replaced's 100.00% (20/20) in the 10 looks both served")
	assert.Contains(t, v.Reason, "; evidence 1 of 40")

	v = g.Evaluate(context.Background(), wv, step(start, 54))
	assert.Equal(t, canary.ResultFail, v.Result, "once it is gone: %s", v.Reason)
}

// A look that ends at or before the second a recreated pod was created
// holds only the old incarnation's counts: CreationTimestamp is truncated
// to the second, so a step at that very second is still the old pod's.
// And the old incarnation's own series (its instance label) stays the
// old pod's to its last scrape, even in the look that also holds the new
// pod's creation: its last counts (a draining pod's 503s) are not the
// revision's.
func TestAnOldIncarnationsLastScrapeStaysTheOldPods(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("web", "web-0", "200", start, 0, 10, 20, 30, 40)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)

	// The same series: the value at t0+45s is the old pod's last, the new
	// pod created at t0+45.6s (CreationTimestamp t0+45s) counts from t0+60s.
	looks := increases(model.Matrix{sampled("web", "web-0", "503", t0, 40, 50, 60, 70, 5)}, r, 1)
	recreated := pod("web-0", "1-26")
	recreated.CreatedAt = t0.Add(45 * time.Second)
	moved, old, _ := splitOld(looks, r, member("web", recreated), "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 10, 0}, sumLooks(old, "503"), "CreationTimestamp t0+45s: the step at t0+45s is the old pod's")
	assert.Equal(t, []float64{0, 0, 0, 0, 5}, sumLooks(moved, "503"))

	// Two series, by instance: the old one's last scrape (t0+38s, shown
	// at t0+45s) and the new one's first (t0+60s), the new pod created at
	// t0+40s.
	a := sampled("web", "web-0", "503", t0, 40, 50, 60, 70)
	a.Metric["instance"] = "10.0.0.1:15020"
	b := sampled("web", "web-0", "503", t0, math.NaN(), math.NaN(), math.NaN(), math.NaN(), 5)
	b.Metric["instance"] = "10.0.0.2:15020"
	looks = increases(model.Matrix{a, b}, r, 1)
	recreated.CreatedAt = t0.Add(40 * time.Second)
	moved, old, _ = splitOld(looks, r, member("web", recreated), "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 10, 0}, sumLooks(old, "503"), "the old incarnation's series is the old pod's")
	assert.Equal(t, []float64{0, 0, 0, 0, 5}, sumLooks(moved, "503"))
}

// Every pod scraped at one address (one exporter for all, as a proxy
// behind a node-local agent may be): a StatefulSet pod recreated on the
// target begins its 503 series after the restart at an address its old
// incarnation had. The series is the new pod's once the old one's counters
// started again, never the old pod's: counted there, the revision's 5xx
// left it error-free, and it passed.
func TestANewIncarnationsFirst503AtTheOldAddressIsTheMovedPods(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	m := lives("web", "web-0", start, steps, life{0, 44, 200, 0, "exporter:9090"}, life{45, steps, 200, 0.3, "exporter:9090"})
	r := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	hist, looks := increases(m, hr, 1), increases(m, r, 20)
	recreated := pod("web-0", "1-26")
	recreated.CreatedAt = step(start, 45).Add(-5 * time.Second)
	moved, old, _ := splitOld(looks, r, member("web", recreated), "1-26", t0, t0, hist)
	assert.Equal(t, 0.0, sum(sumLooks(old, "503")), "no 5xx of the new pod is the old one's")
	assert.Equal(t, 0.3*200*16, sum(sumLooks(moved, "503")), "the new pod's 5xx from its first look")
	assert.Equal(t, 200.0*4, sum(sumLooks(old, "200")), "the old pod's four looks after the restart")
}

// sum adds up looks 1 on: look 0 is the range's baseline, which the
// replay never reads.
func sum(vs []float64) float64 {
	out := 0.0
	for _, v := range vs[1:] {
		out += v
	}
	return out
}

// A moved pod of a Deployment deleted after the wave is up (an HPA's
// scale-down, an eviction) is gone from the snapshot, and nothing else
// says it ran the target: its template hash does not (a pod the old
// ReplicaSet creates after the namespace was relabelled runs the target's
// proxy under the old hash), nor its name (a pod outside the workload may
// report it). Its looks then count for neither arm, and the reason says
// how many requests that left out; so do those of an old ReplicaSet's pod
// created after the restart and gone.
func TestAPodGoneFromTheSnapshotThatFirstServedAfterTheRestartIsLeftOut(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	var m model.Matrix
	m = append(m, lives("web", "web-6c8f9-aaaaa", start, steps, life{0, 40, 1000, 0.01, ""})...)
	m = append(m, lives("web", "web-6c8f9-bbbbb", start, steps, life{41, 44, 1000, 0.01, ""})...)
	m = append(m, lives("web", "web-7d4b5-ccccc", start, steps, life{41, 55, 1000, 0.015, ""})...)
	m = append(m, lives("web", "web-7d4b5-ddddd", start, steps, life{41, steps, 1000, 0.015, ""})...)
	newPod := func(name string) canary.Pod {
		p := pod(name, "1-26")
		p.CreatedAt, p.Labels = t0.Add(time.Second), map[string]string{"pod-template-hash": "7d4b5"}
		return p
	}
	ready := step(start, 42)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	before := wave(member("web", newPod("web-7d4b5-ccccc"), newPod("web-7d4b5-ddddd")))
	before.Analysis.ReadyAt = &ready
	v1 := g.Evaluate(context.Background(), before, step(start, 55).Add(16*time.Second))
	after := wave(member("web", newPod("web-7d4b5-ddddd")))
	after.Analysis.ReadyAt = &ready
	v2 := g.Evaluate(context.Background(), after, step(start, 56).Add(16*time.Second))
	require.Len(t, v1.Measurements, 1)
	require.Len(t, v2.Measurements, 1)
	assert.Contains(t, v1.Reason, "web: error ratio 1.50% (450/30000) (4000 requests of pods not told apart left out) against 1.00% (400/40000) before the restart; control: its own error ratio before the restart;")
	assert.Contains(t, v2.Reason, "web: error ratio 1.50% (240/16000) (19000 requests of pods not told apart left out) against 1.00% (400/40000) before the restart; control: its own error ratio before the restart;",
		"the deleted pod's 15 looks left out")
}

// A StatefulSet (OnDelete or RollingUpdate) recreates web-0 and web-1 on
// the broken target under the same names, and they are scraped at the
// addresses they had before the restart: a CNI that keeps a StatefulSet
// pod's IP (Kube-OVN, Spiderpool, Calico ipAddrs), an IP handed back out
// on the same node, or a PodMonitor that relabels instance to the pod's
// name. Their 200 series reset, and their 503 series begin at the old
// address after it: both are the moved pods', and the revision serving
// 30% of 5xx is never passed.
func TestARecreationAtTheSameAddressKeepsTheTargetsErrorsInTheMovedArm(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 81 // t0 is step 40
	var m model.Matrix
	m = append(m, lives("web", "web-0", start, steps, life{0, 42, 1000, 0, "10.0.0.1:15020"}, life{43, steps, 1000, 0.3, "10.0.0.1:15020"})...)
	m = append(m, lives("web", "web-1", start, steps, life{0, 41, 1000, 0, "10.0.0.2:15020"}, life{42, steps, 1000, 0.3, "10.0.0.2:15020"})...)
	w0, w1 := pod("web-0", "1-26"), pod("web-1", "1-26")
	w0.CreatedAt, w1.CreatedAt = step(start, 43).Add(-5*time.Second), step(start, 42).Add(-5*time.Second)
	ready := step(start, 44)
	wv := wave(member("StatefulSet/web", w0, w1))
	wv.Analysis.ReadyAt = &ready

	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), wv, step(start, steps))
	t.Logf("%s: %s", v.Result, v.Reason)
	assert.NotEqual(t, canary.ResultPass, v.Result, "every pod on the target serves 30%% of 5xx, none before: %s", v.Reason)
}

// The same, at splitOld: the recreated pod's 503s after its creation are
// the moved pod's.
func TestANewSeriesAtAnOldAddressAfterCreationIsNotTheOldPods(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 50
	m := lives("web", "web-0", start, steps, life{0, 42, 1000, 0, "10.0.0.1:15020"}, life{43, steps, 1000, 0.3, "10.0.0.1:15020"})
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hist, looks := increases(m, hr, 20), increases(m, lr, 20)
	p := pod("web-0", "1-26")
	p.CreatedAt = step(start, 43).Add(-5 * time.Second)
	moved, old, _ := splitOld(looks, lr, member("StatefulSet/web", p), "1-26", t0, t0, hist)
	// Looks 3.. (steps 43..49) are the recreated pod's, created before step 43.
	assert.Zero(t, sumLooks(old, "503")[5], "a 503 of the pod on the target, after its creation, filed as the old pod's")
	assert.NotZero(t, sumLooks(moved, "503")[5], "the moved pod's 503s are missing from the moved arm")
}

// The wave's ReadyAt a few seconds ahead of the judging replica's clock
// (replicas' clocks apart, or an edited status): series without a pod
// label are not yet the moved pods', so the nine old pods' 0.1% never
// dilutes the broken pod's 3% under the floor.
func TestAReadyAtAheadOfNowDoesNotCountTheOldPodsAsMoved(t *testing.T) {
	m, r := onDelete(false)
	now := r.End.Add(15 * time.Second)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), onDeleteWave(now.Add(2*time.Second)), now)
	t.Logf("%s: %s", v.Result, v.Reason)
	assert.NotEqual(t, canary.ResultPass, v.Result, v.Reason)
}

// Without instance labels, a recreated StatefulSet pod's old incarnation
// whose last scrape (2s before the new pod's creation, a draining proxy's
// 503s) shows at the step after its successor's CreationTimestamp stays
// the old pod's: the successor's counts begin at its first reset.
func TestAnOldIncarnationsLastScrapeRoundedPastCreationIsNotTheRevisions(t *testing.T) {
	start := t0.Add(-time.Minute)
	r := promv1.Range{Start: t0, End: t0.Add(time.Minute), Step: 15 * time.Second}
	hist := increases(model.Matrix{sampled("web", "web-0", "503", start, 0, 10, 20, 30, 40)}, promv1.Range{Start: start, End: t0, Step: 15 * time.Second}, 1)
	s := sampled("web", "web-0", "503", t0, 40, 50, 60, 70, 5)
	// The old incarnation's last scrape at t0+40s (put at the step t0+45s),
	// the new pod created at t0+42s, first scraped at t0+60s.
	s.Values[3].Timestamp = model.TimeFromUnixNano(t0.Add(40 * time.Second).UnixNano())
	looks := increases(model.Matrix{s}, r, 1)
	p := pod("web-0", "1-26")
	p.CreatedAt = t0.Add(42 * time.Second)
	moved, old, _ := splitOld(looks, r, member("web", p), "1-26", t0, t0, hist)
	assert.Equal(t, []float64{0, 10, 10, 10, 0}, sumLooks(old, "503"), "the old incarnation's last scrape")
	assert.Equal(t, []float64{0, 0, 0, 0, 5}, sumLooks(moved, "503"))
}

// A pass reads every look against the history alone: its reason and its
// measurement name the history as its control, never the old pods.
func TestAPassDoesNotNameTheOldPodsAsItsControl(t *testing.T) {
	m, r := rolling(6, 30, 300, 0)
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), rollingWave(t0.Add(90*time.Second)), r.End.Add(15*time.Second))
	t.Logf("%s: %s", v.Result, v.Reason)
	if v.Result != canary.ResultPass {
		t.Skipf("no pass to read: %s", v.Reason)
	}
	assert.NotContains(t, v.Measurements[0].Control, "its pods not yet replaced", "a pass stands on the history alone")
	assert.NotContains(t, v.Reason, "against its pods not yet replaced's")
}

// An old pod (gone from the snapshot by the time the gate runs, as every
// replaced pod is) scraped with an instance label whose proxy restarted
// in place during the rollout (an OOM-killed istio-proxy: same pod, same
// address, still on the source): its 200s and its first 503s after the
// restart stay in one arm, never its 503s without its 200s.
func TestAnOldPodsInPlaceProxyRestartKeepsItsSeriesTogether(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 50
	m := lives("web", "web-old", start, steps, life{0, 42, 1000, 0, "10.0.0.1:15020"}, life{43, steps, 1000, 0.01, "10.0.0.1:15020"})
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hist, looks := increases(m, hr, 20), increases(m, lr, 20)
	_, old, _ := splitOld(looks, lr, member("web", pod("web-new", "1-26")), "1-26", t0, t0, hist)
	errs, reqs := sumLooks(old, "503"), sumLooks(old, "200")
	t.Logf("old arm, 503: %v, 200: %v", errs, reqs)
	assert.Equal(t, errs[5] > 0, reqs[5] > 0, "an arm holds a pod's 503s only with its 200s")
}

// Prometheus's clock 20s behind the agent's (Record.At) and the
// apiserver's (CreatedAt): a new Deployment pod's first scrape carries a
// timestamp at or before the restart. Once it was created, as the cluster
// says, its counts are the moved pod's.
func TestANewPodScrapedBeforeTheRestartByPrometheusClockIsMovedOnceCreated(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 50
	m := lives("web", "web-new", start, steps, life{40, steps, 1000, 0.3, "10.0.0.9:15020"})
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hist, looks := increases(m, hr, 20), increases(m, lr, 20)
	p := pod("web-new", "1-26")
	p.CreatedAt = t0.Add(2 * time.Second)
	moved, old, _ := splitOld(looks, lr, member("web", p), "1-26", t0, t0, hist)
	assert.Zero(t, sumLooks(old, "503")[5], "the new pod's 503s filed as an old pod's")
	assert.NotZero(t, sumLooks(moved, "503")[5])
}

// A workload of the wave with no series at all (idle) while the
// namespace has others: its check waits, and nothing breaks.
func TestAnIdleWorkloadWaitsForEvidence(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	m := lives("ratings", "ratings-1", start, steps, life{0, steps, 100, 0, ""})
	r := promv1.Range{Start: start, End: step(start, steps-1), Step: 15 * time.Second}
	ready := step(start, 42)
	wv := wave(member("web", pod("web-0", "1-26")))
	wv.Analysis.ReadyAt = &ready
	wv.Unmoved = []string{"ratings"}
	g := newSequentialGate(t, &rangeProm{matrix: m})
	var v canary.Verdict
	require.NotPanics(t, func() { v = g.Evaluate(context.Background(), wv, r.End.Add(15*time.Second)) })
	assert.Equal(t, canary.ResultPending, v.Result, v.Reason)
	assert.Contains(t, v.Reason, "web: error ratio 0.00% (0/0) against 0.00% (0/0) before the restart")
}

// A StatefulSet pod recreated on the broken target twice, A -> B -> A (an
// IP handed back out): the last incarnation's first 503 series at A,
// begun after the pod was scraped at B, is never the old pod's, and the
// revision serving 30% of 5xx is not passed.
func TestAPodBackAtAnOldAddressAfterAnotherIsNotTheOldPod(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 101 // t0 is step 40
	A, B := "10.0.0.1:15020", "10.0.0.9:15020"
	m := lives("web", "web-0", start, steps,
		life{0, 41, 1000, 0, A}, life{43, 46, 1000, 0.3, B}, life{48, steps, 1000, 0.3, A})
	w0 := pod("web-0", "1-26")
	w0.CreatedAt = step(start, 48).Add(-5 * time.Second)
	ready := step(start, 49)
	wv := wave(member("StatefulSet/web", w0))
	wv.Analysis.ReadyAt = &ready
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), wv, step(start, steps))
	t.Logf("%s: %s", v.Result, v.Reason)
	assert.NotEqual(t, canary.ResultPass, v.Result, "web-0 serves 30%% of 5xx on the target, none before: %s", v.Reason)

	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hist, looks := increases(m, hr, 20), increases(m, lr, 20)
	_, old, _ := splitOld(looks, lr, wv.Workloads[0], "1-26", t0, ready, hist)
	assert.Zero(t, sum(sumLooks(old, "503")), "the target incarnation's 5xx filed as the old pod's")
}

// A DaemonSet's old pod that served nothing before the restart, then
// served (and drained) on the source before it was replaced: gone from
// the snapshot, it is never a moved pod.
func TestAnIdleOldDaemonSetPodIsNeverAMovedOne(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	var m model.Matrix
	m = append(m, lives("agent", "agent-old1", start, steps, life{0, 41, 100, 0, "10.0.0.1:15020"})...)
	m = append(m, lives("agent", "agent-old2", start, steps, life{43, 46, 100, 0.5, "10.0.0.2:15020"})...) // idle before, drains with 503s
	m = append(m, lives("agent", "agent-new1", start, steps, life{42, steps, 100, 0, "10.0.0.3:15020"})...)
	n1, n2 := pod("agent-new1", "1-26"), pod("agent-new2", "1-26")
	n1.CreatedAt, n2.CreatedAt = step(start, 41), step(start, 47)
	w := member("DaemonSet/agent", n1, n2)
	w.Workload.Kind = canary.KindDaemonSet
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hist, looks := increases(m, hr, 20), increases(m, lr, 20)
	moved, _, _ := splitOld(looks, lr, w, "1-26", t0, step(start, 48), hist)
	assert.Zero(t, sum(sumLooks(moved, "503")), "the old (source) pod's 5xx filed as the moved pods'")
}

// The namespace label is switched before the restart, so a pod the old
// ReplicaSet creates after it (an eviction's replacement, proportional
// scaling) runs the target's proxy under the old template hash. Gone from
// the snapshot, it is never the control.
func TestAPodUnderTheOldTemplateHashOnTheTargetIsNeverTheControl(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 61
	var m model.Matrix
	m = append(m, lives("web", "web-6c8f9-aaaaa", start, steps, life{0, 44, 1000, 0, ""})...)
	m = append(m, lives("web", "web-6c8f9-zzzzz", start, steps, life{42, 46, 1000, 0.3, ""})...) // replacement, target proxy
	m = append(m, lives("web", "web-7d4b5-ccccc", start, steps, life{42, steps, 1000, 0.3, ""})...)
	p := pod("web-7d4b5-ccccc", "1-26")
	p.CreatedAt, p.Labels = t0.Add(time.Second), map[string]string{"pod-template-hash": "7d4b5"}
	w := member("web", p)
	hr := promv1.Range{Start: start, End: t0, Step: 15 * time.Second}
	lr := promv1.Range{Start: t0, End: step(start, steps-1), Step: 15 * time.Second}
	hist, looks := increases(m, hr, 20), increases(m, lr, 20)
	_, old, _ := splitOld(looks, lr, w, "1-26", t0, step(start, 48), hist)
	assert.Zero(t, sum(sumLooks(old, "503")), "a target proxy's 5xx in the old arm")
}

// A bare pod (no owner: never in the snapshot) named like the moved
// ReplicaSet's, reporting destination_workload=web (Istio derives it from
// an ownerless ReplicaSet web-7d4b5 too): its healthy traffic never
// counts as the moved pods', to dilute a broken revision under the floor.
func TestABarePodNamedLikeTheMovedOnesNeverDilutesThem(t *testing.T) {
	start, steps := t0.Add(-10*time.Minute), 101
	var m model.Matrix
	m = append(m, lives("web", "web-6c8f9-aaaaa", start, steps, life{0, 41, 1000, 0, ""})...)
	m = append(m, lives("web", "web-7d4b5-ccccc", start, steps, life{42, steps, 1000, 0.03, ""})...)
	m = append(m, lives("web", "web-7d4b5-evil1", start, steps, life{42, steps, 100000, 0, ""})...)
	p := pod("web-7d4b5-ccccc", "1-26")
	p.CreatedAt, p.Labels = t0.Add(time.Second), map[string]string{"pod-template-hash": "7d4b5"}
	ready := step(start, 43)
	wv := wave(member("web", p))
	wv.Analysis.ReadyAt = &ready
	g := newSequentialGate(t, &rangeProm{matrix: m})
	v := g.Evaluate(context.Background(), wv, step(start, steps))
	t.Logf("%s: %s", v.Result, v.Reason)
	assert.NotEqual(t, canary.ResultPass, v.Result, v.Reason)
}
