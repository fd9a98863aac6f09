package analysis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
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
// one of them and in sync (see syncProblem). A proxy missing, connected to
// another revision, or not in sync when the timeout expires fails; an
// istiod that cannot be asked, or an answer the agent is not allowed to
// see in full, makes the result inconclusive, never a pass.
//
// Each run asks each Ready istiod of the target once, and the source
// revision's istiods once more only when a proxy is missing, to say where
// it went; then judge decides from the answers alone.
type SyncGate struct {
	Source SyncSource
	// Istiods lists the Ready istiod pods of a revision.
	Istiods func(revision string) []Istiod
	// RootNamespace is where istiod runs (the agent's rootNamespace). istiod
	// shows a caller from any other namespace only that namespace's
	// proxies, unless its DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists it.
	RootNamespace string
	// Timeout is how long proxies have to get in sync; Interval is the
	// time between two rounds of questions.
	Timeout, Interval time.Duration
	// Ztunnels lists the ztunnel pods of a node: a wave into ambient mode
	// has no sidecar to ask about, and the ztunnel of each new pod's node
	// must be in sync instead (ztunnelsync.go). Nil: no ztunnel is known.
	Ztunnels func(node string) []ZtunnelPod
	// Dumps reads a ztunnel's config dump: once the ztunnels of a wave
	// into ambient mode are SYNCED, each must hold the wave's new pods of
	// its node as HBONE (ztunneldump.go). Nil: syncz alone decides.
	Dumps ZtunnelDumps
}

// IstiodAnswer is what one istiod replica said, or why it could not be
// asked.
type IstiodAnswer struct {
	Istiod  Istiod
	Proxies []ProxySync
	Err     error
}

// SyncObservation is everything one run of the gate learnt from istiod.
type SyncObservation struct {
	// Target holds an answer from each Ready istiod of the target revision.
	Target []IstiodAnswer
	// Source holds the source revision's answers, asked only when a
	// proxy of the wave was missing from the target's.
	Source []IstiodAnswer
	// CallerNamespace is the namespace of the identity the questions were
	// asked with; "" when unknown.
	CallerNamespace string
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
	v := g.judge(wave, g.observe(ctx, wave), now)
	if wave.Ambient && g.Dumps != nil && v.Result == canary.ResultPass {
		pods := g.podsToHold(wave)
		v = g.judgeHeld(wave, pods, g.readDumps(ctx, pods), v, now)
	}
	if wave.Ambient && wave.Waypoint != "" {
		ww := waypointWave(wave)
		v = withWaypoint(v, g.judge(ww, g.observe(ctx, ww), now), wave)
	}
	return v
}

// observe asks istiod what the gate needs for one run: each Ready istiod of
// the target revision once, and, only when every one of them answered and
// a proxy of the wave is missing from their answers, each Ready istiod of
// the source revision once.
func (g SyncGate) observe(ctx context.Context, wave canary.WaveUnderTest) SyncObservation {
	obs := SyncObservation{Target: g.ask(ctx, g.Istiods(wave.TargetRevision), g.proxiesNamespace(wave))}
	if ns, err := g.Source.CallerNamespace(); err == nil {
		obs.CallerNamespace = ns
	}
	want, _ := g.wanted(wave)
	answered := len(obs.Target) > 0
	for _, a := range obs.Target {
		answered = answered && a.Err == nil
	}
	if answered && len(mergeAnswers(obs.Target, want, nil)) < len(want) && wave.SourceRevision != "" && wave.SourceRevision != wave.TargetRevision {
		obs.Source = g.ask(ctx, g.Istiods(wave.SourceRevision), g.proxiesNamespace(wave))
	}
	return obs
}

// ask questions the replicas in parallel, one request each, and returns
// their answers in the order given.
func (g SyncGate) ask(ctx context.Context, istiods []Istiod, namespace string) []IstiodAnswer {
	out := make([]IstiodAnswer, len(istiods))
	var wg sync.WaitGroup
	for i, d := range istiods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			proxies, err := g.Source.Syncz(ctx, d, namespace)
			out[i] = IstiodAnswer{Istiod: d, Proxies: proxies, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// wantedProxies are the wave's new proxies, by syncz id (pod.namespace),
// with the workload each belongs to.
func wantedProxies(wave canary.WaveUnderTest) map[string][]string {
	want := map[string][]string{}
	for _, m := range wave.Workloads {
		for _, p := range m.Pods {
			if p.Current && !p.Terminating {
				want[p.Name+"."+wave.Namespace] = []string{m.Name}
			}
		}
	}
	return want
}

type foundProxy struct {
	ProxySync
	istiod  string
	problem string
}

// mergeAnswers keeps the wanted proxies of the answers. A proxy listed by
// two replicas (a stream that moved, the old one not yet closed) counts as
// in sync when either says so.
func mergeAnswers(answers []IstiodAnswer, want map[string][]string, always []string) map[string]foundProxy {
	found := map[string]foundProxy{}
	for _, a := range answers {
		for _, p := range a.Proxies {
			if _, ok := want[p.ID]; !ok {
				continue
			}
			f := foundProxy{ProxySync: p, istiod: a.Istiod.Pod, problem: syncProblem(p, always)}
			if prev, ok := found[p.ID]; !ok || (prev.problem != "" && f.problem == "") {
				found[p.ID] = f
			}
		}
	}
	return found
}

// judge decides a run from its observation alone: no I/O, no clock.
func (g SyncGate) judge(wave canary.WaveUnderTest, obs SyncObservation, now time.Time) canary.Verdict {
	if len(obs.Target) == 0 {
		return checked(canary.ResultInconclusive, fmt.Sprintf("no Ready istiod pod of revision %s to ask", wave.TargetRevision), g.Interval)
	}
	want, absent := g.wanted(wave)
	started := now
	if t, ok := wave.Analysis.Started[GateSync]; ok {
		started = t
	}
	timedOut := !now.Before(started.Add(g.Timeout))

	found := mergeAnswers(obs.Target, want, subscribedBy(wave))
	var unasked []string
	for _, a := range obs.Target {
		if a.Err != nil {
			unasked = append(unasked, fmt.Sprintf("could not ask %s (%s): %v", a.Istiod.Pod, a.Istiod.IP, a.Err))
		}
	}
	var missing, problems []string
	failedBy := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		p, ok := found[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		if p.problem != "" {
			line := fmt.Sprintf("%s %s with %s", id, p.problem, p.istiod)
			problems = append(problems, line)
			for _, w := range want[id] {
				failedBy[w] = append(failedBy[w], line)
			}
		}
	}
	synced := len(want) - len(missing) - len(problems)
	for _, w := range slices.Sorted(maps.Keys(absent)) {
		problems = append(problems, absent[w]...)
		failedBy[w] = append(failedBy[w], absent[w]...)
	}
	what, check := "proxies", "proxies-synced"
	if wave.Ambient {
		what, check = "ztunnels", "ztunnels-synced"
	}
	tally := fmt.Sprintf("%d of %d %s SYNCED with istiod %s", synced, len(want), what, wave.TargetRevision)
	measure := []canary.Measurement{{Check: check, Value: float64(synced), Threshold: ptr(float64(len(want)))}}
	verdict := func(r canary.Result, reason string, retry time.Duration) canary.Verdict {
		v := checked(r, reason, retry)
		v.Measurements = measure
		return v
	}
	if len(missing) == 0 && len(problems) == 0 {
		return verdict(canary.ResultPass, tally, g.Interval)
	}
	if len(unasked) > 0 {
		// The replica that did not answer may hold the proxies missing or
		// a newer stream of those not in sync.
		return verdict(canary.ResultInconclusive, tally+"; "+strings.Join(unasked, "; "), g.Interval)
	}
	elsewhere := mergeAnswers(obs.Source, want, nil)
	for _, id := range missing {
		line := id + " is not connected to istiod " + wave.TargetRevision
		if _, ok := elsewhere[id]; ok {
			line = fmt.Sprintf("%s is connected to istiod %s, not %s", id, wave.SourceRevision, wave.TargetRevision)
		}
		problems = append(problems, line)
		for _, w := range want[id] {
			failedBy[w] = append(failedBy[w], line)
		}
	}
	reason := tally + "; " + strings.Join(problems, "; ")
	blind := len(missing) > 0 && g.cannotSee(g.proxiesNamespace(wave), obs)
	if blind {
		reason += "; " + g.blindness(g.proxiesNamespace(wave), obs.CallerNamespace)
	}
	if !timedOut {
		return verdict(canary.ResultPending, reason, min(g.Interval, started.Add(g.Timeout).Sub(now)))
	}
	if blind {
		return verdict(canary.ResultInconclusive, reason, g.Interval)
	}
	v := verdict(canary.ResultFail, fmt.Sprintf("%s after %s", reason, g.Timeout), g.Interval)
	for _, w := range slices.Sorted(maps.Keys(failedBy)) {
		v.Failed = append(v.Failed, canary.WorkloadState{Name: w, State: canary.StateFailed, Reason: strings.Join(failedBy[w], "; ")})
	}
	return v
}

// cannotSee reports whether the answers may have been filtered: since Istio
// 1.28.7, 1.29.3 and 1.30, istiod lists to a caller outside its root
// namespace only the proxies of the caller's own namespace, unless
// DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists it. The answers look the
// same either way; only a proxy of another namespace in them proves that
// istiod showed everything.
func (g SyncGate) cannotSee(namespace string, obs SyncObservation) bool {
	caller := obs.CallerNamespace
	if caller == "" || caller == g.RootNamespace || caller == namespace {
		return false
	}
	for _, a := range slices.Concat(obs.Target, obs.Source) {
		for _, p := range a.Proxies {
			if proxyNamespace(p.ID) != caller {
				return false
			}
		}
	}
	return true
}

func (g SyncGate) blindness(namespace, caller string) string {
	return fmt.Sprintf("meshwave asks as namespace %s and istiod listed no proxy outside it: outside the root namespace %s, "+
		"istiod shows a caller only its own namespace's proxies unless DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists it, so those of %s may be hidden",
		caller, g.RootNamespace, namespace)
}

// proxyNamespace is the namespace of a syncz id, <pod>.<namespace>.
func proxyNamespace(id string) string {
	if i := strings.LastIndex(id, "."); i >= 0 {
		return id[i+1:]
	}
	return ""
}

// alwaysSubscribed are the types every sidecar subscribes to. It asks for
// EDS and RDS only when its clusters and listeners name resources of those
// types, and for ECDS only when its configuration uses extension configs.
var alwaysSubscribed = []string{TypeCDS, TypeLDS}

// typeOrder is the order problems are listed in.
var typeOrder = []string{TypeCDS, TypeLDS, TypeEDS, TypeRDS, TypeECDS}

// maxNACKDetail bounds the part of a proxy's NACK message a reason quotes.
const maxNACKDetail = 120

// syncProblem describes, in istioctl's words, what keeps a proxy from being
// in sync, or returns "". A proxy is in sync when it subscribed to CDS and
// LDS and every type it subscribed to is SYNCED: the last nonce istiod sent
// was ACKed. A type it never subscribed to is absent from syncz (istioctl
// shows IGNORED), which is normal but for CDS and LDS. NOT_SENT means
// subscribed but nothing sent yet; ERROR is a NACK, whatever the nonces.
func syncProblem(p ProxySync, always []string) string {
	var bad []string
	for _, t := range always {
		if _, ok := p.Status[t]; !ok {
			bad = append(bad, "not subscribed to "+typeName(t))
		}
	}
	types := slices.SortedFunc(maps.Keys(p.Status), func(a, b string) int {
		ia, ib := slices.Index(typeOrder, a), slices.Index(typeOrder, b)
		if ia < 0 {
			ia = len(typeOrder)
		}
		if ib < 0 {
			ib = len(typeOrder)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	for _, t := range types {
		switch s := p.Status[t]; s {
		case statusv3.ConfigStatus_SYNCED:
		case statusv3.ConfigStatus_ERROR:
			line := "ERROR (NACK) on " + typeName(t)
			if d := p.Errors[t]; d != "" {
				if r := []rune(d); len(r) > maxNACKDetail {
					d = string(r[:maxNACKDetail]) + "…"
				}
				line += fmt.Sprintf(" (%q)", d)
			}
			bad = append(bad, line)
		default:
			bad = append(bad, s.String()+" on "+typeName(t))
		}
	}
	return strings.Join(bad, ", ")
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
