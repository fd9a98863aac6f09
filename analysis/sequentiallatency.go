package analysis

import (
	"cmp"
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

// infBucket is the histogram's last bucket: every request.
const infBucket = "+Inf"

func (l SequentialLatency) prepare(history []counter) (func([]counter, map[string]bool) []sequential.Counts, string, error) {
	// Each bucket's count over the history, every workload of the query
	// together.
	seen := map[string]float64{}
	for _, c := range history {
		for _, v := range c.looks {
			seen[c.le] += v
		}
	}
	total := seen[infBucket]
	if total <= 0 {
		return nil, "", errors.New("no request before the restart to place the p99 on")
	}
	type bound struct {
		text string
		ms   float64
	}
	var bounds []bound
	for le := range seen {
		ms, err := strconv.ParseFloat(le, 64)
		if err == nil && !math.IsInf(ms, 0) && !math.IsNaN(ms) {
			bounds = append(bounds, bound{le, ms})
		}
	}
	if len(bounds) == 0 {
		return nil, "", errors.New("the request-duration histogram has no finite bucket")
	}
	slices.SortFunc(bounds, func(a, b bound) int { return cmp.Compare(a.ms, b.ms) })
	at := bounds[len(bounds)-1]
	for _, b := range bounds {
		if total-seen[b.text] <= (1-l.Quantile)*total {
			at = b
			break
		}
	}
	return func(cs []counter, names map[string]bool) []sequential.Counts {
		// Slower than the bound: every request less those in its bucket.
		all := lookCounts(cs, names, func(c counter) (bool, bool) { return c.le == infBucket, false })
		fast := lookCounts(cs, names, func(c counter) (bool, bool) { return c.le == at.text, false })
		for k := range all {
			all[k].Errors = math.Max(0, all[k].Requests-fast[k].Requests)
		}
		return all
	}, fmt.Sprintf("share slower than %sms", at.text), nil
}
