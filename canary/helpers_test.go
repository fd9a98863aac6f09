package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type wopt func(*Workload)

// deploy builds a rolled-out two-replica Deployment whose pods run 1-25.
func deploy(name string, opts ...wopt) Workload {
	w := Workload{
		Namespace: "shop", Name: name, ResourceVersion: "100",
		Labels:              map[string]string{"app": name},
		Annotations:         map[string]string{},
		TemplateLabels:      map[string]string{"app": name},
		TemplateAnnotations: map[string]string{},
		Replicas:            2, Generation: 1,
		Status: RolloutStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2},
	}
	for i := 0; i < 2; i++ {
		w.Pods = append(w.Pods, Pod{
			Name: fmt.Sprintf("%s-abc-%d", name, i), Labels: map[string]string{"app": name},
			Annotations: map[string]string{AnnotationSidecar: `{"revision":"1-25"}`},
			Running:     true, Ready: true, Current: true, Revision: "1-25",
		})
	}
	for _, o := range opts {
		o(&w)
	}
	return w
}

func waveAnn(v string) wopt { return func(w *Workload) { w.Annotations[AnnotationWave] = v } }
func ann(k, v string) wopt  { return func(w *Workload) { w.Annotations[k] = v } }
func onRevision(rev string) wopt {
	return func(w *Workload) {
		for i := range w.Pods {
			w.Pods[i].Revision = rev
			w.Pods[i].Annotations = map[string]string{AnnotationSidecar: `{"revision":"` + rev + `"}`}
		}
	}
}
func notInjected() wopt {
	return func(w *Workload) {
		for i := range w.Pods {
			w.Pods[i].Revision = ""
			w.Pods[i].Annotations = map[string]string{}
		}
	}
}
func inAmbient() wopt {
	return func(w *Workload) {
		for i := range w.Pods {
			w.Pods[i].Revision = ""
			w.Pods[i].Annotations = map[string]string{AnnotationRedirection: RedirectionEnabled}
			w.Pods[i].Labels = map[string]string{"app": w.Name, LabelDataplaneMode: DataplaneAmbient, LabelInject: "false"}
		}
	}
}
func label(k, v string) wopt { return func(w *Workload) { w.Labels[k] = v } }
func replicas(n int32) wopt {
	return func(w *Workload) {
		w.Replicas = n
		w.Status = RolloutStatus{ObservedGeneration: 1, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		w.Pods = w.Pods[:n]
	}
}

func mesh() Mesh {
	return Mesh{
		Revisions: map[string]Revision{
			"1-25": {Name: "1-25", Istiods: 1, ReadyIstiods: 1},
			"1-26": {Name: "1-26", Istiods: 1, ReadyIstiods: 1},
		},
		Tags: map[string]string{"canary": "1-26"},
	}
}

// snap is namespace shop on 1-25, opted in to 1-26.
func snap(ws ...Workload) Snapshot {
	return Snapshot{
		Namespace: Namespace{
			Name:        "shop",
			Labels:      map[string]string{LabelRev: "1-25"},
			Annotations: map[string]string{AnnotationTargetRevision: "1-26"},
		},
		Workloads: ws,
		Mesh:      mesh(),
	}
}

func names(ps []Planned) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func waveNames(p NamespacePlan) [][]string {
	out := [][]string{}
	for _, w := range p.Waves {
		out = append(out, names(w))
	}
	return out
}

// kind makes a workload of another kind: its ID becomes Kind/name.
func kind(k Kind) wopt {
	return func(w *Workload) {
		w.Kind = k
		w.Name = WorkloadID(k, w.Name)
	}
}

// movesInOrder is every restart the decisions asked for, in order, as
// "a>1-26" (forward) or "a<1-25" (rollback).
func movesInOrder(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		for _, m := range d.Moves {
			if m.RecordOnly {
				continue
			}
			dir := ">"
			if m.Record.Rollback {
				dir = "<"
			}
			out = append(out, m.Workload+dir+m.Record.Revision)
		}
	}
	return out
}

// forwardMoves lists the workloads of the forward (not rollback) moves of a
// decision.
func forwardMoves(d Decision) []string {
	var out []string
	for _, m := range d.Moves {
		if !m.Record.Rollback && !m.RecordOnly {
			out = append(out, m.Workload)
		}
	}
	return out
}

// forwardMovesTo lists the restarts of the decisions played that move a
// workload forward to rev.
func forwardMovesTo(ds []Decision, rev string) []string {
	var out []string
	for _, d := range ds {
		for _, m := range d.Moves {
			if !m.RecordOnly && !m.Record.Rollback && m.Record.Revision == rev {
				out = append(out, m.Workload)
			}
		}
	}
	return out
}

// backMoves counts the rollback restarts of the decisions played, by
// workload.
func backMoves(ds []Decision) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		for _, m := range d.Moves {
			if !m.RecordOnly && m.Record.Rollback {
				out[m.Workload]++
			}
		}
	}
	return out
}

// reasonsOf lists the reasons of the events.
func reasonsOf(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Reason)
	}
	return out
}

// encoded is st as meshwave writes it into meshwave.io/status.
func encoded(t *testing.T, st *Status) string {
	t.Helper()
	v, err := st.Encode()
	require.NoError(t, err)
	return v
}

// waveToVerify is the wave the gates judge for st over snap, as a
// reconcile reads it.
func waveToVerify(snap Snapshot, st *Status, cfg Config) (WaveUnderTest, bool) {
	return Read(snap, st, nil, cfg, t0).WaveToVerify()
}
