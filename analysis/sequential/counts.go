package sequential

import (
	"fmt"
	"math"
)

// Counts are the requests and the errors among them that one arm served
// between two looks.
type Counts struct {
	Requests, Errors float64
}

// Look is what one scrape interval added on both arms: the treatment (the
// wave's moved pods) and the control (pods still on the source revision,
// over the same interval).
type Look struct {
	Treatment, Control Counts
	// Own is what the treatment's own workload served over the interval on
	// its pods not yet replaced (a rolling restart in progress, an OnDelete
	// workload between evictions). Only a test against its history reads
	// it: there, a look in which both the moved pods and these served is
	// held to them, and the others to the history's control.
	Own Counts
}

// valid reports what is wrong with counts that no counter could give.
func (c Counts) valid() error {
	switch {
	case !finiteNonNegative(c.Requests) || !finiteNonNegative(c.Errors):
		return fmt.Errorf("requests %g and errors %g must be finite and not negative", c.Requests, c.Errors)
	case c.Errors > c.Requests:
		return fmt.Errorf("%g errors among %g requests", c.Errors, c.Requests)
	}
	return nil
}

// Add is the two counts together.
func (c Counts) Add(o Counts) Counts {
	return Counts{Requests: c.Requests + o.Requests, Errors: c.Errors + o.Errors}
}

func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
