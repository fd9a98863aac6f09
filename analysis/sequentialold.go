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
//     after it was created. The snapshot, not a pod's name, says so: a
//     pod the old ReplicaSet creates after the namespace was relabelled
//     runs the target's proxy under the old template hash.
//   - Series without a pod label are the moved pods' once the wave was up
//     (every pod replaced), and in neither arm before.
//
// Anything else (a pod recreated more than once, one gone from the
// snapshot after its first reset, one first seen after the restart and
// not in the snapshot, such as a moved pod since deleted or a pod outside
// the workload that reports its name) counts for neither: no arm takes
// counts it may not own.
func splitOld(looks []counter, r promv1.Range, w canary.WaveWorkload, expect string, waveRestart, ready time.Time, history []counter) (moved, old, neither []counter) {
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
	// What each pod showed at or before the restart: whether it served,
	// and at which addresses.
	before, addresses := map[string]bool{}, map[string]map[string]bool{}
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
	// readdressed are the pods scraped since at an address they did not
	// have then: a new incarnation, whose series are its own. reset is
	// when a series a pod had then first counted from nothing again: a
	// new proxy, at the same address, under the same series, and every
	// series of the pod is the new one's from then on, those it begins
	// later (its first 503) too.
	readdressed, reset := map[string]time.Time{}, map[string]time.Time{}
	for _, c := range looks {
		if c.workload != name || c.pod == "" || !before[c.pod] {
			continue
		}
		if c.instance != "" && !addresses[c.pod][c.instance] {
			if t, ok := readdressed[c.pod]; !ok || c.first.Before(t) {
				readdressed[c.pod] = c.first
			}
		}
		if c.first.IsZero() || c.first.After(restart) {
			continue
		}
		if t, ok := reset[c.pod]; !ok || firstReset(c).Before(t) {
			reset[c.pod] = firstReset(c)
		}
	}
	isReaddressed := func(pod string) bool { _, ok := readdressed[pod]; return ok }
	resetOf := func(pod string) time.Time {
		if t, ok := reset[pod]; ok {
			return t
		}
		return never
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
		onTarget := known && p.Revision == expect
		newOne := onTarget && t.After(p.CreatedAt)
		switch {
		case known && !onTarget:
			return toOld
		case isReaddressed(c.pod) && addresses[c.pod][c.instance] && t.Before(firstReset(c)) &&
			(!c.first.After(restart) || c.first.Before(readdressed[c.pod])) && (!onTarget || t.Before(p.CreatedAt.Add(r.Step))):
			// The old incarnation's own address, to its last scrape: a
			// series there begun once the pod was scraped elsewhere, or
			// after its current incarnation was created, is a later
			// incarnation's, which may have got the address back.
			return toOld
		case isReaddressed(c.pod):
			if newOne {
				return toMoved
			}
			return toNeither
		case before[c.pod] && t.Before(resetOf(c.pod)) && (!onTarget || t.Before(p.CreatedAt.Add(r.Step))):
			// A scrape shows at the first step at or after it: the old
			// incarnation's last one can show up to a step after its
			// successor was created, before the successor's first reset.
			return toOld
		case newOne:
			return toMoved
		}
		return toNeither
	}
	for _, c := range looks {
		if c.workload != name {
			moved = append(moved, c)
			continue
		}
		m, o, n := c, c, c
		m.looks, o.looks, n.looks = make([]float64, len(c.looks)), make([]float64, len(c.looks)), make([]float64, len(c.looks))
		for k, v := range c.looks {
			switch which(c, at(k)) {
			case toMoved:
				m.looks[k] = v
			case toOld:
				o.looks[k] = v
			default:
				n.looks[k] = v
			}
		}
		moved, old, neither = append(moved, m), append(old, o), append(neither, n)
	}
	return moved, old, neither
}
