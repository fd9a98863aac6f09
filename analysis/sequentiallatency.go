package analysis

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/meshwave/meshwave/analysis/sequential"
)

// SequentialLatency counts the answers slower than the bound of Istio's
// request-duration histogram at which, before the restart, no more than
// 1 - Quantile of the requests of the wave's workloads and of those not
// yet moved were slower: the p99's bucket for 0.99. A shift of the moved
// workloads towards slower buckets raises their share beyond it, and the
// test of package sequential holds that share to the control's, as it
// holds an error ratio. The bound is chosen from the history alone, before
// any look.
type SequentialLatency struct {
	Quantile float64
}

// Name implements SequentialMeasure.
func (SequentialLatency) Name() string { return "latency-p99" }

func (SequentialLatency) query(selector string) string {
	return "istio_request_duration_milliseconds_bucket{" + selector + "}"
}

func (l SequentialLatency) prepare(history []counter) (func([]counter, map[string]bool) []sequential.Counts, string, error) {
	// Each histogram's bounds, and each bound's count over the history by
	// its value: Prometheus writes a bound "100" or "100.0" depending on
	// its version and the scrape's format.
	bounds := map[string]map[float64]float64{} // group -> bound -> count
	for _, c := range history {
		le, ok := bucketBound(c.le)
		if !ok {
			continue
		}
		if bounds[c.group] == nil {
			bounds[c.group] = map[float64]float64{}
		}
		for _, v := range c.looks {
			bounds[c.group][le] += v
		}
	}
	// The bound is chosen among those every histogram that served has: a
	// workload whose proxies were given buckets of their own
	// (sidecar.istio.io/statsHistogramBuckets) would otherwise read every
	// answer as slower than a bound it has no bucket at.
	var common map[float64]bool
	seen := map[float64]float64{}
	for _, b := range bounds {
		if b[math.Inf(1)] <= 0 {
			continue
		}
		has := map[float64]bool{}
		for le, n := range b {
			has[le] = true
			seen[le] += n
		}
		if common == nil {
			common = has
			continue
		}
		for le := range common {
			if !has[le] {
				delete(common, le)
			}
		}
	}
	total := seen[math.Inf(1)]
	if total <= 0 {
		return nil, "", errors.New("no request before the restart to place the p99 on")
	}
	var finite []float64
	for le := range common {
		if !math.IsInf(le, 1) {
			finite = append(finite, le)
		}
	}
	if len(finite) == 0 {
		return nil, "", errors.New("the request-duration histograms of the workloads share no finite bucket bound")
	}
	slices.Sort(finite)
	at := finite[len(finite)-1]
	for _, b := range finite {
		if total-seen[b] <= (1-l.Quantile)*total {
			at = b
			break
		}
	}
	return func(cs []counter, names map[string]bool) []sequential.Counts {
		// Only histograms with a bucket at the bound count: slower than it
		// is every request less those in its bucket.
		at0 := map[string]bool{}
		for _, c := range cs {
			if le, ok := bucketBound(c.le); ok && le == at {
				at0[c.group] = true
			}
		}
		all := lookCounts(cs, names, func(c counter) (bool, bool) {
			le, ok := bucketBound(c.le)
			return ok && math.IsInf(le, 1) && at0[c.group], false
		})
		fast := lookCounts(cs, names, func(c counter) (bool, bool) { le, ok := bucketBound(c.le); return ok && le == at, false })
		for k := range all {
			all[k].Errors = math.Max(0, all[k].Requests-fast[k].Requests)
		}
		return all
	}, fmt.Sprintf("share slower than %sms", strconv.FormatFloat(at, 'g', -1, 64)), nil
}

// bucketBound reads a bucket's le label: "+Inf" and "100.0" included.
func bucketBound(le string) (float64, bool) {
	v, err := strconv.ParseFloat(le, 64)
	return v, err == nil && !math.IsNaN(v)
}
