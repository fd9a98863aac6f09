package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plots draws the study's two figures into dir as SVG.
func plots(res result, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := falseFailures(res, filepath.Join(dir, "false-failures.svg")); err != nil {
		return err
	}
	return timeToFail(res, filepath.Join(dir, "time-to-fail.svg"))
}

// falseFailures plots, for the A/A scenario, the share of runs each mode
// failed at each level, with α.
func falseFailures(res result, path string) error {
	p := plot.New()
	p.Title.Text = "A/A (both arms 1% errors): waves failed"
	p.X.Label.Text = "requests a second a pod"
	p.X.Tick.Marker = levelTicks()
	p.Y.Label.Text = "share of runs failed"
	cells := res.cells[scenarios[0].name]
	seq, thr := make(plotter.XYs, len(cells)), make(plotter.XYs, len(cells))
	for i, c := range cells {
		x := math.Log10(c.rps)
		seq[i] = plotter.XY{X: x, Y: float64(c.sequential.failed) / float64(c.sequential.runs)}
		thr[i] = plotter.XY{X: x, Y: float64(c.threshold.failed) / float64(c.threshold.runs)}
	}
	alpha := plotter.NewFunction(func(float64) float64 { return sequentialTest.Alpha })
	alpha.Color = color.Gray{Y: 128}
	alpha.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(alpha)
	p.Legend.Add(fmt.Sprintf("α = %g", sequentialTest.Alpha), alpha)
	if err := plotutil.AddLinePoints(p, "sequential", seq, "today", thr); err != nil {
		return err
	}
	p.Y.Min = 0
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

// timeToFail plots the median time to a fail of each regression, for each
// mode, by level; a level where a mode failed fewer than half the runs has
// no point.
func timeToFail(res result, path string) error {
	p := plot.New()
	p.Title.Text = "Regressions: median time to fail"
	p.X.Label.Text = "requests a second a pod"
	p.X.Tick.Marker = levelTicks()
	p.Y.Label.Text = "seconds after the wave is up"
	var lines []any
	for _, sc := range scenarios {
		if sc.healthy {
			continue
		}
		var seq, thr plotter.XYs
		for _, c := range res.cells[sc.name] {
			x := math.Log10(c.rps)
			if 2*c.sequential.failed >= c.sequential.runs {
				seq = append(seq, plotter.XY{X: x, Y: quantile(0.5, c.sequential.failTimes)})
			}
			if 2*c.threshold.failed >= c.threshold.runs {
				thr = append(thr, plotter.XY{X: x, Y: quantile(0.5, c.threshold.failTimes)})
			}
		}
		if len(seq) > 0 {
			lines = append(lines, "sequential, "+sc.name, seq)
		}
		if len(thr) > 0 {
			lines = append(lines, "today, "+sc.name, thr)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	p.Y.Min = 0
	p.Y.Max = maxLooks * lookSeconds / 2
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(7*vg.Inch, 5*vg.Inch, path)
}

// levelTicks mark the traffic levels on an axis of their log10.
func levelTicks() plot.ConstantTicks {
	var ticks plot.ConstantTicks
	for _, rps := range trafficLevels {
		ticks = append(ticks, plot.Tick{Value: math.Log10(rps), Label: fmt.Sprintf("%g", rps)})
	}
	return ticks
}
