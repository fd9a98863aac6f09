package bench

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// profileDir is MESHWAVE_BENCH_PROFILES: a directory where a benchmark
// leaves its process's profiles and its agents' logs, to find where a
// figure's time or memory goes. "" when unset.
func profileDir() string { return os.Getenv("MESHWAVE_BENCH_PROFILES") }

// writeHeapProfile writes this process's heap, after a collection, to
// name in the profile directory, when one is set.
func writeHeapProfile(b testing.TB, name string) {
	b.Helper()
	dir := profileDir()
	if dir == "" {
		return
	}
	require.NoError(b, os.MkdirAll(dir, 0o755))
	f, err := os.Create(filepath.Join(dir, name))
	require.NoError(b, err)
	defer f.Close()
	runtime.GC()
	require.NoError(b, pprof.WriteHeapProfile(f))
}

// startCPUProfile profiles this process's CPU into name in the profile
// directory, when one is set, until the function it returns is called.
func startCPUProfile(b testing.TB, name string) (stop func()) {
	b.Helper()
	dir := profileDir()
	if dir == "" {
		return func() {}
	}
	require.NoError(b, os.MkdirAll(dir, 0o755))
	f, err := os.Create(filepath.Join(dir, name))
	require.NoError(b, err)
	require.NoError(b, pprof.StartCPUProfile(f))
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// machineBusySince returns a function that tells what share of the
// machine's CPU time, every core counted, was busy (neither idle nor
// waiting on I/O) since machineBusySince was called; 0 where /proc/stat
// cannot be read.
func machineBusySince() func() float64 {
	read := func() (busy, total float64) {
		raw, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(raw), "\n")
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[0] != "cpu" {
			return 0, 0
		}
		for i, f := range fields[1:] {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return 0, 0
			}
			// guest and guest_nice are counted in user and nice already.
			if i >= 8 {
				break
			}
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		return busy, total
	}
	busy0, total0 := read()
	return func() float64 {
		busy, total := read()
		if total <= total0 {
			return 0
		}
		return (busy - busy0) / (total - total0)
	}
}

// profileAgentCPU asks the agent serving at addr for a CPU profile of the
// next d into name in the profile directory, when one is set; the
// function it returns waits for it.
func profileAgentCPU(b testing.TB, addr, name string, d time.Duration) (wait func()) {
	b.Helper()
	dir := profileDir()
	if dir == "" {
		return func() {}
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() { require.NoError(b, <-done, "the agent's CPU profile %s", name) }
}

// saveAgentMetrics writes the agent's /metrics to name in the profile
// directory, when one is set.
func saveAgentMetrics(b testing.TB, addr, name string) {
	b.Helper()
	if dir := profileDir(); dir != "" {
		require.NoError(b, os.WriteFile(filepath.Join(dir, name), scrape(b, addr), 0o644))
	}
}
