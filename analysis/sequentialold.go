package analysis

import (
	"math"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/meshwave/meshwave/canary"
)

// splitOld cuts the looks of w's series into those of its moved pods and
// those of its pods not yet replaced; what cannot be told apart is in
// neither. The data say which pod is which, where they can, and the
// snapshot where they cannot:
//   - A pod the snapshot shows on another revision than the expected one
//     is an old pod, whatever it served before.
//   - A series scraped at an address (instance) the pod had at or before
//     the workload's restart is the old pod's until its counter resets,
//     and so is every series of a pod with a sample then, without an
//     address, until the first reset of any of them and, for a pod the
//     snapshot shows on the expected revision, until it was created: a
//     StatefulSet recreates its pods under the same names, and a new
//     proxy counts from nothing.
//   - A pod the snapshot shows on the expected revision is a moved one
//     after it was created.
//   - Series without a pod label are the moved pods' once the wave was up
//     (every pod replaced), and in neither arm before.
//
// Anything else (a pod recreated more than once, one gone from the
// snapshot after its first reset, one first seen after the restart and
// not in the snapshot) counts for neither: no arm takes counts it may not
// own.
func splitOld(looks []counter, r promv1.Range, w canary.WaveWorkload, expect string, waveRestart, ready time.Time, history []counter) (moved, old []counter) {
	restart := w.Record.At
	if restart.IsZero() {
		restart = waveRestart
	}
	name := w.ObjectName()
	snap := map[string]canary.Pod{}
	for _, p := range w.Pods {
		snap[p.Name] = p
	}
	never := time.Unix(math.MaxInt32, 0)
	at := func(k int) time.Time { return r.Start.Add(time.Duration(k) * r.Step) }
	// What each pod showed at or before the restart, and when it first
	// started counting again after it.
	before, addresses, reset := map[string]bool{}, map[string]map[string]bool{}, map[string]time.Time{}
	for _, cs := range [][]counter{history, looks} {
		for _, c := range cs {
			if c.workload != name || c.pod == "" || c.first.IsZero() || c.first.After(restart) {
				continue
			}
			before[c.pod] = true
			if c.instance != "" {
				if addresses[c.pod] == nil {
					addresses[c.pod] = map[string]bool{}
				}
				addresses[c.pod][c.instance] = true
			}
		}
	}
	firstReset := func(c counter) time.Time {
		for _, k := range c.resets {
			if t := at(k); t.After(restart) {
				return t
			}
		}
		return never
	}
	for _, c := range looks {
		if c.workload != name || c.pod == "" || c.instance != "" {
			continue
		}
		if t, ok := reset[c.pod]; !ok || firstReset(c).Before(t) {
			reset[c.pod] = firstReset(c)
		}
	}
	const (
		toMoved = iota
		toOld
		toNeither
	)
	which := func(c counter, t time.Time) int {
		if c.pod == "" {
			if t.Before(ready) {
				return toNeither
			}
			return toMoved
		}
		p, known := snap[c.pod]
		switch {
		case known && p.Revision != expect:
			return toOld
		case c.instance != "" && addresses[c.pod][c.instance] && t.Before(firstReset(c)):
			return toOld
		case c.instance == "" && before[c.pod] && t.Before(reset[c.pod]) && (!known || !t.After(p.CreatedAt)):
			return toOld
		case known && t.After(p.CreatedAt):
			return toMoved
		}
		return toNeither
	}
	for _, c := range looks {
		if c.workload != name {
			moved = append(moved, c)
			continue
		}
		m, o := c, c
		m.looks, o.looks = make([]float64, len(c.looks)), make([]float64, len(c.looks))
		for k, v := range c.looks {
			switch which(c, at(k)) {
			case toMoved:
				m.looks[k] = v
			case toOld:
				o.looks[k] = v
			}
		}
		moved, old = append(moved, m), append(old, o)
	}
	return moved, old
}
