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
	// Each bucket's count over the history, every workload of the query
	// together, by its bound's value: Prometheus writes a bound "100" or
	// "100.0" depending on its version and the scrape's format.
	seen := map[float64]float64{}
	for _, c := range history {
		le, ok := bucketBound(c.le)
		if !ok {
			continue
		}
		for _, v := range c.looks {
			seen[le] += v
		}
	}
	total := seen[math.Inf(1)]
	if total <= 0 {
		return nil, "", errors.New("no request before the restart to place the p99 on")
	}
	var bounds []float64
	for le := range seen {
		if !math.IsInf(le, 1) {
			bounds = append(bounds, le)
		}
	}
	if len(bounds) == 0 {
		return nil, "", errors.New("the request-duration histogram has no finite bucket")
	}
	slices.Sort(bounds)
	at := bounds[len(bounds)-1]
	for _, b := range bounds {
		if total-seen[b] <= (1-l.Quantile)*total {
			at = b
			break
		}
	}
	return func(cs []counter, names map[string]bool) []sequential.Counts {
		// Slower than the bound: every request less those in its bucket.
		all := lookCounts(cs, names, func(c counter) (bool, bool) { le, ok := bucketBound(c.le); return ok && math.IsInf(le, 1), false })
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
