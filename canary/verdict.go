package canary

import (
	"fmt"
	"strings"
	"time"
)

// Result is a gate's answer.
type Result string

const (
	// ResultPass: the gate is satisfied.
	ResultPass Result = "Pass"
	// ResultFail: the gate is violated; the failure policy applies.
	ResultFail Result = "Fail"
	// ResultInconclusive: the gate could not tell (no data, a source
	// unreachable). It is never taken as a Pass; too many in a row pause.
	ResultInconclusive Result = "Inconclusive"
	// ResultPending: not decided yet (a rollout in progress, a bake time
	// not over); ask again after RetryAfter.
	ResultPending Result = "Pending"
)

// Measurement is a number a gate measured, with what it was held against.
type Measurement struct {
	// Check names the measurement, e.g. "error-rate".
	Check    string  `json:"check,omitempty"`
	Workload string  `json:"workload,omitempty"`
	Value    float64 `json:"value"`
	// Threshold is the limit; Baseline the value before the restart.
	Threshold *float64 `json:"threshold,omitempty"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Result    Result   `json:"result,omitempty"`
	// Evidence is a sequential check's evidence against a healthy
	// workload, and EvidenceBound the value at which it fails.
	Evidence      *float64 `json:"evidence,omitempty"`
	EvidenceBound *float64 `json:"evidenceBound,omitempty"`
	// Control is what a sequential check compared the workload with.
	Control string `json:"control,omitempty"`
}

// Verdict is a gate's answer for a wave, with a reason a person can read.
type Verdict struct {
	Gate         string        `json:"gate"`
	Result       Result        `json:"result"`
	Reason       string        `json:"reason"`
	Measurements []Measurement `json:"measurements,omitempty"`
	// Failed names the workloads that failed, with why.
	Failed []WorkloadState `json:"failed,omitempty"`
	// RetryAfter is when to ask again, for Pending and Inconclusive.
	RetryAfter time.Duration `json:"-"`
	At         time.Time     `json:"at"`
	// Analysis marks the metric checks, which run after the wave is up and
	// need consecutive passes.
	Analysis bool `json:"analysis,omitempty"`
	// Checked marks a verdict from a check against an outside system that
	// ran now; the agent records when, so the next one waits its interval.
	Checked bool `json:"-"`
	// Deferred marks a Pending verdict of a check that was not due.
	Deferred bool `json:"-"`
	// Final marks a metric check's verdict that more runs would not change:
	// a sequential check decides once its evidence crosses its bound, so
	// its pass needs no other pass in a row.
	Final bool `json:"final,omitempty"`
}

func (v Verdict) String() string {
	return fmt.Sprintf("%s %s: %s", v.Gate, strings.ToLower(string(v.Result)), v.Reason)
}

// FirstNotPassed returns the first verdict that is not a Pass, or
// ok=false when all passed.
func FirstNotPassed(verdicts []Verdict) (Verdict, bool) {
	for _, v := range verdicts {
		if v.Result != ResultPass {
			return v, true
		}
	}
	return Verdict{}, false
}
