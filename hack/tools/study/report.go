package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// sectionTitle starts the study's section of bench/results.md; the section
// runs to the next "## " title.
const sectionTitle = "## Sequential verdicts: the simulation study"

// report writes the study's section.
func report(w io.Writer, res result, commit string) {
	t := sequentialTest
	fmt.Fprintf(w, "%s (`make study`, %d runs a cell, at %s)\n\n", sectionTitle, res.runs, commit)
	fmt.Fprintf(w, "Both modes read the same simulated streams. A wave's treatment is %d moved pods, its control %d pods still on the source revision; ", treatmentPods, controlPods)
	fmt.Fprintf(w, "requests are a Poisson stream at the level's rate a pod, each an error with the scenario's probability. The time is from the wave being up.\n\n")
	fmt.Fprintf(w, "- **sequential**: `analysis/sequential` after every %d s scrape: α = %g, tolerance %g (%g× the control's error ratio), floor %g%%; undecided at %d min is Inconclusive.\n",
		lookSeconds, t.Alpha, t.Tolerance, 1+t.Tolerance, t.Floor*100, maxLooks*lookSeconds/60)
	fmt.Fprintf(w, "- **today**: the threshold mode at the agent's defaults, judged by `analysis.MetricGate.Judge`: 5%% threshold, +100%% over the treatment's own last minute before its restart, 50 requests at least, a 1 min window, a 1 min bake, every 30 s, 2 passes in a row; 3 inconclusive runs in a row pause the wave (\"paused\").\n\n")
	fmt.Fprintf(w, "![A/A false failures](study/false-failures.svg)\n![Time to fail](study/time-to-fail.svg)\n\n")
	for _, sc := range scenarios {
		right := "fail"
		if sc.healthy {
			right = "pass"
		}
		fmt.Fprintf(w, "### %s (the right verdict: %s)\n\n", sc.name, right)
		fmt.Fprintln(w, "| rps a pod | sequential: failed | passed | Inconclusive at 15 min | time to fail, median / p95 | time to pass, median / p95 | today: failed | passed | paused | time to fail, median / p95 | time to pass, median / p95 |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
		for _, c := range res.cells[sc.name] {
			s, h := c.sequential, c.threshold
			fmt.Fprintf(w, "| %g | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.rps,
				share(s.failed, s.runs), share(s.passed, s.runs), share(s.undecided(), s.runs), times(s.failTimes), times(s.passTime),
				share(h.failed, h.runs), share(h.passed, h.runs), share(h.undecided(), h.runs), times(h.failTimes), times(h.passTime))
		}
		fmt.Fprintln(w)
	}
	historyTable(w, res)
	tradeTable(w, res)
	fmt.Fprintln(w, strings.TrimSpace(findings(res)))
	fmt.Fprintln(w)
}

func share(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
}

func times(ts []float64) string {
	if len(ts) == 0 {
		return "-"
	}
	return seconds(quantile(0.5, ts)) + " / " + seconds(quantile(0.95, ts))
}

func seconds(s float64) string {
	return (time.Duration(math.Round(s)) * time.Second).String()
}

// findings states what the tables show against the study's bar: the
// sequential mode's A/A false failures at or under α at every level.
func findings(res result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**The bar:** the sequential mode fails a healthy wave at most α = %g of the time, at every level and in every healthy scenario.\n\n", sequentialTest.Alpha)
	for _, sc := range scenarios {
		if !sc.healthy {
			continue
		}
		worst, worstHistory, worstToday := 0.0, 0.0, 0.0
		for _, c := range res.cells[sc.name] {
			worst = math.Max(worst, float64(c.sequential.failed)/float64(c.sequential.runs))
			worstHistory = math.Max(worstHistory, float64(c.history.failed)/float64(c.history.runs))
			worstToday = math.Max(worstToday, float64(c.threshold.failed)/float64(c.threshold.runs))
		}
		verdict := "met"
		if math.Max(worst, worstHistory) > sequentialTest.Alpha {
			verdict = "NOT met"
		}
		fmt.Fprintf(&b, "- %s: at most %.2f%% failed against the pods at the same time, %.2f%% against the history (%s); today's mode failed up to %.2f%%.\n",
			sc.name, 100*worst, 100*worstHistory, verdict, 100*worstToday)
	}
	return b.String()
}

// tradeTable shows what the tolerance trades: healthy waves passed sooner
// against smaller regressions found.
func tradeTable(w io.Writer, res result) {
	fmt.Fprintf(w, "### The tolerance's trade (sequential mode, α = %g, floor %g%%)\n\n", sequentialTest.Alpha, sequentialTest.Floor*100)
	fmt.Fprint(w, "| tolerance |")
	for _, i := range tradeScenarios {
		for _, rps := range trafficLevels[1:] {
			fmt.Fprintf(w, " %s at %g rps |", scenarios[i].name, rps)
		}
	}
	fmt.Fprint(w, "\n|---|")
	for range len(tradeScenarios) * (len(trafficLevels) - 1) {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, tol := range tradeTolerances {
		fmt.Fprintf(w, "| %g |", tol)
		for _, i := range tradeScenarios {
			sc := scenarios[i]
			for l := range trafficLevels[1:] {
				t := res.trade[tol][sc.name][l+1]
				if sc.healthy {
					fmt.Fprintf(w, " passed %s, median %s |", share(t.passed, t.runs), median(t.passTime))
				} else {
					fmt.Fprintf(w, " failed %s, median %s |", share(t.failed, t.runs), median(t.failTimes))
				}
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func median(ts []float64) string {
	if len(ts) == 0 {
		return "-"
	}
	return seconds(quantile(0.5, ts))
}

// historyTable shows the sequential check as the agent's gate runs it,
// against the history before the restart, on the same streams.
func historyTable(w io.Writer, res result) {
	fmt.Fprintf(w, "### As the gate runs it: against the %d minutes before the restart\n\n", historyLooks*lookSeconds/60)
	fmt.Fprintln(w, "Once the rollout is over no pod of the workload is left on the source revision, so the agent holds the looks to the history: how the errors split between the workload and the other workloads then, or, when those had no error, the workload's own error ratio then. The bounds take a share of α. (The looks of the rollout itself, while old pods serve beside the moved ones, are held to those old pods as the concurrent mode above holds them; the study starts after it.)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | rps a pod | failed | passed | Inconclusive at 15 min | time to fail, median / p95 | time to pass, median / p95 |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, sc := range scenarios {
		for _, c := range res.cells[sc.name] {
			h := c.history
			fmt.Fprintf(w, "| %s | %g | %s | %s | %s | %s | %s |\n", sc.name, c.rps,
				share(h.failed, h.runs), share(h.passed, h.runs), share(h.undecided(), h.runs), times(h.failTimes), times(h.passTime))
		}
	}
	fmt.Fprintln(w)
}
