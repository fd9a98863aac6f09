package analysis

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/meshwave/meshwave/canary"
)

// fuzzWorkloads are the names a fuzzed vector labels its series with: the
// wave's members come first, then a workload outside the wave.
var fuzzWorkloads = []string{"cart", "api.v1", "web", "other"}

// fuzzValues are the values a series byte picks; the last reads the next
// eight bytes as a float64.
var fuzzValues = []float64{0, 0.01, 0.05, 0.0500001, 0.3, 1, 49, 50, 600, -0.5, math.NaN(), math.Inf(1), math.Inf(-1),
	math.MaxFloat64, math.SmallestNonzeroFloat64, math.Copysign(0, -1)}

// decodeVector reads a wave and a query result from fuzz bytes: the first
// byte is the number of members (0 to 3); then each series is three bytes
// and, for a raw value, eight more: the workload (low four bits; high four,
// a pod label), the kind (low four bits; the high bit adds the pod label)
// and the value.
// Series may lack the workload label or the series label, carry unknown
// kinds, repeat, or be nil.
func decodeVector(data []byte) (canary.WaveUnderTest, model.Vector) {
	members := 0
	if len(data) > 0 {
		members, data = int(data[0]%4), data[1:]
	}
	var ms []canary.WaveWorkload
	for _, n := range fuzzWorkloads[:members] {
		ms = append(ms, member(n, pod(n+"-1", "1-26")))
	}
	var vec model.Vector
	for len(data) >= 3 {
		w, k, sel := data[0], data[1], data[2]
		data = data[3:]
		kind := int(k&0x0f) % 7
		if kind == 6 {
			vec = append(vec, nil)
			continue
		}
		v := fuzzValues[int(sel)%(len(fuzzValues)+1)%len(fuzzValues)]
		if int(sel)%(len(fuzzValues)+1) == len(fuzzValues) && len(data) >= 8 {
			v, data = math.Float64frombits(binary.LittleEndian.Uint64(data)), data[8:]
		}
		m := model.Metric{}
		if i := int(w&0x0f) % (len(fuzzWorkloads) + 1); i < len(fuzzWorkloads) {
			m["destination_workload"] = model.LabelValue(fuzzWorkloads[i])
		}
		if name := []string{"value", "baseline", "requests", "junk", ""}[kind%5]; name != "" {
			m[seriesLabel] = model.LabelValue(name)
		}
		if k&0x80 != 0 {
			m["pod"] = model.LabelValue(fmt.Sprint(w >> 4))
		}
		vec = append(vec, &model.Sample{Metric: m, Value: model.SampleValue(v)})
	}
	return wave(ms...), vec
}

// expectation is what the rules say of one workload, worked out
// independently of Judge: ok when it must pass, bad when it must fail.
func expectation(c Check, vec model.Vector, name string) (ok, bad bool) {
	var values, baselines, requests []float64
	for _, s := range vec {
		if s == nil || string(s.Metric["destination_workload"]) != name {
			continue
		}
		switch s.Metric[seriesLabel] {
		case "value":
			values = append(values, float64(s.Value))
		case "baseline":
			baselines = append(baselines, float64(s.Value))
		case "requests":
			requests = append(requests, float64(s.Value))
		}
	}
	sum := 0.0
	for _, r := range slices.Sorted(slices.Values(requests)) {
		sum += r
	}
	if len(requests) == 0 || math.IsNaN(sum) || math.IsInf(sum, 0) || sum < c.MinRequests || len(values) == 0 {
		return false, false
	}
	base := math.Inf(-1)
	for _, b := range baselines {
		if !math.IsNaN(b) && !math.IsInf(b, 0) && b > base {
			base = b
		}
	}
	ok = true
	for _, v := range values {
		over := math.IsInf(v, 1) || v > c.Threshold
		overBase := c.Tolerance > 0 && base > 0 && v > base*(1+c.Tolerance)
		unsure := math.IsNaN(v) || math.IsInf(v, -1) || v < 0
		if !unsure && (over || overBase) {
			bad = true
		}
		if unsure || over || overBase {
			ok = false
		}
	}
	return ok, bad
}

// watchdog crashes the fuzzing process, which saves the input as a
// failure, when one input takes longer than judging any vector should: a
// loop the fuzzer would otherwise only show as a stall.
func watchdog(input []byte) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			panic(fmt.Sprintf("one input took over 10s: %q", input))
		}
	}()
	return func() { close(done) }
}

// FuzzJudge judges arbitrary query results: any labels and values (NaN,
// infinities, negative zero), duplicates, missing series and unknown
// kinds, for any check numbers. Judge must not panic, must return a
// verdict the status can hold, with one measurement per member, and must
// pass, fail or stay inconclusive exactly as the rules say.
func FuzzJudge(f *testing.F) {
	f.Add(0.05, 1.0, 50.0, []byte{1, 0, 0, 4, 0, 2, 8})
	f.Add(0.05, 1.0, 50.0, []byte{1, 0, 0x80, 0, 0x10, 0x80, 4, 0, 2, 8})
	f.Add(1000.0, 0.5, 50.0, []byte{2, 0, 0, 11, 0, 2, 8, 1, 0, 10, 1, 2, 8, 1, 1, 1})
	f.Add(0.05, 0.0, 0.0, []byte{3, 5, 0, 1, 2, 3, 16, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f})
	f.Fuzz(func(t *testing.T, threshold, tolerance, minRequests float64, data []byte) {
		defer watchdog(data)()
		c := ErrorRateCheck(threshold, tolerance, minRequests)
		g, err := NewMetricGate(c, nil, time.Minute, time.Second, time.Minute, 0)
		if err != nil {
			if nonNegative(threshold) && nonNegative(tolerance) && nonNegative(minRequests) {
				t.Fatalf("usable numbers refused: %v", err)
			}
			return
		}
		w, vec := decodeVector(data)
		v := g.Judge(w, vec)

		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("the status cannot hold the verdict: %v", err)
		}
		if len(v.Measurements) != len(w.Workloads) {
			t.Fatalf("%d measurements for %d workloads", len(v.Measurements), len(w.Workloads))
		}
		if v.Reason == "" {
			t.Fatal("a verdict without a reason")
		}
		allOK, anyBad := len(w.Workloads) > 0, false
		var mustFail []string
		for _, m := range w.Workloads {
			ok, bad := expectation(c, vec, m.Name)
			allOK = allOK && ok
			if bad {
				anyBad = true
				mustFail = append(mustFail, m.Name)
			}
		}
		var failed []string
		for _, f := range v.Failed {
			failed = append(failed, f.Name)
		}
		switch {
		case anyBad && (v.Result != canary.ResultFail || !slices.Equal(failed, mustFail)):
			t.Fatalf("must fail %v, got %s failing %v: %s", mustFail, v.Result, failed, v.Reason)
		case !anyBad && allOK && v.Result != canary.ResultPass:
			t.Fatalf("must pass, got %s: %s", v.Result, v.Reason)
		case !anyBad && !allOK && v.Result != canary.ResultInconclusive:
			t.Fatalf("must be inconclusive, got %s: %s", v.Result, v.Reason)
		}
	})
}
