package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/analysis/sequential"
)

func TestTheStudyWritesTheSameFiguresEveryTime(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a", "results.md"), filepath.Join(dir, "b", "results.md")
	for _, p := range []string{a, b} {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, write(30, p, "abc1234"))
	}
	for _, f := range []string{"results.md", "study/false-failures.svg", "study/time-to-fail.svg"} {
		x, err := os.ReadFile(filepath.Join(dir, "a", f))
		require.NoError(t, err)
		y, err := os.ReadFile(filepath.Join(dir, "b", f))
		require.NoError(t, err)
		assert.Equal(t, string(x), string(y), f)
		assert.NotEmpty(t, x, f)
	}
	doc, err := os.ReadFile(a)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(doc), sectionTitle+" (`make study`, 30 runs a cell, at abc1234)\n"))
	for _, sc := range scenarios {
		assert.Contains(t, string(doc), "### "+sc.name+" (the right verdict: ")
	}
}

func TestTheSequentialModeFailsAtMostAlphaOfTheStudysHealthyWaves(t *testing.T) {
	const runs = 400
	res, err := study(runs)
	require.NoError(t, err)
	for _, sc := range scenarios {
		for _, c := range res.cells[sc.name] {
			for mode, got := range map[string]tally{"at the same time": c.sequential, "against the history": c.history} {
				if sc.healthy {
					assert.LessOrEqual(t, float64(got.failed), sequentialTest.Alpha*runs, "%s at %g rps, %s", sc.name, c.rps, mode)
				} else {
					assert.LessOrEqual(t, float64(got.passed), sequentialTest.Alpha*runs, "%s at %g rps, %s", sc.name, c.rps, mode)
				}
			}
		}
	}
	// The demo's kind of failure is caught at every level.
	for _, c := range res.cells["+30 points: 31% against 1%"] {
		assert.Equal(t, runs, c.sequential.failed, "%g rps", c.rps)
	}
}

// looks makes a stream whose every look has the same counts.
func looks(n int, history sequential.Counts, l sequential.Look) stream {
	st := stream{}
	for range historyLooks {
		st.history = append(st.history, sequential.Look{Treatment: history})
	}
	for range n {
		st.looks = append(st.looks, l)
	}
	return st
}

func TestTodaysModeIsJudgedByTheAgentsOwnErrorRateCheckAtItsDefaults(t *testing.T) {
	m, err := newThresholdMode()
	require.NoError(t, err)
	quiet := sequential.Counts{Requests: 100}
	for _, c := range []struct {
		name string
		st   stream
		want outcome
	}{
		// 6% > the 5% threshold at the first run, after the one-minute bake.
		{"over the threshold", looks(60, quiet, sequential.Look{Treatment: sequential.Counts{Requests: 100, Errors: 6}}), outcome{sequential.Fail, 60}},
		// 3% against a baseline of 1%: more than +100%.
		{"over the baseline", looks(60, sequential.Counts{Requests: 100, Errors: 1}, sequential.Look{Treatment: sequential.Counts{Requests: 100, Errors: 3}}), outcome{sequential.Fail, 60}},
		// 2% against 1%, the edge of +100%: two passes, at 60 and 90 s.
		{"two passes", looks(60, sequential.Counts{Requests: 100, Errors: 1}, sequential.Look{Treatment: sequential.Counts{Requests: 100, Errors: 2}}), outcome{sequential.Pass, 90}},
		// 48 requests a minute, under the 50 required: three inconclusive
		// runs, at 60, 90 and 120 s, pause the wave.
		{"too few requests", looks(60, quiet, sequential.Look{Treatment: sequential.Counts{Requests: 12}}), outcome{sequential.Continue, 120}},
	} {
		got, err := m.run(c.st)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, c.name)
	}
}

func TestTheStudysSectionReplacesItsOldOneAndNoOther(t *testing.T) {
	doc := "# meshwave benchmarks\n\n## Pure speed\n\nfast\n\n" + sectionTitle + " (old)\n\nold figures\n\n## Memory\n\nsmall\n"
	got := replaceSection(doc, sectionTitle+" (new)\n\nnew figures\n\n")
	assert.Equal(t, "# meshwave benchmarks\n\n## Pure speed\n\nfast\n\n"+sectionTitle+" (new)\n\nnew figures\n\n## Memory\n\nsmall\n", got)
	assert.Equal(t, "# x\n\n"+sectionTitle+" (new)\n", replaceSection("# x\n", sectionTitle+" (new)\n"))
	assert.Equal(t, sectionTitle+" (new)\n", replaceSection("", sectionTitle+" (new)\n"))
}

func TestAStudyOfNoRunIsRefused(t *testing.T) {
	assert.EqualError(t, write(0, filepath.Join(t.TempDir(), "r.md"), "x"), "-runs 0 is not a positive number")
}
