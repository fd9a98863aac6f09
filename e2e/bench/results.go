package bench

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// small reports whether the benchmarks run at their smoke-test size.
func small() bool { return os.Getenv("MESHWAVE_BENCH_SMALL") != "" }

var resultsMu sync.Mutex

// record appends a section of results to the file MESHWAVE_BENCH_OUT
// names, when it is set, and logs it in any case.
func record(b testing.TB, title string, lines ...string) {
	b.Helper()
	text := "## " + title + "\n\n" + strings.Join(lines, "\n") + "\n\n"
	b.Log("\n" + text)
	out := os.Getenv("MESHWAVE_BENCH_OUT")
	if out == "" {
		return
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatalf("results: %v", err)
	}
	defer f.Close()
	if _, err := fmt.Fprint(f, text); err != nil {
		b.Fatalf("results: %v", err)
	}
}
