package analysis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/meshwave/meshwave/canary"
)

// A wave into ambient behind a waypoint passes the sync gate only when
// the waypoint's proxies are in sync with the target's istiod too: the
// moved pods' traffic goes through them.
func TestTheSyncGateOfAWaveBehindAWaypointHoldsTheWaypointsProxiesToo(t *testing.T) {
	istiods := map[string][]Istiod{"1-26": {replicaA}}
	g := SyncGate{RootNamespace: "istio-system", Timeout: 2 * time.Minute, Interval: 5 * time.Second,
		Istiods: func(rev string) []Istiod { return istiods[rev] },
		Ztunnels: func(string) []ZtunnelPod {
			return []ZtunnelPod{{Pod: "ztunnel-a", Namespace: "istio-system", Ready: true}}
		}}
	w := ambientWave(member("cart", ambientPod("cart-1", "n1", true)), member("web", ambientPod("web-1", "n1", true)))
	w.Analysis.Started = map[string]time.Time{GateSync: t0}
	w.Waypoint, w.WaypointPods = "waypoint", []canary.Pod{{Name: "waypoint-7c9-x", Ready: true, Running: true}}

	for _, tt := range []struct {
		name    string
		proxies []ProxySync
		now     time.Time
		result  canary.Result
		reason  string
		failed  []canary.WorkloadState
	}{
		{"both in sync", []ProxySync{ztunnel("ztunnel-a.istio-system"), sidecar("waypoint-7c9-x.shop")}, t0, canary.ResultPass,
			"1 of 1 ztunnels SYNCED with istiod 1-26; waypoint waypoint: 1 of 1 proxies SYNCED with istiod 1-26", nil},
		{"the waypoint not connected yet", []ProxySync{ztunnel("ztunnel-a.istio-system")}, t0.Add(time.Minute), canary.ResultPending,
			"1 of 1 ztunnels SYNCED with istiod 1-26; waypoint waypoint: 0 of 1 proxies SYNCED with istiod 1-26; waypoint-7c9-x.shop is not connected to istiod 1-26", nil},
		{"the waypoint stale at the timeout fails every member", []ProxySync{ztunnel("ztunnel-a.istio-system"), with(sidecar("waypoint-7c9-x.shop"), TypeCDS, stale)},
			t0.Add(2 * time.Minute), canary.ResultFail,
			"1 of 1 ztunnels SYNCED with istiod 1-26; waypoint waypoint: 0 of 1 proxies SYNCED with istiod 1-26; waypoint-7c9-x.shop STALE on CDS with istiod-1-26-a after 2m0s",
			[]canary.WorkloadState{
				{Name: "cart", State: canary.StateFailed, Reason: "waypoint waypoint: 0 of 1 proxies SYNCED with istiod 1-26; waypoint-7c9-x.shop STALE on CDS with istiod-1-26-a after 2m0s"},
				{Name: "web", State: canary.StateFailed, Reason: "waypoint waypoint: 0 of 1 proxies SYNCED with istiod 1-26; waypoint-7c9-x.shop STALE on CDS with istiod-1-26-a after 2m0s"},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := &countingSource{asked: map[string]int{}, caller: "istio-system", answers: map[string][]ProxySync{replicaA.IP: tt.proxies}}
			g := g
			g.Source = src
			v := g.Evaluate(context.Background(), w, tt.now)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			assert.Equal(t, tt.failed, v.Failed)
			assert.Equal(t, map[string]int{"istiod-1-26-a istio-system": 1, "istiod-1-26-a shop": 1}, src.asked, "the ztunnels in the root namespace, the waypoint in the wave's")
		})
	}

	// With no live pod of the waypoint, nothing carries the wave's traffic.
	gone := w
	gone.WaypointPods = nil
	g.Source = &countingSource{asked: map[string]int{}, caller: "istio-system", answers: map[string][]ProxySync{replicaA.IP: {ztunnel("ztunnel-a.istio-system")}}}
	v := g.Evaluate(context.Background(), gone, t0)
	assert.Equal(t, canary.ResultInconclusive, v.Result)
	assert.Equal(t, "1 of 1 ztunnels SYNCED with istiod 1-26; waypoint waypoint: no live pod of waypoint waypoint", v.Reason)
}
