package main

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/analysis/sequential"
	"github.com/meshwave/meshwave/canary"
)

// outcome is how a mode ended a run: Fail, Pass, or Continue when it
// stopped without a verdict (the sequential mode at its maximum duration,
// today's paused after too many inconclusive runs); at is when, in
// seconds after the wave was up.
type outcome struct {
	decision sequential.Decision
	at       int
}

// sequentialMode looks after every scrape until a verdict or the last
// look, against the control's pods at the same time.
func sequentialMode(test sequential.ErrorTest, st stream) (outcome, error) {
	e, err := test.Start()
	if err != nil {
		return outcome{}, err
	}
	return replay(e, st)
}

// historyMode is the sequential check as the agent's gate runs it: the
// control is the history before the restart (the other workloads' split
// then, or the workload's own error ratio then), and the looks are held
// to it.
func historyMode(test sequential.ErrorTest, st stream) (outcome, error) {
	e, err := test.StartAgainstHistory(st.history)
	if err != nil {
		return outcome{}, err
	}
	return replay(e, st)
}

func replay(e *sequential.ErrorProcess, st stream) (outcome, error) {
	for i, l := range st.looks {
		if err := e.Observe(l); err != nil {
			return outcome{}, err
		}
		if d := e.Decision(); d != sequential.Continue {
			return outcome{decision: d, at: (i + 1) * lookSeconds}, nil
		}
	}
	return outcome{decision: sequential.Continue, at: len(st.looks) * lookSeconds}, nil
}

// thresholdMode is today's metric check at the agent's defaults, judged by
// the agent's own code: the error-rate check (5% threshold, +100% over the
// baseline, 50 requests at least) over a one-minute window, first run a
// one-minute bake after the wave is up and every 30 s after; two passes in
// a row pass the wave, a fail fails it, three inconclusive runs in a row
// pause it.
type thresholdMode struct {
	gate                              *analysis.MetricGate
	wave                              canary.WaveUnderTest
	bake, interval, window            int // in looks
	requiredPasses, inconclusiveLimit int
}

func newThresholdMode() (thresholdMode, error) {
	def := canary.DefaultConfig()
	const bake, interval, window = time.Minute, 30 * time.Second, time.Minute
	gate, err := analysis.NewMetricGate(analysis.ErrorRateCheck(0.05, 1.0, 50), nil, bake, interval, window, 10*time.Second)
	if err != nil {
		return thresholdMode{}, err
	}
	return thresholdMode{
		gate: gate,
		wave: canary.WaveUnderTest{Namespace: "study", Wave: 1,
			Workloads: []canary.WaveWorkload{{Workload: canary.Workload{Name: workload}}}},
		bake: int(bake.Seconds()) / lookSeconds, interval: int(interval.Seconds()) / lookSeconds,
		window: int(window.Seconds()) / lookSeconds, requiredPasses: def.RequiredPasses, inconclusiveLimit: def.InconclusiveLimit,
	}, nil
}

const workload = "reviews"

func (m thresholdMode) run(st stream) (outcome, error) {
	passes, unsure := 0, 0
	for t := m.bake; t <= len(st.looks); t += m.interval {
		var window sequential.Counts
		for _, l := range st.looks[t-m.window : t] {
			window.Requests += l.Treatment.Requests
			window.Errors += l.Treatment.Errors
		}
		var history sequential.Counts
		for _, l := range st.history[len(st.history)-baselineLooks:] {
			history = history.Add(l.Treatment)
		}
		v := m.gate.Judge(m.wave, m.vector(window, history))
		switch v.Result {
		case canary.ResultFail:
			return outcome{decision: sequential.Fail, at: t * lookSeconds}, nil
		case canary.ResultPass:
			passes, unsure = passes+1, 0
			if passes >= m.requiredPasses {
				return outcome{decision: sequential.Pass, at: t * lookSeconds}, nil
			}
		case canary.ResultInconclusive:
			passes, unsure = 0, unsure+1
			if unsure >= m.inconclusiveLimit {
				return outcome{decision: sequential.Continue, at: t * lookSeconds}, nil
			}
		default:
			return outcome{}, fmt.Errorf("the check answered %q", v.Result)
		}
	}
	return outcome{decision: sequential.Continue, at: len(st.looks) * lookSeconds}, nil
}

// vector is what Prometheus answers the check's one query with: the error
// ratio over the window, the same ratio over the window before the
// restart (the baseline), and the requests, each tagged as the gate tags
// them. 0/0 is NaN, as PromQL's division gives.
func (m thresholdMode) vector(window, history sequential.Counts) model.Vector {
	series := func(kind string, v float64) *model.Sample {
		return &model.Sample{Metric: model.Metric{"destination_workload": workload, "meshwave_series": model.LabelValue(kind)}, Value: model.SampleValue(v)}
	}
	return model.Vector{
		series("value", window.Errors/window.Requests),
		series("baseline", history.Errors/history.Requests),
		series("requests", window.Requests),
	}
}
