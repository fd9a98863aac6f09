package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProfilingServesGoProfilesBesideTheAgentsHandler(t *testing.T) {
	agent := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("agent " + r.URL.Path))
	})
	get := func(h http.Handler, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	with := withProfiling(agent)
	heap := get(with, "/debug/pprof/heap?gc=1")
	require.Equal(t, http.StatusOK, heap.Code)
	assert.Equal(t, "application/octet-stream", heap.Header().Get("Content-Type"))
	assert.NotEmpty(t, heap.Body.Bytes())
	assert.Equal(t, http.StatusOK, get(with, "/debug/pprof/").Code)
	assert.Equal(t, "agent /metrics", get(with, "/metrics").Body.String())
	assert.Equal(t, "agent /readyz", get(with, "/readyz").Body.String())
}

func TestProfilingIsOffUnlessAsked(t *testing.T) {
	opts, err := cli{name: "meshwave"}.parseRun(nil)
	require.NoError(t, err)
	assert.False(t, opts.profiling)
	opts, err = cli{name: "meshwave"}.parseRun([]string{"--profiling"})
	require.NoError(t, err)
	assert.True(t, opts.profiling)
}
