package main

import (
	"net/http"
	"net/http/pprof"
)

// withProfiling serves Go's profiles under /debug/pprof/ beside next, as
// the Kubernetes components' --profiling does: the heap (?gc=1 collects
// first), goroutines, CPU and the rest. Off by default: the metrics
// address has no authentication, and a CPU profile costs the agent while
// it runs.
func withProfiling(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
