package analysis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// A ztunnel's /config_dump as its admin writes it (src/state.rs,
// ProxyStateSerialization): the workloads array beside keys the gate
// does not read.
const ztunnelDump = `{
  "workloads": [
    {"workloadIps": ["10.0.0.7"], "protocol": "HBONE", "networkMode": "Standard", "uid": "Kubernetes//Pod/shop/cart-1",
     "name": "cart-1", "namespace": "shop", "serviceAccount": "cart", "node": "n1", "status": "Healthy", "clusterId": "Kubernetes", "capacity": 1},
    {"workloadIps": ["10.0.0.8"], "protocol": "TCP", "networkMode": "Standard", "uid": "Kubernetes//Pod/shop/web-1",
     "name": "web-1", "namespace": "shop", "node": "n1", "status": "Healthy", "clusterId": "Kubernetes", "capacity": 1}
  ],
  "services": [], "policies": [], "stagedServices": {}, "certificates": [],
  "version": {"version": "1.28.0"}
}`

func TestAZtunnelConfigDumpIsReadForItsWorkloads(t *testing.T) {
	ws, err := DecodeZtunnelDump(strings.NewReader(ztunnelDump))
	require.NoError(t, err)
	assert.Equal(t, []ZtunnelWorkload{
		{UID: "Kubernetes//Pod/shop/cart-1", Name: "cart-1", Namespace: "shop", Node: "n1", Protocol: "HBONE"},
		{UID: "Kubernetes//Pod/shop/web-1", Name: "web-1", Namespace: "shop", Node: "n1", Protocol: "TCP"},
	}, ws)

	old, err := DecodeZtunnelDump(strings.NewReader(`{"workloads": {"10.0.0.7": {"name": "cart-1", "namespace": "shop", "protocol": "HBONE"}}}`))
	require.NoError(t, err)
	assert.Equal(t, []ZtunnelWorkload{{Name: "cart-1", Namespace: "shop", Protocol: "HBONE"}}, old, "the older shape, keyed by address")

	_, err = DecodeZtunnelDump(strings.NewReader(`{"configs": []}`))
	assert.EqualError(t, err, "the config dump has no workloads key: not a ztunnel's", "an Envoy's dump is no ztunnel's")
	_, err = DecodeZtunnelDump(strings.NewReader(`<html>`))
	assert.ErrorContains(t, err, "read the config dump: ")
}

// fakeDumps answers each ztunnel's dump from a table, and counts reads.
type fakeDumps struct {
	mu    sync.Mutex
	dumps map[string][]ZtunnelWorkload
	reads map[string]int
}

func (f *fakeDumps) Workloads(_ context.Context, z ZtunnelPod) ([]ZtunnelWorkload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[z.Pod]++
	ws, ok := f.dumps[z.Pod]
	if !ok {
		return nil, errors.New(`pods "` + z.Pod + `" is forbidden: cannot create resource "pods/portforward"`)
	}
	return ws, nil
}

func held(name, protocol string) ZtunnelWorkload {
	return ZtunnelWorkload{Name: name, Namespace: "shop", Protocol: protocol}
}

func TestTheSyncGateOfAWaveIntoAmbientHoldsEachNewPodAsHBONEInItsNodesZtunnel(t *testing.T) {
	za := ZtunnelPod{Pod: "ztunnel-a", Namespace: "istio-system", Ready: true}
	zb := ZtunnelPod{Pod: "ztunnel-b", Namespace: "istio-system", Ready: true}
	zb2 := ZtunnelPod{Pod: "ztunnel-b2", Namespace: "istio-system", Ready: true}
	nodes := map[string][]ZtunnelPod{"n1": {za}, "n2": {zb}}
	g := SyncGate{RootNamespace: "istio-system", Timeout: 2 * time.Minute, Interval: 5 * time.Second,
		Ztunnels: func(node string) []ZtunnelPod { return nodes[node] }}
	w := ambientWave(member("cart", ambientPod("cart-1", "n1", true), ambientPod("cart-2", "n2", true)), member("web", ambientPod("web-1", "n2", true)))
	w.Analysis.Started = map[string]time.Time{GateSync: t0}
	synced := checked(canary.ResultPass, "2 of 2 ztunnels SYNCED with istiod 1-26", g.Interval)
	all := []ZtunnelWorkload{held("cart-1", "HBONE"), held("cart-2", "HBONE"), held("web-1", "HBONE")}
	tests := []struct {
		name   string
		nodes  map[string][]ZtunnelPod
		dumps  map[ZtunnelPod]DumpAnswer
		now    time.Time
		result canary.Result
		reason string
		failed []canary.WorkloadState
	}{
		{"every new pod held as HBONE by its node's ztunnel passes", nil,
			map[ZtunnelPod]DumpAnswer{za: {Workloads: all[:1]}, zb: {Workloads: all[1:]}}, t0, canary.ResultPass,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 3 of 3 pods held as HBONE by their node's ztunnel", nil},
		{"a pod its ztunnel does not hold yet waits", nil,
			map[ZtunnelPod]DumpAnswer{za: {Workloads: all[:1]}, zb: {Workloads: all[1:2]}}, t0.Add(time.Minute), canary.ResultPending,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 2 of 3 pods held as HBONE by their node's ztunnel; ztunnel-b does not hold pod web-1", nil},
		{"... and fails its workload at the timeout", nil,
			map[ZtunnelPod]DumpAnswer{za: {Workloads: all[:1]}, zb: {Workloads: all[1:2]}}, t0.Add(2 * time.Minute), canary.ResultFail,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 2 of 3 pods held as HBONE by their node's ztunnel; ztunnel-b does not hold pod web-1 after 2m0s",
			[]canary.WorkloadState{{Name: "web", State: canary.StateFailed, Reason: "ztunnel-b does not hold pod web-1"}}},
		{"a pod of the same name in another namespace is not the wave's", nil,
			map[ZtunnelPod]DumpAnswer{za: {Workloads: all[:1]}, zb: {Workloads: []ZtunnelWorkload{all[1], {Name: "web-1", Namespace: "other", Protocol: "HBONE"}}}}, t0, canary.ResultPending,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 2 of 3 pods held as HBONE by their node's ztunnel; ztunnel-b does not hold pod web-1", nil},
		{"a pod held as TCP is named with its protocol", nil,
			map[ZtunnelPod]DumpAnswer{za: {Workloads: []ZtunnelWorkload{held("cart-1", "TCP")}}, zb: {Workloads: all[1:]}}, t0.Add(3 * time.Minute), canary.ResultFail,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 2 of 3 pods held as HBONE by their node's ztunnel; ztunnel-a holds pod cart-1 with protocol TCP, not HBONE after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "ztunnel-a holds pod cart-1 with protocol TCP, not HBONE"}}},
		{"a dump that could not be read is inconclusive, never a pass", nil,
			map[ZtunnelPod]DumpAnswer{za: {Workloads: all[:1]}, zb: {Err: errors.New("connection refused")}}, t0.Add(3 * time.Minute), canary.ResultInconclusive,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 1 of 3 pods held as HBONE by their node's ztunnel; could not read the config dump of ztunnel-b: connection refused", nil},
		{"while a node's ztunnel is replaced, each Ready one must hold its pods", map[string][]ZtunnelPod{"n1": {za}, "n2": {zb, zb2}},
			map[ZtunnelPod]DumpAnswer{za: {Workloads: all[:1]}, zb: {Workloads: all[1:]}, zb2: {Workloads: all[1:2]}}, t0, canary.ResultPending,
			"2 of 2 ztunnels SYNCED with istiod 1-26; 2 of 3 pods held as HBONE by their node's ztunnel; ztunnel-b2 does not hold pod web-1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := g
			if tt.nodes != nil {
				g.Ztunnels = func(node string) []ZtunnelPod { return tt.nodes[node] }
			}
			v := g.judgeHeld(w, g.podsToHold(w), tt.dumps, synced, tt.now)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			assert.Equal(t, tt.failed, v.Failed)
			require.Len(t, v.Measurements, 1)
			assert.Equal(t, "ztunnels-hold-pods", v.Measurements[0].Check)
			assert.Equal(t, 3.0, *v.Measurements[0].Threshold)
		})
	}
}

func TestAZtunnelsDumpIsReadOnlyOnceSynczFindsItSynced(t *testing.T) {
	za := ZtunnelPod{Pod: "ztunnel-a", Namespace: "istio-system", Ready: true}
	w := ambientWave(member("cart", ambientPod("cart-1", "n1", true), ambientPod("cart-2", "n1", true)))
	w.Analysis.Started = map[string]time.Time{GateSync: t0}
	src := &countingSource{answers: map[string][]ProxySync{replicaA.IP: {with(ztunnel("ztunnel-a.istio-system"), TypeAddress, stale)}}, asked: map[string]int{}}
	dumps := &fakeDumps{dumps: map[string][]ZtunnelWorkload{"ztunnel-a": {held("cart-1", "HBONE"), held("cart-2", "HBONE")}}, reads: map[string]int{}}
	g := SyncGate{Source: src, Dumps: dumps, RootNamespace: "istio-system", Timeout: 2 * time.Minute, Interval: 5 * time.Second,
		Istiods:  func(string) []Istiod { return []Istiod{replicaA} },
		Ztunnels: func(string) []ZtunnelPod { return []ZtunnelPod{za} }}

	v := g.Evaluate(context.Background(), w, t0)
	assert.Equal(t, canary.ResultPending, v.Result, v.Reason)
	assert.Empty(t, dumps.reads, "a ztunnel not in sync is not read")

	src.answers[replicaA.IP] = []ProxySync{ztunnel("ztunnel-a.istio-system")}
	v = g.Evaluate(context.Background(), w, t0.Add(time.Minute))
	assert.Equal(t, canary.ResultPass, v.Result, v.Reason)
	assert.Equal(t, "1 of 1 ztunnels SYNCED with istiod 1-26; 2 of 2 pods held as HBONE by their node's ztunnel", v.Reason)
	assert.Equal(t, map[string]int{"ztunnel-a": 1}, dumps.reads, "one read a run, however many of its pods are on its node")

	g.Dumps = nil
	v = g.Evaluate(context.Background(), w, t0.Add(2*time.Minute))
	assert.Equal(t, "1 of 1 ztunnels SYNCED with istiod 1-26", v.Reason, "without a reader, syncz alone decides")
}
