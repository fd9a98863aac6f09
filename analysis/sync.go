package analysis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/meshwave/meshwave/canary"
)

// GateSync is the xDS sync gate's name.
const GateSync = "xds-sync"

// Istiod is one Ready istiod pod.
type Istiod struct {
	Pod string
	IP  string
	// Revision is the revision it serves.
	Revision string
}

// SyncGate asks what istioctl proxy-status --revision asks: every Ready
// istiod pod of the target revision, since each replica knows only its own
// connections. It passes when every new proxy of the wave is connected to
// one of them and SYNCED on every type a sidecar subscribes to (a type it
// never subscribed to is reported NOT_SENT, which is fine). A proxy missing,
// connected to another revision, or not SYNCED when the timeout expires
// fails; an istiod that cannot be reached makes the answer inconclusive.
type SyncGate struct {
	Source SyncSource
	// Istiods lists the Ready istiod pods of a revision.
	Istiods func(revision string) []Istiod
	// Timeout is how long proxies have to get SYNCED; Interval is the
	// time between two rounds of questions.
	Timeout, Interval time.Duration
}

// Name implements Gate.
func (SyncGate) Name() string { return GateSync }

// Due reports whether Evaluate would ask istiod now.
func (g SyncGate) Due(wave canary.WaveUnderTest, now time.Time) bool {
	_, wait := notDue(wave, GateSync, g.Interval, now)
	return wave.Analysis.ReadyAt == nil && !wait
}

// Evaluate implements Gate.
func (g SyncGate) Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	if wave.Analysis.ReadyAt != nil {
		// The wave passed this gate before its metric checks began; asking
		// again every interval would hold them up for nothing.
		return canary.Verdict{Result: canary.ResultPass, Deferred: true, Reason: "verified before the metric checks began"}
	}
	if v, wait := notDue(wave, GateSync, g.Interval, now); wait {
		return v
	}
	want := map[string]string{} // proxy id -> workload
	for _, m := range wave.Workloads {
		for _, p := range m.Pods {
			if p.Current && !p.Terminating {
				want[p.Name+"."+wave.Namespace] = m.Name
			}
		}
	}
	started := now
	if t, ok := wave.Analysis.Started[GateSync]; ok {
		started = t
	}
	timedOut := !now.Before(started.Add(g.Timeout))
	istiods := g.Istiods(wave.TargetRevision)
	if len(istiods) == 0 {
		return checked(canary.ResultInconclusive, fmt.Sprintf("no Ready istiod pod of revision %s to ask", wave.TargetRevision), g.Interval)
	}
	found, unreachable := g.ask(ctx, istiods, wave.Namespace, want)

	var notSynced, missing []string
	failedBy := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		p, ok := found[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		if problem := syncProblem(p.ProxySync); problem != "" {
			line := fmt.Sprintf("%s %s with %s", id, problem, p.istiod)
			notSynced = append(notSynced, line)
			failedBy[want[id]] = append(failedBy[want[id]], line)
		}
	}
	synced := len(want) - len(missing) - len(notSynced)
	tally := fmt.Sprintf("%d of %d proxies SYNCED with istiod %s", synced, len(want), wave.TargetRevision)
	measure := []canary.Measurement{{Check: "proxies-synced", Value: float64(synced), Threshold: ptr(float64(len(want)))}}
	if len(missing) == 0 && len(notSynced) == 0 {
		v := checked(canary.ResultPass, tally, g.Interval)
		v.Measurements = measure
		return v
	}
	if len(unreachable) > 0 {
		v := checked(canary.ResultInconclusive, tally+"; "+strings.Join(unreachable, "; "), g.Interval)
		v.Measurements = measure
		return v
	}
	for _, id := range missing {
		line := id + " is not connected to istiod " + wave.TargetRevision
		if rev := g.connectedElsewhere(ctx, wave, id); rev != "" {
			line = fmt.Sprintf("%s is connected to istiod %s, not %s", id, rev, wave.TargetRevision)
		}
		notSynced = append(notSynced, line)
		failedBy[want[id]] = append(failedBy[want[id]], line)
	}
	reason := tally + "; " + strings.Join(notSynced, "; ")
	if !timedOut {
		v := checked(canary.ResultPending, reason, min(g.Interval, started.Add(g.Timeout).Sub(now)))
		v.Measurements = measure
		return v
	}
	v := checked(canary.ResultFail, fmt.Sprintf("%s after %s", reason, g.Timeout), g.Interval)
	v.Measurements = measure
	for _, w := range slices.Sorted(maps.Keys(failedBy)) {
		v.Failed = append(v.Failed, canary.WorkloadState{Name: w, State: canary.StateFailed, Reason: strings.Join(failedBy[w], "; ")})
	}
	return v
}

type foundProxy struct {
	ProxySync
	istiod string
}

// ask queries every replica and keeps the wanted proxies.
func (g SyncGate) ask(ctx context.Context, istiods []Istiod, namespace string, want map[string]string) (map[string]foundProxy, []string) {
	found := map[string]foundProxy{}
	var unreachable []string
	for _, d := range istiods {
		proxies, err := g.Source.Syncz(ctx, d, namespace)
		if err != nil {
			unreachable = append(unreachable, fmt.Sprintf("%s (%s) did not answer: %v", d.Pod, d.IP, err))
			continue
		}
		for _, p := range proxies {
			if _, ok := want[p.ID]; ok {
				found[p.ID] = foundProxy{ProxySync: p, istiod: d.Pod}
			}
		}
	}
	return found, unreachable
}

// connectedElsewhere looks for a proxy on the source revision's istiods,
// to say where a missing proxy went.
func (g SyncGate) connectedElsewhere(ctx context.Context, wave canary.WaveUnderTest, id string) string {
	if wave.SourceRevision == "" || wave.SourceRevision == wave.TargetRevision {
		return ""
	}
	found, _ := g.ask(ctx, g.Istiods(wave.SourceRevision), wave.Namespace, map[string]string{id: ""})
	if _, ok := found[id]; ok {
		return wave.SourceRevision
	}
	return ""
}

// syncProblem describes what keeps a proxy from being in sync, or "".
func syncProblem(p ProxySync) string {
	var bad []string
	for _, t := range requiredTypes {
		switch s := p.Status[t]; s {
		case statusv3.ConfigStatus_SYNCED:
		case statusv3.ConfigStatus_ERROR:
			bad = append(bad, "ERROR (NACK) on "+shortType[t])
		default:
			bad = append(bad, s.String()+" on "+shortType[t])
		}
	}
	for t, s := range p.Status {
		if isRequired(t) {
			continue
		}
		if s == statusv3.ConfigStatus_STALE || s == statusv3.ConfigStatus_ERROR {
			bad = append(bad, s.String()+" on "+typeName(t))
		}
	}
	sort.Strings(bad)
	return strings.Join(bad, ", ")
}

func isRequired(t string) bool {
	for _, r := range requiredTypes {
		if r == t {
			return true
		}
	}
	return false
}

func typeName(t string) string {
	if s, ok := shortType[t]; ok {
		return s
	}
	return t
}

// notDue returns a deferred verdict when a gate that asks an outside
// system ran less than interval ago.
func notDue(wave canary.WaveUnderTest, gate string, interval time.Duration, now time.Time) (canary.Verdict, bool) {
	last, ok := wave.Analysis.Checked[gate]
	if !ok || !now.Before(last.Add(interval)) {
		return canary.Verdict{}, false
	}
	return canary.Verdict{Result: canary.ResultPending, Deferred: true, Reason: "next check in " + last.Add(interval).Sub(now).Round(time.Second).String(), RetryAfter: last.Add(interval).Sub(now)}, true
}

func checked(r canary.Result, reason string, retry time.Duration) canary.Verdict {
	return canary.Verdict{Result: r, Reason: reason, RetryAfter: retry, Checked: true}
}

func ptr[T any](v T) *T { return &v }
