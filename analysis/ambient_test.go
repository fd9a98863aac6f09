package analysis

import (
	"context"
	"strings"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// ambientPod is a new pod of a wave into ambient mode on node, no
// sidecar, labelled, and redirected when redirected is true.
func ambientPod(name, node string, redirected bool) canary.Pod {
	p := canary.Pod{Name: name, Current: true, Running: true, Ready: true, Node: node,
		Labels: map[string]string{canary.LabelDataplaneMode: canary.DataplaneAmbient, canary.LabelInject: "false"}}
	if redirected {
		p.Annotations = map[string]string{canary.AnnotationRedirection: canary.RedirectionEnabled}
	}
	return p
}

func ambientWave(ms ...canary.WaveWorkload) canary.WaveUnderTest {
	w := wave(ms...)
	w.SourceRevision, w.Ambient = "1-26", true
	return w
}

func TestTheEnrolmentGateNamesEachPodStillInjectedUnlabelledOrNeverRedirected(t *testing.T) {
	injected := pod("cart-2", "1-26")
	unlabelled := ambientPod("web-1", "n1", true)
	delete(unlabelled.Labels, canary.LabelDataplaneMode)
	tests := []struct {
		name   string
		wave   canary.WaveUnderTest
		now    time.Time
		result canary.Result
		reason string
	}{
		{"every new pod in ambient and redirected passes", ambientWave(member("cart", ambientPod("cart-1", "n1", true), ambientPod("cart-2", "n2", true))),
			t0, canary.ResultPass, "2 new pods in ambient: no sidecar, redirected to ztunnel"},
		{"a pod still injected fails at once", ambientWave(member("cart", ambientPod("cart-1", "n1", true), injected)),
			t0, canary.ResultFail, "pod cart-2 still runs a sidecar of 1-26"},
		{"a pod not labelled fails at once", ambientWave(member("web", unlabelled)),
			t0, canary.ResultFail, "pod web-1 is not labelled istio.io/dataplane-mode=ambient"},
		{"a running pod not redirected waits for its node agent", ambientWave(member("cart", ambientPod("cart-1", "n1", false))),
			t0.Add(time.Minute), canary.ResultPending, "pod cart-1 is not redirected to ztunnel yet"},
		{"... and fails at its deadline, naming it and its node", ambientWave(member("cart", ambientPod("cart-1", "n1", false))),
			t0.Add(5 * time.Minute), canary.ResultFail, "pod cart-1 runs but was never redirected to ztunnel: no ambient.istio.io/redirection: enabled from the istio-cni node agent of node n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := InjectionGate{}.Evaluate(context.Background(), tt.wave, tt.now)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			if tt.result == canary.ResultFail {
				assert.Len(t, v.Failed, 1)
			}
		})
	}
}

func TestARollbackFromAmbientExpectsTheSidecarAgain(t *testing.T) {
	w := wave(member("cart", ambientPod("cart-1", "n1", true)))
	w.Expect, w.Rollback = "1-26", true
	v := InjectionGate{}.Evaluate(context.Background(), w, t0)
	assert.Equal(t, canary.ResultFail, v.Result)
	assert.Equal(t, "pod cart-1 was not injected", v.Reason)
}

// ztunnel is a ztunnel as istiod's syncz lists it, SYNCED on both types.
func ztunnel(id string) ProxySync {
	return ProxySync{ID: id, Status: map[string]statusv3.ConfigStatus{TypeAddress: synced, TypeAuthorization: synced}}
}

func TestTheSyncGateOfAWaveIntoAmbientAsksAboutTheZtunnelOfEachNewPodsNode(t *testing.T) {
	nodes := map[string][]ZtunnelPod{
		"n1": {{Pod: "ztunnel-a", Namespace: "istio-system", Ready: true}},
		"n2": {{Pod: "ztunnel-b", Namespace: "istio-system", Ready: true}},
		"n3": {{Pod: "ztunnel-c", Namespace: "istio-system", Ready: false}},
	}
	g := SyncGate{RootNamespace: "istio-system", Timeout: 2 * time.Minute, Interval: 5 * time.Second,
		Ztunnels: func(node string) []ZtunnelPod { return nodes[node] }}
	two := ambientWave(member("cart", ambientPod("cart-1", "n1", true), ambientPod("cart-2", "n2", true)), member("web", ambientPod("web-1", "n2", true)))
	two.Analysis.Started = map[string]time.Time{GateSync: t0}
	onN3 := ambientWave(member("cart", ambientPod("cart-1", "n3", true)))
	onN3.Analysis.Started = map[string]time.Time{GateSync: t0}
	tests := []struct {
		name   string
		wave   canary.WaveUnderTest
		obs    SyncObservation
		now    time.Time
		result canary.Result
		reason string
		failed []canary.WorkloadState
	}{
		{"each node's ztunnel SYNCED passes; the pods themselves have no proxy to ask about", two, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, ztunnel("ztunnel-a.istio-system"), sidecar("other-1.shop")), answer(replicaB, ztunnel("ztunnel-b.istio-system")),
		}}, t0, canary.ResultPass, "2 of 2 ztunnels SYNCED with istiod 1-26", nil},
		{"a ztunnel that stopped ACKing fails at the timeout, for every workload on its node", two, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, ztunnel("ztunnel-a.istio-system"), with(ztunnel("ztunnel-b.istio-system"), TypeAddress, stale)),
		}}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 ztunnels SYNCED with istiod 1-26; ztunnel-b.istio-system STALE on WDS with istiod-1-26-a after 2m0s",
			[]canary.WorkloadState{
				{Name: "cart", State: canary.StateFailed, Reason: "ztunnel-b.istio-system STALE on WDS with istiod-1-26-a"},
				{Name: "web", State: canary.StateFailed, Reason: "ztunnel-b.istio-system STALE on WDS with istiod-1-26-a"},
			}},
		{"a ztunnel that never subscribed to authorizations is not in sync", two, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, ztunnel("ztunnel-a.istio-system"), with(ztunnel("ztunnel-b.istio-system"), TypeAuthorization, unsubscribed)),
		}}, t0, canary.ResultPending, "1 of 2 ztunnels SYNCED with istiod 1-26; ztunnel-b.istio-system not subscribed to WADS with istiod-1-26-a", nil},
		{"a ztunnel connected elsewhere is missing", two, SyncObservation{Target: []IstiodAnswer{
			answer(replicaA, ztunnel("ztunnel-a.istio-system")),
		}}, t0.Add(2 * time.Minute), canary.ResultFail, "1 of 2 ztunnels SYNCED with istiod 1-26; ztunnel-b.istio-system is not connected to istiod 1-26 after 2m0s",
			[]canary.WorkloadState{
				{Name: "cart", State: canary.StateFailed, Reason: "ztunnel-b.istio-system is not connected to istiod 1-26"},
				{Name: "web", State: canary.StateFailed, Reason: "ztunnel-b.istio-system is not connected to istiod 1-26"},
			}},
		{"a node with no Ready ztunnel fails its workload at the timeout", onN3, SyncObservation{Target: []IstiodAnswer{answer(replicaA)}},
			t0.Add(2 * time.Minute), canary.ResultFail, "0 of 0 ztunnels SYNCED with istiod 1-26; no Ready ztunnel runs on node n3 of pod cart-1 after 2m0s",
			[]canary.WorkloadState{{Name: "cart", State: canary.StateFailed, Reason: "no Ready ztunnel runs on node n3 of pod cart-1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := g.judge(tt.wave, tt.obs, tt.now)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			assert.Equal(t, tt.failed, v.Failed)
		})
	}
}

func TestACheckWithoutAnAmbientFormIsInconclusiveOnAWaveIntoAmbientWhateverTheSidecarSeriesSay(t *testing.T) {
	// Healthy sidecar series of the workload (its old pods'): they say
	// nothing of pods that run no sidecar.
	prom := &fakeProm{vec: model.Vector{series("cart", "value", 0), series("cart", "requests", 600)}}
	custom := ErrorRateCheck(0.05, 0, 50)
	custom.Name, custom.Waypoint, custom.Ztunnel = "my-errors", nil, nil
	g, err := NewMetricGate(custom, prom, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	for _, waypoint := range []string{"", "waypoint"} {
		w := ambientWave(member("cart", ambientPod("cart-1", "n1", true)))
		w.Analysis.ReadyAt, w.Waypoint = &t0, waypoint
		v := g.Evaluate(context.Background(), w, t0.Add(time.Minute))
		assert.Equal(t, canary.ResultInconclusive, v.Result)
		assert.Contains(t, v.Reason, "this check has no query for them: the sidecar series say nothing of these pods")
		assert.True(t, g.Applies(w), "a check that is no L7 one is asked, and stays inconclusive")
	}
	assert.Empty(t, prom.queries, "nothing is asked that could pass it")
}

// The built-in checks read, for a wave into ambient, the series of the
// proxy that sees its traffic: the waypoint's (reporter="waypoint"), held
// against the sidecars' before the restart; or without a waypoint,
// ztunnel's failed connections, with no baseline.
func TestTheBuiltInChecksOfAWaveIntoAmbientReadTheSeriesOfItsMode(t *testing.T) {
	restart := t0.Add(-2 * time.Minute)
	w := ambientWave(member("cart", ambientPod("cart-1", "n1", true)))
	w.Workloads[0].Record.At = restart
	w.Analysis.ReadyAt = &t0
	errs, err := NewMetricGate(ErrorRateCheck(0.05, 1, 50), &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	latency, err := NewMetricGate(LatencyP99Check(1000, 0.5, 50), &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)

	behind := w
	behind.Waypoint = "waypoint"
	q, err := errs.Query(behind, t0)
	require.NoError(t, err)
	parts := strings.Split(q, " or label_replace(")
	require.Len(t, parts, 3, q)
	assert.Contains(t, parts[0], `rate(istio_requests_total{reporter="waypoint",destination_workload_namespace="shop",destination_workload=~"cart",response_code=~"5.."}[1m])`)
	assert.True(t, strings.HasSuffix(parts[0], `"meshwave_series", "value", "", "")`))
	assert.Equal(t, `sum by (destination_workload) (increase(istio_requests_total{reporter="waypoint",destination_workload_namespace="shop",destination_workload=~"cart"}[1m])), "meshwave_series", "requests", "", "")`, parts[1])
	assert.Contains(t, parts[2], `rate(istio_requests_total{reporter="destination",destination_workload_namespace="shop",destination_workload=~"cart",response_code=~"5.."}[1m] offset 2m)`, "the baseline is the sidecars' before the restart")
	assert.True(t, strings.HasSuffix(parts[2], `"meshwave_series", "baseline", "", "")`))
	assert.True(t, latency.Applies(behind))
	lq, err := latency.Query(behind, t0)
	require.NoError(t, err)
	assert.Contains(t, lq, `istio_request_duration_milliseconds_bucket{reporter="waypoint",`)

	without := w
	q, err = errs.Query(without, t0)
	require.NoError(t, err)
	assert.Contains(t, q, `istio_tcp_connections_failed_total{reporter="destination",destination_workload_namespace="shop",destination_workload=~"cart"}[1m]`)
	assert.NotContains(t, q, "istio_requests_total", "no proxy sees a request")
	assert.NotContains(t, q, "baseline")
	assert.False(t, latency.Applies(without), "ztunnel measures no latency: the check does not run")
	assert.True(t, errs.Applies(without))
}

// ztunnel counts every inbound connection as opened when it builds its
// result, and one that fails as failed too: the failed are a part of the
// opened, and the share ztunnel failed is failed / opened. Adding the two
// would read 50% for a wave whose every connection fails.
func TestTheZtunnelFailureShareCountsEachFailedConnectionOnce(t *testing.T) {
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1, 50), &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	w := ambientWave(member("cart", ambientPod("cart-1", "n1", true)))
	q, err := g.Query(w, t0)
	require.NoError(t, err)
	sel := `{reporter="destination",destination_workload_namespace="shop",destination_workload=~"cart"}[1m]`
	failed := `sum by (destination_workload) (rate(istio_tcp_connections_failed_total` + sel + `))`
	opened := `sum by (destination_workload) (rate(istio_tcp_connections_opened_total` + sel + `))`
	assert.Equal(t, `label_replace((`+failed+` or `+opened+` * 0) / `+opened+`, "meshwave_series", "value", "", "")`+
		` or label_replace(sum by (destination_workload) (increase(istio_tcp_connections_opened_total`+sel+`)), "meshwave_series", "requests", "", "")`, q)
}

// The built-in outbound check reads what the wave's own sidecars report
// of their calls: a wave into ambient has none, so the check is left out
// of its chain while another check measures the wave; alone, it stays,
// and says, inconclusive, that it cannot.
func TestTheOutboundCheckStaysOutOfAWaveIntoAmbientThatAnotherCheckMeasures(t *testing.T) {
	outbound, err := NewMetricGate(OutboundErrorRateCheck(0.05, 0, 20), &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	errs, err := NewMetricGate(ErrorRateCheck(0.05, 0, 20), &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	latency, err := NewMetricGate(LatencyP99Check(1000, 0, 20), &fakeProm{}, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	sync := SyncGate{}
	for _, waypoint := range []string{"", "waypoint"} {
		w := ambientWave(member("cart", ambientPod("cart-1", "n1", true)))
		w.Waypoint = waypoint
		want := Chain{sync, errs}
		if waypoint != "" {
			want = Chain{sync, errs, latency}
		}
		assert.Equal(t, want, Applicable(Chain{sync, errs, latency, outbound}, w), "waypoint %q", waypoint)
		// With no other check, a wave is never passed unmeasured.
		assert.Equal(t, Chain{sync, outbound}, Applicable(Chain{sync, outbound}, w), "waypoint %q", waypoint)
	}
	sidecar := wave(member("cart", pod("cart-1", "1-26")))
	assert.Equal(t, Chain{sync, errs, latency, outbound}, Applicable(Chain{sync, errs, latency, outbound}, sidecar))
}
