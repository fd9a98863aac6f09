package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func member(name string, pods ...canary.Pod) canary.WaveWorkload {
	return canary.WaveWorkload{
		Workload: canary.Workload{Namespace: "shop", Name: name, Replicas: int32(len(pods)), Generation: 2,
			Status: canary.RolloutStatus{ObservedGeneration: 2, Replicas: int32(len(pods)), UpdatedReplicas: int32(len(pods)), ReadyReplicas: int32(len(pods)), AvailableReplicas: int32(len(pods))},
			Pods:   pods},
		Record:   canary.MoveRecord{Revision: "1-26", At: t0},
		Deadline: t0.Add(5 * time.Minute), Timeout: 5 * time.Minute,
	}
}

func pod(name, rev string) canary.Pod {
	return canary.Pod{Name: name, Current: true, Running: true, Ready: true, Revision: rev}
}

func wave(ms ...canary.WaveWorkload) canary.WaveUnderTest {
	return canary.WaveUnderTest{Namespace: "shop", Wave: 1, TargetRevision: "1-26", SourceRevision: "1-25", Expect: "1-26", Workloads: ms, GatesSince: t0}
}

func TestRolloutGate(t *testing.T) {
	rolling := member("cart", pod("cart-new-1", "1-26"))
	rolling.Status.UpdatedReplicas = 0
	rolling.Pods[0].Ready = false
	rolling.Pods[0].Waiting = "CrashLoopBackOff"
	old := member("web", pod("web-new-1", "1-26"), pod("web-new-2", "1-26"), canary.Pod{Name: "web-old-1", Current: false, Running: true})
	old.Replicas, old.Status.Replicas, old.Status.UpdatedReplicas, old.Status.AvailableReplicas = 2, 2, 2, 2
	surge := member("api", canary.Pod{Name: "api-new-1", Current: true, Running: true, Waiting: "CrashLoopBackOff"}, canary.Pod{Name: "api-old-1", Current: false, Running: true, Ready: true})
	surge.Replicas, surge.Status.Replicas, surge.Status.UpdatedReplicas, surge.Status.AvailableReplicas = 1, 2, 1, 1
	stale := member("api", pod("api-1", "1-26"))
	stale.Generation = 3

	tests := []struct {
		name   string
		wave   canary.WaveUnderTest
		now    time.Time
		result canary.Result
		reason string
	}{
		{"a rolled-out wave passes", wave(member("cart", pod("cart-1", "1-26"), pod("cart-2", "1-26"))), t0, canary.ResultPass, "1 of 1 workloads rolled out"},
		{"a rollout in progress is pending with what it waits for", wave(rolling), t0.Add(time.Minute), canary.ResultPending,
			"1 of 1 workloads rolling out: cart: 0 of 1 replicas updated; pod cart-new-1 not ready (CrashLoopBackOff)"},
		{"past its deadline it fails with the reason", wave(rolling), t0.Add(5 * time.Minute), canary.ResultFail,
			"cart did not roll out within 5m0s: 0 of 1 replicas updated; pod cart-new-1 not ready (CrashLoopBackOff)"},
		{"an old pod left is not rolled out", wave(old), t0, canary.ResultPending, "1 of 1 workloads rolling out: web: old pods still present: web-old-1"},
		{"a surge's new pod that is not ready is reported before the old pod it keeps up", wave(surge), t0, canary.ResultPending,
			"1 of 1 workloads rolling out: api: 0 of 1 new pods ready; pod api-new-1 not ready (CrashLoopBackOff)"},
		{"an unobserved generation is not rolled out", wave(stale), t0, canary.ResultPending,
			"1 of 1 workloads rolling out: api: the deployment controller has not seen generation 3 yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := RolloutGate{}.Evaluate(context.Background(), tt.wave, tt.now)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
		})
	}
}

// An OnDelete workload whose PodDisruptionBudget refuses its evictions
// waits on the budget: both the pending reason and the failure name it,
// with the apiserver's answer, and a member without a refusal reads as
// before.
func TestTheRolloutGateNamesTheBudgetThatRefusedAnEviction(t *testing.T) {
	refusal := "PodDisruptionBudget db-pdb refused to evict pod db-2: Cannot evict pod as it would violate the pod's disruption budget. " +
		"The disruption budget db-pdb needs 3 healthy pods and has 3 currently (429 TooManyRequests)"
	held := member("StatefulSet/db", canary.Pod{Name: "db-0", Running: true, Ready: true}, canary.Pod{Name: "db-1", Running: true, Ready: true},
		canary.Pod{Name: "db-2", Running: true, Ready: true})
	held.Kind, held.OnDelete, held.Status.UpdatedReplicas = canary.KindStatefulSet, true, 0
	held.Deadline, held.Timeout = t0.Add(10*time.Second), 10*time.Second
	held.EvictionRefused = refusal
	other := member("StatefulSet/cache", canary.Pod{Name: "cache-0", Running: true, Ready: true})
	other.Kind, other.OnDelete, other.Status.UpdatedReplicas = canary.KindStatefulSet, true, 0
	other.Deadline, other.Timeout = t0.Add(time.Minute), time.Minute

	v := RolloutGate{}.Evaluate(context.Background(), wave(held, other), t0.Add(5*time.Second))
	assert.Equal(t, canary.ResultPending, v.Result)
	assert.Equal(t, "2 of 2 workloads rolling out: StatefulSet/db: 0 of 3 replicas updated; "+refusal+"; StatefulSet/cache: 0 of 1 replicas updated", v.Reason)
	assert.Equal(t, 5*time.Second, v.RetryAfter)

	v = RolloutGate{}.Evaluate(context.Background(), wave(held, other), t0.Add(10*time.Second))
	assert.Equal(t, canary.ResultFail, v.Result)
	want := "StatefulSet/db did not roll out within 10s: 0 of 3 replicas updated; " + refusal
	assert.Equal(t, want, v.Reason)
	assert.Equal(t, []canary.WorkloadState{{Name: "StatefulSet/db", State: canary.StateFailed, Reason: want}}, v.Failed)

	// Once it rolled out, a refusal left over says nothing.
	done := member("StatefulSet/db", pod("db-0", "1-26"))
	done.Kind, done.OnDelete, done.EvictionRefused = canary.KindStatefulSet, true, refusal
	v = RolloutGate{}.Evaluate(context.Background(), wave(done), t0.Add(time.Hour))
	assert.Equal(t, canary.ResultPass, v.Result)
	assert.Equal(t, "1 of 1 workloads rolled out", v.Reason)
}

func TestRolloutGateReadsEachKindInItsControllersTerms(t *testing.T) {
	sts := func(mod func(*canary.WaveWorkload)) canary.WaveWorkload {
		m := member("StatefulSet/db", pod("db-0", "1-26"), pod("db-1", "1-26"))
		m.Kind = canary.KindStatefulSet
		m.Status.CurrentRevision, m.Status.UpdateRevision = "db-7c9f", "db-7c9f"
		if mod != nil {
			mod(&m)
		}
		return m
	}
	ds := func(mod func(*canary.WaveWorkload)) canary.WaveWorkload {
		m := member("DaemonSet/agent", pod("agent-x1", "1-26"), pod("agent-x2", "1-26"), pod("agent-x3", "1-26"))
		m.Kind = canary.KindDaemonSet
		if mod != nil {
			mod(&m)
		}
		return m
	}
	tests := []struct {
		name   string
		m      canary.WaveWorkload
		result canary.Result
		reason string
	}{
		{"a StatefulSet whose currentRevision reached its updateRevision passes", sts(nil), canary.ResultPass, "1 of 1 workloads rolled out"},
		{"a StatefulSet still on its old currentRevision is rolling out", sts(func(m *canary.WaveWorkload) { m.Status.CurrentRevision = "db-5b8d" }),
			canary.ResultPending, "1 of 1 workloads rolling out: StatefulSet/db: currentRevision db-5b8d has not reached updateRevision db-7c9f"},
		{"a StatefulSet's unseen generation is named for its controller", sts(func(m *canary.WaveWorkload) { m.Generation = 3 }),
			canary.ResultPending, "1 of 1 workloads rolling out: StatefulSet/db: the statefulset controller has not seen generation 3 yet"},
		{"a StatefulSet pod still on its old revision leaves it short of new ready pods", sts(func(m *canary.WaveWorkload) { m.Pods[1].Current = false }),
			canary.ResultPending, "1 of 1 workloads rolling out: StatefulSet/db: 1 of 2 new pods ready"},
		{"a DaemonSet on every node passes", ds(nil), canary.ResultPass, "1 of 1 workloads rolled out"},
		{"a DaemonSet short of updated nodes says so in its terms", ds(func(m *canary.WaveWorkload) { m.Status.UpdatedReplicas = 2 }),
			canary.ResultPending, "1 of 1 workloads rolling out: DaemonSet/agent: 2 of 3 nodes run an updated pod (updatedNumberScheduled)"},
		{"a DaemonSet short of available nodes says so in its terms", ds(func(m *canary.WaveWorkload) { m.Status.AvailableReplicas = 1 }),
			canary.ResultPending, "1 of 1 workloads rolling out: DaemonSet/agent: 1 of 3 nodes run an available pod (numberAvailable)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := RolloutGate{}.Evaluate(context.Background(), wave(tt.m), t0)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
		})
	}
}

func TestInjectionGate(t *testing.T) {
	tests := []struct {
		name   string
		wave   canary.WaveUnderTest
		result canary.Result
		reason string
	}{
		{"pods of the target pass", wave(member("cart", pod("cart-1", "1-26"))), canary.ResultPass, "1 new pods injected by 1-26"},
		{"a pod of the wrong revision fails, named", wave(member("cart", pod("cart-1", "1-26"), pod("cart-2", "1-25"))), canary.ResultFail,
			"pod cart-2 was injected by 1-25, not 1-26"},
		{"an uninjected pod fails, named", wave(member("cart", pod("cart-1", ""))), canary.ResultFail, "pod cart-1 was not injected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := InjectionGate{}.Evaluate(context.Background(), tt.wave, t0)
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			if tt.result == canary.ResultFail {
				assert.Equal(t, "cart", v.Failed[0].Name)
			}
		})
	}
}

// fakeProm answers every query with the same vector or error, and counts.
type fakeProm struct {
	vec     model.Vector
	err     error
	queries []string
}

func (f *fakeProm) Query(_ context.Context, q string, _ time.Time, _ ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	f.queries = append(f.queries, q)
	if f.err != nil {
		return nil, nil, nil, f.err
	}
	return f.vec, nil, nil, nil
}

func series(workload, kind string, v float64) *model.Sample {
	return &model.Sample{Metric: model.Metric{"destination_workload": model.LabelValue(workload), seriesLabel: model.LabelValue(kind)}, Value: model.SampleValue(v)}
}

func TestMetricVerdicts(t *testing.T) {
	two := wave(member("cart", pod("cart-1", "1-26")), member("web", pod("web-1", "1-26")))
	one := wave(member("cart", pod("cart-1", "1-26")))
	tests := []struct {
		name   string
		wave   canary.WaveUnderTest
		vec    model.Vector
		err    error
		result canary.Result
		reason string
	}{
		{"values within the threshold pass", one, model.Vector{series("cart", "value", 0.01), series("cart", "requests", 600)}, nil,
			canary.ResultPass, "cart: 1.00% <= threshold 5.00%"},
		{"a value over the threshold fails, with both numbers", one, model.Vector{series("cart", "value", 0.3), series("cart", "requests", 600)}, nil,
			canary.ResultFail, "cart: 30.00% > threshold 5.00%"},
		{"a value over the baseline by more than the tolerance fails", one, model.Vector{series("cart", "value", 0.04), series("cart", "baseline", 0.01), series("cart", "requests", 600)}, nil,
			canary.ResultFail, "cart: 4.00% > baseline 1.00% +100%"},
		{"a value within the tolerance of its baseline passes", one, model.Vector{series("cart", "value", 0.015), series("cart", "baseline", 0.01), series("cart", "requests", 600)}, nil,
			canary.ResultPass, "cart: 1.50% <= threshold 5.00%, baseline 1.00%"},
		{"a zero baseline leaves only the threshold", one, model.Vector{series("cart", "value", 0.02), series("cart", "baseline", 0), series("cart", "requests", 600)}, nil,
			canary.ResultPass, "cart: 2.00% <= threshold 5.00%"},
		{"fewer requests than the minimum are inconclusive, never a pass", one, model.Vector{series("cart", "value", 0), series("cart", "requests", 12)}, nil,
			canary.ResultInconclusive, "cart: 12 requests < minimum 50"},
		{"an empty vector is inconclusive", one, model.Vector{}, nil, canary.ResultInconclusive, "cart: no request count"},
		{"NaN is inconclusive: 0/0 when there was no traffic", one, model.Vector{series("cart", "value", math.NaN()), series("cart", "requests", 600)}, nil,
			canary.ResultInconclusive, "cart: the value is NaN"},
		{"a value missing beside a count is no data", one, model.Vector{series("cart", "requests", 600)}, nil, canary.ResultInconclusive, "cart: no data"},
		{"a negative value, as raw counters give after a reset, is inconclusive", one, model.Vector{series("cart", "value", -0.5), series("cart", "requests", 600)}, nil,
			canary.ResultInconclusive, "cart: negative value -50.00% (a counter reset in the window?)"},
		{"one failing workload fails the check, and only it is named failed", two, model.Vector{
			series("cart", "value", 0.3), series("cart", "requests", 600), series("web", "value", 0), series("web", "requests", 600)}, nil,
			canary.ResultFail, "cart: 30.00% > threshold 5.00%"},
		{"a fail outweighs an inconclusive", two, model.Vector{
			series("cart", "value", 0.3), series("cart", "requests", 600), series("web", "requests", 3)}, nil,
			canary.ResultFail, "cart: 30.00% > threshold 5.00%"},
		{"Prometheus unreachable is inconclusive", one, nil, errors.New("dial tcp 127.0.0.1:9090: connect: connection refused"),
			canary.ResultInconclusive, "Prometheus did not answer: dial tcp 127.0.0.1:9090: connect: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prom := &fakeProm{vec: tt.vec, err: tt.err}
			g, err := NewMetricGate(ErrorRateCheck(0.05, 1.0, 50), prom, time.Minute, 30*time.Second, time.Minute, 0)
			require.NoError(t, err)
			tt.wave.Analysis.ReadyAt = &t0
			v := g.Evaluate(context.Background(), tt.wave, t0.Add(time.Minute))
			assert.Equal(t, tt.result, v.Result)
			assert.Equal(t, tt.reason, v.Reason)
			assert.True(t, v.Analysis)
			assert.True(t, v.Checked)
			assert.Len(t, prom.queries, 1, "one query per check per run, whatever the wave's size")
			if tt.err == nil {
				assert.Len(t, v.Measurements, len(tt.wave.Workloads), "one measurement per workload")
			}
			if tt.result == canary.ResultFail {
				require.Len(t, v.Failed, 1)
				assert.Equal(t, "cart", v.Failed[0].Name)
			}
		})
	}
}

func TestMetricMeasurementsCarryValueThresholdAndBaseline(t *testing.T) {
	prom := &fakeProm{vec: model.Vector{series("cart", "value", 0.3), series("cart", "baseline", 0.01), series("cart", "requests", 600)}}
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1.0, 50), prom, time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	w := wave(member("cart", pod("cart-1", "1-26")))
	w.Analysis.ReadyAt = &t0
	v := g.Evaluate(context.Background(), w, t0.Add(time.Minute))
	assert.Equal(t, []canary.Measurement{{Check: "error-rate", Workload: "cart", Value: 0.3, Threshold: ptr(0.05), Baseline: ptr(0.01), Result: canary.ResultFail}}, v.Measurements)
}

func TestMetricGateBakesThenRunsEveryInterval(t *testing.T) {
	prom := &fakeProm{vec: model.Vector{series("cart", "value", 0), series("cart", "requests", 600)}}
	g, err := NewMetricGate(ErrorRateCheck(0.05, 0, 50), prom, 2*time.Minute, 30*time.Second, time.Minute, 0)
	require.NoError(t, err)
	w := wave(member("cart", pod("cart-1", "1-26")))
	w.Analysis.ReadyAt = &t0

	v := g.Evaluate(context.Background(), w, t0.Add(90*time.Second))
	assert.True(t, v.Deferred)
	assert.Equal(t, "baking for 30s", v.Reason)
	assert.Empty(t, prom.queries, "nothing is asked while baking")

	v = g.Evaluate(context.Background(), w, t0.Add(2*time.Minute))
	assert.Equal(t, canary.ResultPass, v.Result)
	w.Analysis.Checked = map[string]time.Time{"error-rate": t0.Add(2 * time.Minute)}
	v = g.Evaluate(context.Background(), w, t0.Add(2*time.Minute+10*time.Second))
	assert.True(t, v.Deferred)
	assert.Equal(t, 20*time.Second, v.RetryAfter)
	assert.Len(t, prom.queries, 1)
}

func TestTheQueryJoinsValueRequestsAndBaselineInOne(t *testing.T) {
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1, 50), &fakeProm{}, time.Minute, time.Second, time.Minute, 0)
	require.NoError(t, err)
	w := wave(member("web", pod("w", "1-26")), member("cart.v2", pod("c", "1-26")))
	q, err := g.Query(w, t0.Add(95*time.Second+300*time.Millisecond))
	require.NoError(t, err)
	rate := func(offset, code string) string {
		return fmt.Sprintf(`sum by (destination_workload) (rate(istio_requests_total{reporter="destination",destination_workload_namespace="shop",destination_workload=~"cart\\.v2|web"%s}[1m]%s))`, code, offset)
	}
	ratio := func(offset string) string {
		return "(" + rate(offset, `,response_code=~"5.."`) + " or " + rate(offset, "") + " * 0) / " + rate(offset, "")
	}
	want := `label_replace(` + ratio("") + `, "meshwave_series", "value", "", "")` +
		` or label_replace(sum by (destination_workload) (increase(istio_requests_total{reporter="destination",destination_workload_namespace="shop",destination_workload=~"cart\\.v2|web"}[1m])), "meshwave_series", "requests", "", "")` +
		` or label_replace(` + ratio(" offset 1m35s") + `, "meshwave_series", "baseline", "", "")`
	assert.Equal(t, want, q)
}

func TestACheckWithAToleranceNeedsAnOffsetPlaceholder(t *testing.T) {
	_, err := NewMetricGate(Check{Name: "mine", Query: `sum by (app) (rate(x[{{.Window}}]))`, Requests: `x`, GroupBy: "app", Tolerance: 0.5}, &fakeProm{}, time.Minute, time.Second, time.Minute, 0)
	require.EqualError(t, err, "check mine: a tolerance needs a baseline, so the query must place {{.Offset}} after its range selectors")
}

func TestChainStopsAtTheFirstGateThatDoesNotPass(t *testing.T) {
	w := wave(member("cart", pod("cart-1", "1-25")))
	prom := &fakeProm{}
	g, err := NewMetricGate(ErrorRateCheck(0.05, 0, 50), prom, time.Minute, time.Second, time.Minute, 0)
	require.NoError(t, err)
	vs := Chain{RolloutGate{}, InjectionGate{}, g}.Evaluate(context.Background(), w, t0)
	require.Len(t, vs, 2)
	assert.Equal(t, "rollout", vs[0].Gate)
	assert.Equal(t, "injection", vs[1].Gate)
	assert.Equal(t, canary.ResultFail, vs[1].Result)
	assert.Empty(t, prom.queries)
}
