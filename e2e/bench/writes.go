package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/harness"
)

// writeLog records each write request a client starts: when, what, and
// the annotations its merge patch sets. Wrapped around the agent's
// client, it is the agent's own account of when it acted, with no watch
// in between.
type writeLog struct {
	mu     sync.Mutex
	writes []write
}

// write is one request of a writeLog.
type write struct {
	at        time.Time
	method    string
	namespace string
	resource  string // "namespaces", "deployments", "pods/eviction", ...
	name      string
	// annotations are those the merge patch sets; nil when it sets none.
	annotations map[string]string
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap is a rest.Config's Wrap: it records the write requests that pass.
func (l *writeLog) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodGet {
			w := write{at: time.Now(), method: r.Method}
			if p, ok := harness.ParseAPIPath(r.URL.Path); ok {
				w.namespace, w.resource, w.name = p.Namespace, p.Resource, p.Name
				if p.Subresource != "" {
					w.resource += "/" + p.Subresource
				}
			}
			if r.Method == http.MethodPatch && r.GetBody != nil {
				if body, err := r.GetBody(); err == nil {
					raw, _ := io.ReadAll(body)
					body.Close()
					w.annotations = patchedAnnotations(raw)
				}
			}
			l.mu.Lock()
			l.writes = append(l.writes, w)
			l.mu.Unlock()
		}
		return next.RoundTrip(r)
	})
}

// patchedAnnotations reads the annotations a merge patch sets.
func patchedAnnotations(raw []byte) map[string]string {
	var p struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &p) != nil || len(p.Metadata.Annotations) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range p.Metadata.Annotations {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// snapshot returns the writes so far, in the order they started.
func (l *writeLog) snapshot() []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]write(nil), l.writes...)
}

// waveTimes are, per wave of one namespace, when its first workload was
// patched, when the agent wrote that it passed, and when that status said
// the next wave may start (the pass decision's time plus the delay
// between waves, by the agent's clock).
type waveTimes struct {
	firstPatch, passed, nextWaveAt time.Time
	moves                          int
}

// wavesOf reads the waves of a namespace from the agent's writes: each
// Deployment patch's move record names its wave; a status written with
// waveState Passed marks the end of one, and the status of a completed
// migration the end of its last.
func wavesOf(writes []write, namespace string) map[int]*waveTimes {
	out := map[int]*waveTimes{}
	get := func(n int) *waveTimes {
		if out[n] == nil {
			out[n] = &waveTimes{}
		}
		return out[n]
	}
	for _, w := range writes {
		if w.namespace != namespace || w.method != http.MethodPatch || w.annotations == nil {
			continue
		}
		switch w.resource {
		case "deployments":
			rec, ok := canary.ReadMoveRecord(w.annotations)
			if !ok || rec.Rollback {
				continue
			}
			wt := get(rec.Wave)
			if wt.firstPatch.IsZero() {
				wt.firstPatch = w.at
			}
			wt.moves++
		case "namespaces":
			st, _, err := canary.ParseStatus(w.annotations)
			if err != nil || st == nil || (st.WaveState != canary.WavePassed && st.Phase != canary.PhaseCompleted) {
				continue
			}
			if wt := get(st.Wave); wt.passed.IsZero() {
				wt.passed = w.at
				if st.NextWaveAt != nil {
					wt.nextWaveAt = *st.NextWaveAt
				}
			}
		}
	}
	return out
}
