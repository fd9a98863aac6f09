package analysis

import (
	"math"
	"strings"

	"github.com/meshwave/meshwave/analysis/sequential"
)

// SequentialMeasure says what a sequential check counts as a request gone
// wrong, and how it reads that from Prometheus.
type SequentialMeasure interface {
	// Name is the check's name: the threshold check's it replaces.
	Name() string
	// query is the range query of the measure's counters over selector.
	query(selector string) string
	// prepare reads the history's counters once a run, and returns how
	// that run counts the looks of the named workloads (the requests they
	// served and how many went wrong), with what the share is called in
	// reasons.
	prepare(history []counter) (count func(cs []counter, names map[string]bool) []sequential.Counts, noun string, err error)
}

// SequentialErrors counts 5xx answers: the error check.
type SequentialErrors struct{}

// Name implements SequentialMeasure.
func (SequentialErrors) Name() string { return "error-rate" }

func (SequentialErrors) query(selector string) string {
	return "istio_requests_total{" + selector + "}"
}

func (SequentialErrors) prepare([]counter) (func([]counter, map[string]bool) []sequential.Counts, string, error) {
	return func(cs []counter, names map[string]bool) []sequential.Counts {
		return lookCounts(cs, names, func(c counter) (served, wrong bool) { return true, strings.HasPrefix(c.code, "5") })
	}, "error ratio", nil
}

// lookCounts adds up the counters of the named workloads, look by look:
// each counter that of says was served adds to the requests, each it says
// went wrong to those gone wrong.
func lookCounts(cs []counter, names map[string]bool, of func(counter) (served, wrong bool)) []sequential.Counts {
	var out []sequential.Counts
	for _, c := range cs {
		if out == nil {
			out = make([]sequential.Counts, len(c.looks))
		}
		if !names[c.workload] {
			continue
		}
		served, wrong := of(c)
		for k, v := range c.looks {
			if served {
				out[k].Requests += v
			}
			if wrong {
				out[k].Errors += v
			}
		}
	}
	// A scrape can land between two counters' samples: never more gone
	// wrong than served in a look, nor fewer than none.
	for k := range out {
		out[k].Errors = math.Max(0, math.Min(out[k].Errors, out[k].Requests))
	}
	return out
}
