package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onDeleteSet is an OnDelete StatefulSet of three pods on 1-25, ready.
func onDeleteSet(opts ...wopt) Workload {
	w := deploy("db", kind(KindStatefulSet), func(w *Workload) {
		w.OnDelete, w.Replicas = true, 3
		w.Pods = nil
		for i := 0; i < 3; i++ {
			w.Pods = append(w.Pods, Pod{Name: fmt.Sprintf("db-%d", i), UID: fmt.Sprintf("uid-%d", i), Running: true, Ready: true, Revision: "1-25"})
		}
	})
	for _, o := range opts {
		o(&w)
	}
	return w
}

func TestNextEvictionReplacesOnePodAtATimeHighestOrdinalFirst(t *testing.T) {
	replaced := func(names ...string) wopt {
		return func(w *Workload) {
			for i := range w.Pods {
				for _, n := range names {
					if w.Pods[i].Name == n {
						w.Pods[i].Current, w.Pods[i].Revision = true, "1-26"
					}
				}
			}
		}
	}
	pod := func(name string, mod func(*Pod)) wopt {
		return func(w *Workload) {
			for i := range w.Pods {
				if w.Pods[i].Name == name {
					mod(&w.Pods[i])
				}
			}
		}
	}
	tests := []struct {
		name string
		w    Workload
		pod  string
		why  string
	}{
		{"the highest ordinal goes first", onDeleteSet(), "db-2", ""},
		{"then the next, once the replaced one is ready on the target", onDeleteSet(replaced("db-2")), "db-1", ""},
		{"ordinals compare as numbers", onDeleteSet(func(w *Workload) {
			w.Replicas = 11
			for i := 3; i < 11; i++ {
				w.Pods = append(w.Pods, Pod{Name: fmt.Sprintf("db-%d", i), Running: true, Ready: true, Revision: "1-25"})
			}
		}), "db-10", ""},
		{"nothing goes while a replaced pod is not ready", onDeleteSet(replaced("db-2"), pod("db-2", func(p *Pod) { p.Ready = false })), "",
			"replaced pod db-2 is not ready yet"},
		{"nothing goes while a pod is going away", onDeleteSet(pod("db-2", func(p *Pod) { p.Terminating = true })), "", "pod db-2 is going away"},
		{"nothing goes while a pod is missing", onDeleteSet(func(w *Workload) { w.Pods = w.Pods[:2] }), "", "2 of 3 pods are up"},
		{"an old pod that is down goes first: it serves nothing", onDeleteSet(pod("db-0", func(p *Pod) { p.Ready = false })), "db-0", ""},
		{"a replaced pod on the wrong revision stops the replacement", onDeleteSet(replaced("db-2"), pod("db-2", func(p *Pod) { p.Revision = "1-25" })), "",
			"replaced pod db-2 runs a proxy of 1-25, not of 1-26: no further pod is replaced"},
		{"every pod replaced: nothing to do", onDeleteSet(replaced("db-0", "db-1", "db-2")), "", ""},
		{"a RollingUpdate workload is never evicted", onDeleteSet(func(w *Workload) { w.OnDelete = false }), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok, why := NextEviction(tt.w, Place{Revision: "1-26"}, false)
			assert.Equal(t, tt.pod != "", ok)
			assert.Equal(t, tt.pod, p.Name)
			assert.Equal(t, tt.why, why)
		})
	}
}

func TestNextEvictionGoesNodeByNodeForADaemonSet(t *testing.T) {
	w := deploy("agent", kind(KindDaemonSet), func(w *Workload) {
		w.OnDelete, w.Replicas = true, 3
		w.Pods = []Pod{
			{Name: "agent-aaaa", Node: "node-c", Running: true, Ready: true, Revision: "1-25"},
			{Name: "agent-bbbb", Node: "node-a", Running: true, Ready: true, Revision: "1-25"},
			{Name: "agent-cccc", Node: "node-b", Running: true, Ready: true, Revision: "1-25"},
		}
	})
	p, ok, _ := NextEviction(w, Place{Revision: "1-26"}, false)
	require.True(t, ok)
	assert.Equal(t, "agent-bbbb", p.Name, "node-a first")
}

// TestAnOnDeleteMemberIsEvictedOnlyAfterItsMoveIsOnRecord plays a wave of
// an OnDelete StatefulSet: the first decision restarts its template; the
// next, with the move on record and the rollout pending, evicts its
// highest ordinal pod, bound to its UID.
func TestAnOnDeleteMemberIsEvictedOnlyAfterItsMoveIsOnRecord(t *testing.T) {
	s := snap(onDeleteSet())
	d := Decide(Input{Snapshot: s, Now: t0, Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "StatefulSet/db", d.Moves[0].Workload)
	assert.Empty(t, d.Evictions, "no eviction before the template is restarted")

	rec := d.Moves[0].Record
	s.Workloads[0].Annotations[AnnotationMove] = rec.Encode()
	s.Namespace.Annotations[AnnotationStatus], _ = d.Status.Encode()
	s.Namespace.Labels[LabelRev] = "1-26"
	st, _, err := ParseStatus(s.Namespace.Annotations)
	require.NoError(t, err)
	pending := []Verdict{{Gate: "rollout", Result: ResultPending, Reason: "0 of 3 replicas updated", RetryAfter: 5 * time.Second}}
	d = Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Second), Config: DefaultConfig()})
	assert.Empty(t, d.Moves, "the template is not restarted twice")
	assert.Equal(t, []Eviction{{Workload: "StatefulSet/db", Pod: "db-2", UID: "uid-2",
		Message: "evicting pod db-2 of statefulset db (0 of 3 replaced): its updateStrategy is OnDelete, so it moves to 1-26 one pod at a time"}}, d.Evictions)
	require.NotNil(t, d.Status, "each pod's replacement shows in the status")
	assert.Equal(t, []WorkloadState{{Name: "StatefulSet/db", State: StateMoving, Reason: "0 of 3 pods replaced; evicting db-2"}}, d.Status.Workloads)
	assert.False(t, OnlyProgress(st, d.Status), "written, and so fenced with the namespace's resourceVersion")
}

func TestAStatefulSetRollingBackHasItsNeverReadyPodEvicted(t *testing.T) {
	// RollingUpdate, rolled back: db-2 ran the bad template and never got
	// ready; its controller waits for it forever.
	w := onDeleteSet(func(w *Workload) {
		w.OnDelete = false
		w.Pods[2].Ready = false
		w.Pods[2].Revision = "1-26"
	})
	p, ok, why := NextEviction(w, Place{Revision: "1-25"}, true)
	require.True(t, ok, why)
	assert.Equal(t, "db-2", p.Name)

	_, ok, _ = NextEviction(w, Place{Revision: "1-26"}, false)
	assert.False(t, ok, "a forward rolling update is its controller's alone")
	w.Pods[2].Ready = true
	_, ok, _ = NextEviction(w, Place{Revision: "1-25"}, true)
	assert.False(t, ok, "a ready pod is its controller's to replace")
	w.Pods[2].Ready, w.Pods[1].Terminating = false, true
	_, ok, why = NextEviction(w, Place{Revision: "1-25"}, true)
	assert.False(t, ok)
	assert.Equal(t, "pod db-1 is going away", why)
}

// startWaveOf plays the first decision of a one-wave migration of ws and
// returns the snapshot with the moves on record and the status written.
func startWaveOf(t *testing.T, cfg Config, ws ...Workload) (Snapshot, *Status) {
	t.Helper()
	s := snap(ws...)
	d := Decide(Input{Snapshot: s, Now: t0, Config: cfg})
	require.NotNil(t, d.Status)
	require.Len(t, d.Moves, len(ws))
	for _, m := range d.Moves {
		for i := range s.Workloads {
			if s.Workloads[i].Name == m.Workload {
				s.Workloads[i].Annotations[AnnotationMove] = m.Record.Encode()
			}
		}
	}
	s.Namespace.Annotations[AnnotationStatus], _ = d.Status.Encode()
	s.Namespace.Labels[LabelRev] = "1-26"
	st, _, err := ParseStatus(s.Namespace.Annotations)
	require.NoError(t, err)
	return s, st
}

// A person who sets meshwave.io/skip on an OnDelete member mid-wave takes
// it out of the wave: "left where it is". Its pods must not go on being
// evicted while the rest of the wave rolls out.
func TestAnOnDeleteMemberSkippedMidWaveHasNoPodEvicted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sizes.CanarySize = 2
	s, st := startWaveOf(t, cfg, deploy("cart"), onDeleteSet())
	s.Workloads[1].Annotations[AnnotationSkip] = "true"
	pending := []Verdict{{Gate: "rollout", Result: ResultPending, Reason: "1 of 2 workloads rolling out", RetryAfter: 5 * time.Second}}
	d := Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Second), Config: cfg})
	assert.Empty(t, d.Evictions, "a skipped member's pods are left alone")

	// The next decision, with the Skipped outcome on its record.
	for _, m := range d.Moves {
		require.True(t, m.RecordOnly)
		s.Workloads[1].Annotations[AnnotationMove] = m.Record.Encode()
	}
	if d.Status != nil {
		s.Namespace.Annotations[AnnotationStatus], _ = d.Status.Encode()
		st, _, _ = ParseStatus(s.Namespace.Annotations)
	}
	d = Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(2 * time.Second), Config: cfg})
	assert.Empty(t, d.Evictions, "a skipped member's pods are left alone")
}

// A RollingUpdate StatefulSet rolling back: its controller replaces the
// pods itself; meshwave only frees it from a pod of the moved template that
// never got ready. A pod already on the source's proxy that is not Ready
// (a readiness blip, the outage that caused the rollback) is no such pod:
// evicted, it would be a second pod down beside the one being replaced.
func TestAStatefulSetRollingBackHasNoSourcePodEvicted(t *testing.T) {
	tests := []struct {
		name string
		mod  func(w *Workload)
	}{
		{"a source pod that is not ready, beside a replacement starting", func(w *Workload) {
			w.Pods[2].Current, w.Pods[2].Ready, w.Pods[2].UID = true, false, "uid-2b" // recreated from the restored template
			w.Pods[1].Ready = false                                                   // on 1-25 all along
		}},
		{"a source pod that is not ready, while the replaced pod is gone", func(w *Workload) {
			w.Pods = w.Pods[:2]
			w.Pods[1].Ready = false
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := onDeleteSet(func(w *Workload) { w.OnDelete = false }, tt.mod)
			p, ok, _ := NextEviction(w, Place{Revision: "1-25"}, true)
			assert.False(t, ok, "evicted %s", p.Name)
		})
	}
}

// An old pod that is not Ready is not evicted while a pod meshwave
// evicted earlier has not come back: with db-2 evicted and not yet
// recreated, a readiness blip of db-1 would otherwise take two pods of the
// StatefulSet out at once (a quorum of three lost). Safety wins over
// progress: an OrderedReady StatefulSet whose missing pod waits for that
// same unready pod stalls, and its readiness timeout ends the wave.
func TestAnUnreadyOldPodIsNotEvictedWhileAnotherIsMissing(t *testing.T) {
	w := onDeleteSet(func(w *Workload) {
		w.Pods = w.Pods[:2] // db-2 evicted, not recreated yet
		w.Pods[1].Ready = false
	})
	p, ok, why := NextEviction(w, Place{Revision: "1-26"}, false)
	assert.False(t, ok, "evicted %s", p.Name)
	assert.Equal(t, "2 of 3 pods are up", why)
}
