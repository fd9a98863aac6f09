package analysis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

const (
	synced   = statusv3.ConfigStatus_SYNCED
	stale    = statusv3.ConfigStatus_STALE
	notSent  = statusv3.ConfigStatus_NOT_SENT
	nacked   = statusv3.ConfigStatus_ERROR
	unknownS = statusv3.ConfigStatus_UNKNOWN
)

// sidecar is a proxy subscribed to CDS, LDS, EDS and RDS, all SYNCED, as
// istiod reports a sidecar whose configuration names endpoints and routes.
func sidecar(id string) ProxySync {
	return ProxySync{ID: id, Status: map[string]statusv3.ConfigStatus{TypeCDS: synced, TypeLDS: synced, TypeEDS: synced, TypeRDS: synced}}
}

// with changes the status of one type; statusv3.ConfigStatus(-1) removes
// it, as istiod leaves out a type the proxy never subscribed to.
func with(p ProxySync, t string, s statusv3.ConfigStatus) ProxySync {
	st := map[string]statusv3.ConfigStatus{}
	for k, v := range p.Status {
		st[k] = v
	}
	if s < 0 {
		delete(st, t)
	} else {
		st[t] = s
	}
	p.Status = st
	return p
}

const unsubscribed = statusv3.ConfigStatus(-1)

func nack(p ProxySync, t, message string) ProxySync {
	p = with(p, t, nacked)
	p.Errors = map[string]string{t: message}
	return p
}

var (
	replicaA = Istiod{Pod: "istiod-1-26-a", IP: "10.0.0.1", Revision: "1-26"}
	replicaB = Istiod{Pod: "istiod-1-26-b", IP: "10.0.0.2", Revision: "1-26"}
	sourceA  = Istiod{Pod: "istiod-1-25-a", IP: "10.0.1.1", Revision: "1-25"}
)

func answer(d Istiod, ps ...ProxySync) IstiodAnswer { return IstiodAnswer{Istiod: d, Proxies: ps} }

func TestSyncProblemSpeaksIstioctlsWords(t *testing.T) {
	tests := []struct {
		name  string
		proxy ProxySync
		want  string
	}{
		{"every subscribed type SYNCED is in sync", sidecar("a.shop"), ""},
		{"EDS and RDS are subscribed only when the configuration names them", with(with(sidecar("a.shop"), TypeEDS, unsubscribed), TypeRDS, unsubscribed), ""},
		{"a STALE type: the last push was not ACKed", with(sidecar("a.shop"), TypeRDS, stale), "STALE on RDS"},
		{"a NACK is ERROR, with its message", nack(sidecar("a.shop"), TypeRDS, "route: duplicate virtual host"), `ERROR (NACK) on RDS ("route: duplicate virtual host")`},
		{"a NACK without a message", with(sidecar("a.shop"), TypeLDS, nacked), "ERROR (NACK) on LDS"},
		{"NOT_SENT: subscribed, nothing sent yet", with(sidecar("a.shop"), TypeEDS, notSent), "NOT_SENT on EDS"},
		{"a sidecar always subscribes to LDS", with(sidecar("a.shop"), TypeLDS, unsubscribed), "not subscribed to LDS"},
		{"a proxy that subscribed to nothing", ProxySync{ID: "a.shop"}, "not subscribed to CDS, not subscribed to LDS"},
		{"ECDS, when subscribed, must be SYNCED too", with(sidecar("a.shop"), TypeECDS, stale), "STALE on ECDS"},
		{"a status istiod does not name", with(sidecar("a.shop"), TypeCDS, unknownS), "UNKNOWN on CDS"},
		{"a type meshwave has no short name for is named by its URL", with(sidecar("a.shop"), "type.googleapis.com/x.Y", stale), "STALE on type.googleapis.com/x.Y"},
		{"several problems, in CDS, LDS, EDS, RDS order", nack(with(with(sidecar("a.shop"), TypeRDS, stale), TypeCDS, notSent), TypeLDS, "bad"),
			`NOT_SENT on CDS, ERROR (NACK) on LDS ("bad"), STALE on RDS`},
		{"a long NACK message is cut", nack(sidecar("a.shop"), TypeRDS, strings.Repeat("x", 200)),
			`ERROR (NACK) on RDS ("` + strings.Repeat("x", 120) + `…")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, syncProblem(tt.proxy, alwaysSubscribed))
		})
	}
}

func TestJudgeSync(t *testing.T) {
	w := wave(member("cart", pod("cart-1", "1-26"), pod("cart-2", "1-26")))
	w.Analysis.Started = map[string]time.Time{GateSync: t0}
	other := wave(member("cart", pod("cart-1", "1-26")))
	other.Namespace = "ops"
	other.Analysis.Started = map[string]time.Time{GateSync: t0}
	dead := errors.New("connection refused")
	tests := []struct {
		name   string
		wave   canary.WaveUnderTest
		obs    SyncObservation
		now    time.Time
		result canary.Result
		reason string
		failed []canary.WorkloadState
	}{
		{"every proxy SYNCED on some replica passes", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, sidecar("cart-1.shop"), sidecar("other-1.shop")), answer(replicaB, sidecar("cart-2.shop")),
		}}, t0, canary.ResultPass, "2 of 2 proxies SYNCED with istiod 1-26", nil},
		{"a proxy with no routes or endpoints to ask for passes on CDS and LDS", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, with(with(sidecar("cart-1.shop"), TypeRDS, unsubscribed), TypeEDS, unsubscribed), sidecar("cart-2.shop")),
		}}, t0, canary.ResultPass, "2 of 2 proxies SYNCED with istiod 1-26", nil},
		{"a STALE proxy within the timeout is pending", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, with(sidecar("cart-1.shop"), TypeRDS, stale), sidecar("cart-2.shop")), answer(replicaB),
		}}, t0.Add(30 * time.Second), canary.ResultPending, "1 of 2 proxies SYNCED with istiod 1-26; cart-1.shop STALE on RDS with istiod-1-26-a", nil},
		{"a STALE proxy past the timeout fails, naming the pod, the type and the replica", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, with(sidecar("cart-1.shop"), TypeRDS, stale), sidecar("cart-2.shop")), answer(replicaB),
		}}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 proxies SYNCED with istiod 1-26; cart-1.shop STALE on RDS with istiod-1-26-a after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-1.shop STALE on RDS with istiod-1-26-a"}}},
		{"a NACK fails as ERROR, never SYNCED, whatever its nonces", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, nack(sidecar("cart-1.shop"), TypeRDS, "simulated NACK"), sidecar("cart-2.shop")),
		}}, t0.Add(2 * time.Minute), canary.ResultFail, `1 of 2 proxies SYNCED with istiod 1-26; cart-1.shop ERROR (NACK) on RDS ("simulated NACK") with istiod-1-26-a after 2m0s`,
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: `cart-1.shop ERROR (NACK) on RDS ("simulated NACK") with istiod-1-26-a`}}},
		{"a proxy that never subscribed to LDS is not in sync", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, with(sidecar("cart-1.shop"), TypeLDS, unsubscribed), sidecar("cart-2.shop")),
		}}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 proxies SYNCED with istiod 1-26; cart-1.shop not subscribed to LDS with istiod-1-26-a after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-1.shop not subscribed to LDS with istiod-1-26-a"}}},
		{"a proxy listed by two replicas counts as SYNCED when one says so", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, with(sidecar("cart-1.shop"), TypeCDS, stale), sidecar("cart-2.shop")), answer(replicaB, sidecar("cart-1.shop")),
		}}, t0, canary.ResultPass, "2 of 2 proxies SYNCED with istiod 1-26", nil},
		{"a proxy still on the source istiod fails after the timeout, saying where it is", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA, sidecar("cart-1.shop")), answer(replicaB)},
			Source: []IstiodAnswer{answer(sourceA, sidecar("cart-2.shop"))},
		}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 proxies SYNCED with istiod 1-26; cart-2.shop is connected to istiod 1-25, not 1-26 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-2.shop is connected to istiod 1-25, not 1-26"}}},
		{"a missing proxy is pending before the timeout", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA, sidecar("cart-1.shop")), answer(replicaB)},
			Source: []IstiodAnswer{answer(sourceA)},
		}, t0.Add(time.Second), canary.ResultPending, "1 of 2 proxies SYNCED with istiod 1-26; cart-2.shop is not connected to istiod 1-26", nil},
		{"a source istiod that cannot be asked only leaves out where a proxy went", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA, sidecar("cart-1.shop"))},
			Source: []IstiodAnswer{{Istiod: sourceA, Err: dead}},
		}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 proxies SYNCED with istiod 1-26; cart-2.shop is not connected to istiod 1-26 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-2.shop is not connected to istiod 1-26"}}},
		{"a replica that cannot be asked and might hold a missing proxy makes it inconclusive", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, sidecar("cart-1.shop")), {Istiod: replicaB, Err: dead},
		}}, t0.Add(5 * time.Minute), canary.ResultInconclusive, "1 of 2 proxies SYNCED with istiod 1-26; could not ask istiod-1-26-b (10.0.0.2): connection refused", nil},
		{"a replica that cannot be asked does not matter when every proxy was found", w, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, sidecar("cart-1.shop"), sidecar("cart-2.shop")), {Istiod: replicaB, Err: dead},
		}}, t0, canary.ResultPass, "2 of 2 proxies SYNCED with istiod 1-26", nil},
		{"no Ready istiod is inconclusive", w, SyncObservation{}, t0, canary.ResultInconclusive, "no Ready istiod pod of revision 1-26 to ask", nil},
		{"a caller outside the root namespace that istiod shows nothing of another namespace waits, saying why", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA, sidecar("probe-1.ops"))}, Source: []IstiodAnswer{answer(sourceA)}, CallerNamespace: "ops",
		}, t0.Add(time.Minute), canary.ResultPending, "0 of 2 proxies SYNCED with istiod 1-26; cart-1.shop is not connected to istiod 1-26; cart-2.shop is not connected to istiod 1-26; " +
			"meshwave asks as namespace ops and istiod listed no proxy outside it: outside the root namespace istio-system, istiod shows a caller only its own namespace's proxies " +
			"unless DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists it, so those of shop may be hidden", nil},
		{"... and never fails a wave it may not see: past the timeout it is inconclusive", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA)}, Source: []IstiodAnswer{answer(sourceA)}, CallerNamespace: "ops",
		}, t0.Add(2 * time.Minute), canary.ResultInconclusive, "0 of 2 proxies SYNCED with istiod 1-26; cart-1.shop is not connected to istiod 1-26; cart-2.shop is not connected to istiod 1-26; " +
			"meshwave asks as namespace ops and istiod listed no proxy outside it: outside the root namespace istio-system, istiod shows a caller only its own namespace's proxies " +
			"unless DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES lists it, so those of shop may be hidden", nil},
		{"a caller outside the root namespace shown a proxy of another namespace sees everything", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA, sidecar("cart-1.shop"))}, Source: []IstiodAnswer{answer(sourceA)}, CallerNamespace: "ops",
		}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 proxies SYNCED with istiod 1-26; cart-2.shop is not connected to istiod 1-26 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-2.shop is not connected to istiod 1-26"}}},
		{"... the source revision's proxies prove it too", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA)}, Source: []IstiodAnswer{answer(sourceA, sidecar("web-1.shop"))}, CallerNamespace: "ops",
		}, t0.Add(2 * time.Minute), canary.ResultFail, "0 of 2 proxies SYNCED with istiod 1-26; cart-1.shop is not connected to istiod 1-26; cart-2.shop is not connected to istiod 1-26 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-1.shop is not connected to istiod 1-26; cart-2.shop is not connected to istiod 1-26"}}},
		{"a caller in the wave's own namespace always sees the wave", other, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA)}, CallerNamespace: "ops",
		}, t0.Add(2 * time.Minute), canary.ResultFail, "0 of 1 proxies SYNCED with istiod 1-26; cart-1.ops is not connected to istiod 1-26 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-1.ops is not connected to istiod 1-26"}}},
		{"a caller in the root namespace sees everything", w, SyncObservation{
			Target: []IstiodAnswer{answer(replicaA)}, CallerNamespace: "istio-system",
		}, t0.Add(2 * time.Minute), canary.ResultFail, "0 of 2 proxies SYNCED with istiod 1-26; cart-1.shop is not connected to istiod 1-26; cart-2.shop is not connected to istiod 1-26 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "cart-1.shop is not connected to istiod 1-26; cart-2.shop is not connected to istiod 1-26"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := SyncGate{RootNamespace: "istio-system", Timeout: 2 * time.Minute, Interval: 5 * time.Second}
			v := g.judge(tt.wave, tt.obs, tt.now)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			assert.Equal(t, tt.failed, v.Failed)
			assert.True(t, v.Checked)
		})
	}
}

func TestJudgeSyncMeasuresTheProxiesSynced(t *testing.T) {
	w := wave(member("cart", pod("cart-1", "1-26"), pod("cart-2", "1-26")))
	v := SyncGate{Timeout: time.Minute, Interval: time.Second}.judge(w, SyncObservation{Target: []IstiodAnswer{answer(replicaA, sidecar("cart-1.shop"))}}, t0)
	require.Len(t, v.Measurements, 1)
	assert.Equal(t, "proxies-synced", v.Measurements[0].Check)
	assert.Equal(t, 1.0, v.Measurements[0].Value)
	assert.Equal(t, 2.0, *v.Measurements[0].Threshold)
	assert.Equal(t, time.Second, v.RetryAfter)
}

// countingSource answers from a table by IP (a missing IP cannot be asked)
// and counts the questions each istiod got.
type countingSource struct {
	answers map[string][]ProxySync
	caller  string
	mu      sync.Mutex
	asked   map[string]int
}

func (c *countingSource) Syncz(_ context.Context, d Istiod, namespace string) ([]ProxySync, error) {
	c.mu.Lock()
	c.asked[d.Pod+" "+namespace]++
	c.mu.Unlock()
	ps, ok := c.answers[d.IP]
	if !ok {
		return nil, errors.New("connection refused")
	}
	return ps, nil
}

func (c *countingSource) CallerNamespace() (string, error) { return c.caller, nil }

func TestTheSyncGateAsksEachIstiodOncePerRun(t *testing.T) {
	istiods := map[string][]Istiod{"1-26": {replicaA, replicaB}, "1-25": {sourceA}}
	w := wave(member("cart", pod("cart-1", "1-26"), pod("cart-2", "1-26"), pod("cart-3", "1-26")))
	w.Analysis.Started = map[string]time.Time{GateSync: t0}

	t.Run("three proxies missing: each target replica once, the source once", func(t *testing.T) {
		src := &countingSource{asked: map[string]int{}, caller: "istio-system", answers: map[string][]ProxySync{
			"10.0.0.1": nil, "10.0.0.2": nil, "10.0.1.1": {sidecar("cart-1.shop"), sidecar("cart-2.shop"), sidecar("cart-3.shop")},
		}}
		g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(rev string) []Istiod { return istiods[rev] }, Timeout: time.Minute, Interval: time.Second}
		v := g.Evaluate(context.Background(), w, t0.Add(time.Minute))
		assert.Equal(t, canary.ResultFail, v.Result)
		assert.Equal(t, "0 of 3 proxies SYNCED with istiod 1-26; cart-1.shop is connected to istiod 1-25, not 1-26; "+
			"cart-2.shop is connected to istiod 1-25, not 1-26; cart-3.shop is connected to istiod 1-25, not 1-26 after 1m0s", v.Reason)
		assert.Equal(t, map[string]int{"istiod-1-26-a shop": 1, "istiod-1-26-b shop": 1, "istiod-1-25-a shop": 1}, src.asked)
	})
	t.Run("every proxy found: the source is not asked", func(t *testing.T) {
		src := &countingSource{asked: map[string]int{}, answers: map[string][]ProxySync{
			"10.0.0.1": {sidecar("cart-1.shop"), sidecar("cart-3.shop")}, "10.0.0.2": {sidecar("cart-2.shop")}, "10.0.1.1": nil,
		}}
		g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(rev string) []Istiod { return istiods[rev] }, Timeout: time.Minute, Interval: time.Second}
		v := g.Evaluate(context.Background(), w, t0)
		assert.Equal(t, canary.ResultPass, v.Result)
		assert.Equal(t, map[string]int{"istiod-1-26-a shop": 1, "istiod-1-26-b shop": 1}, src.asked)
	})
	t.Run("a target replica that cannot be asked: the answer is inconclusive, the source not asked", func(t *testing.T) {
		src := &countingSource{asked: map[string]int{}, answers: map[string][]ProxySync{"10.0.0.1": nil, "10.0.1.1": nil}}
		g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(rev string) []Istiod { return istiods[rev] }, Timeout: time.Minute, Interval: time.Second}
		v := g.Evaluate(context.Background(), w, t0)
		assert.Equal(t, canary.ResultInconclusive, v.Result)
		assert.Equal(t, map[string]int{"istiod-1-26-a shop": 1, "istiod-1-26-b shop": 1}, src.asked)
	})
	t.Run("no Ready istiod of the target: nothing is asked", func(t *testing.T) {
		src := &countingSource{asked: map[string]int{}}
		g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(rev string) []Istiod { return istiods[rev] }, Timeout: time.Minute, Interval: time.Second}
		other := w
		other.TargetRevision = "1-27"
		v := g.Evaluate(context.Background(), other, t0)
		assert.Equal(t, "no Ready istiod pod of revision 1-27 to ask", v.Reason)
		assert.Empty(t, src.asked)
	})
	t.Run("a rollback's wave (source equals target) never asks twice", func(t *testing.T) {
		same := w
		same.SourceRevision = "1-26"
		src := &countingSource{asked: map[string]int{}, answers: map[string][]ProxySync{"10.0.0.1": nil, "10.0.0.2": nil}}
		g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(rev string) []Istiod { return istiods[rev] }, Timeout: time.Minute, Interval: time.Second}
		g.Evaluate(context.Background(), same, t0)
		assert.Equal(t, map[string]int{"istiod-1-26-a shop": 1, "istiod-1-26-b shop": 1}, src.asked)
	})
}

func TestSyncGateWaitsItsInterval(t *testing.T) {
	w := wave(member("cart", pod("cart-1", "1-26")))
	w.Analysis.Checked = map[string]time.Time{GateSync: t0}
	src := &countingSource{asked: map[string]int{}}
	g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(string) []Istiod { return []Istiod{replicaA} }, Timeout: time.Minute, Interval: 5 * time.Second}
	v := g.Evaluate(context.Background(), w, t0.Add(2*time.Second))
	assert.Equal(t, canary.ResultPending, v.Result)
	assert.True(t, v.Deferred)
	assert.Equal(t, 3*time.Second, v.RetryAfter)
	assert.Empty(t, src.asked, "istiod is not asked before the interval")
}

func TestSyncGateIsNotAskedAgainOnceTheMetricChecksBegan(t *testing.T) {
	w := wave(member("cart", pod("cart-1", "1-26")))
	ready := t0
	w.Analysis.ReadyAt = &ready
	src := &countingSource{asked: map[string]int{}}
	g := SyncGate{Source: src, RootNamespace: "istio-system", Istiods: func(string) []Istiod { return []Istiod{replicaA} }, Timeout: time.Minute, Interval: 5 * time.Second}
	v := g.Evaluate(context.Background(), w, t0.Add(time.Minute))
	assert.Equal(t, canary.ResultPass, v.Result)
	assert.True(t, v.Deferred)
	assert.Empty(t, src.asked)
}
