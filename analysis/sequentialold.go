package analysis

import (
	"math"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/meshwave/meshwave/canary"
)

// splitOld cuts the looks of w's series into those of its moved pods and
// those of its pods not yet replaced. A pod is one not yet replaced when
// it served before the workload's restart (a series of it has a sample at
// or before then), unless the snapshot shows it on the expected revision:
// the samples of a pod on it are the old pod's only before it was created
// (a StatefulSet recreates its pods under the same names), and those of
// one that was already on it before the restart never are.
// Every other series of w, and every series without a pod label, is the
// moved pods'. A pod not yet replaced that served nothing before the
// restart counts as moved: it can only make the two arms look alike.
func splitOld(looks []counter, r promv1.Range, w canary.WaveWorkload, expect string, waveRestart time.Time, history []counter) (moved, old []counter) {
	restart := w.Record.At
	if restart.IsZero() {
		restart = waveRestart
	}
	name := w.ObjectName()
	// until is when each pod of w stops being an old one.
	until := map[string]time.Time{}
	forever := time.Unix(math.MaxInt32, 0)
	for _, cs := range [][]counter{history, looks} {
		for _, c := range cs {
			if c.workload == name && c.pod != "" && !c.first.IsZero() && !c.first.After(restart) {
				until[c.pod] = forever
			}
		}
	}
	for _, p := range w.Pods {
		if _, ok := until[p.Name]; ok && p.Revision == expect {
			until[p.Name] = p.CreatedAt
		}
	}
	for _, c := range looks {
		t, ok := until[c.pod]
		if c.workload != name || !ok {
			moved = append(moved, c)
			continue
		}
		m, o := c, c
		m.looks, o.looks = make([]float64, len(c.looks)), make([]float64, len(c.looks))
		for k, v := range c.looks {
			if r.Start.Add(time.Duration(k) * r.Step).Before(t) {
				o.looks[k] = v
			} else {
				m.looks[k] = v
			}
		}
		moved, old = append(moved, m), append(old, o)
	}
	return moved, old
}
