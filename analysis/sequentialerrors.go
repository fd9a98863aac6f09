package analysis

import (
	"math"

	"github.com/meshwave/meshwave/analysis/sequential"
)

// SequentialMeasure says what a sequential check counts as a request gone
// wrong, and how it reads that from Prometheus.
type SequentialMeasure interface {
	// Name is the check's name: the threshold check's it replaces.
	Name() string
	// query is the range query of the measure's counters over selector,
	// summed by the labels of by.
	query(selector, by string) string
	// cut reads the looks before the restart (history marks them) once a
	// run, and returns how that run counts a look for the named
	// workloads: the requests they served and how many went wrong, with
	// what the share is called in reasons.
	cut(inc map[seriesKey][]float64, history []bool, steps int) (func(names map[string]bool) []sequential.Counts, string, error)
}

// SequentialErrors counts 5xx answers: the error check.
type SequentialErrors struct{}

// Name implements SequentialMeasure.
func (SequentialErrors) Name() string { return "error-rate" }

// The two counters of SequentialErrors' query.
const (
	seriesRequests = "requests"
	seriesErrors   = "errors"
)

func (SequentialErrors) query(selector, by string) string {
	requests := "sum by (" + by + ") (istio_requests_total{" + selector + "})"
	errs := "sum by (" + by + ") (istio_requests_total{" + selector + `,response_code=~"5.."})`
	return tag(requests, seriesRequests) + " or " + tag(errs, seriesErrors)
}

func (SequentialErrors) cut(inc map[seriesKey][]float64, _ []bool, steps int) (func(map[string]bool) []sequential.Counts, string, error) {
	return func(names map[string]bool) []sequential.Counts {
		return lookCounts(inc, names, steps, seriesRequests, func(kind string) bool { return kind == seriesErrors })
	}, "error ratio", nil
}

// lookCounts adds up the counters of the named workloads, look by look:
// the requests from the counters of kind total, gone wrong from those
// whose kind wrong accepts.
func lookCounts(inc map[seriesKey][]float64, names map[string]bool, steps int, total string, wrong func(kind string) bool) []sequential.Counts {
	out := make([]sequential.Counts, steps)
	for key, vs := range inc {
		if !names[key.workload] {
			continue
		}
		for k, v := range vs {
			if key.kind == total {
				out[k].Requests += v
			}
			if wrong(key.kind) {
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
