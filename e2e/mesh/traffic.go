package mesh

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// Behavior is how a workload behaves while its pods run a given revision.
type Behavior struct {
	// ErrorRatio is the share of inbound requests answered 503.
	ErrorRatio float64
	// LatencyMs is the p99 latency of inbound requests, in milliseconds.
	LatencyMs float64
	// OutboundErrorRatio is the share of this workload's own calls that
	// fail on its side, for example when its proxy cannot reach a peer on
	// the other control plane.
	OutboundErrorRatio float64
}

// DefaultBehavior is a healthy workload: no errors, 40 ms p99.
var DefaultBehavior = Behavior{LatencyMs: 40}

// LoadGenerator is the source workload of traffic that no route in the mesh
// accounts for.
const (
	LoadGenerator          = "loadgenerator"
	LoadGeneratorNamespace = "traffic"
)

// Istio's default request-duration buckets, in milliseconds.
var durationBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// WorkloadRef names a Deployment.
type WorkloadRef struct{ Namespace, Name string }

func (w WorkloadRef) String() string { return w.Namespace + "/" + w.Name }

type behaviorKey struct {
	workload WorkloadRef
	revision string // "" applies to every revision
}

// seriesKey is one istio_requests_total series. pod is the pod whose
// proxy reports it: the destination's for reporter="destination", the
// caller's for reporter="source".
type seriesKey struct {
	reporter            string
	source, destination WorkloadRef
	code                string
	// pod and podNamespace name the reporting proxy's pod: the
	// destination's or caller's sidecar, a waypoint, or a ztunnel.
	pod, podNamespace string
}

type series struct {
	requests float64
	buckets  []float64 // cumulative counts per durationBuckets
	sumMs    float64
}

// Traffic exports Istio's request metrics for the injected, ready pods of
// the cluster, as their proxies would. Each workload receives Rate requests a
// second, spread over its pods; how they fare depends on the revision each
// pod runs, so "reviews on 1-26 returns 30% 5xx" can be staged while
// everything else stays healthy. Each pod's proxy reports its own request
// counters, labelled namespace and pod as Prometheus labels a proxy it
// scrapes through Kubernetes pod discovery with Istio's usual
// relabelling; a pod that goes away takes its series with it. The
// duration histogram is reported per workload (see recordLocked).
type Traffic struct {
	pods corev1listers.PodLister
	// namespaces say which waypoint, if any, each namespace's pods in
	// ambient are behind; root is where the ztunnels run.
	namespaces corev1listers.NamespaceLister
	root       string
	server     *http.Server
	url        string

	mu        sync.Mutex
	rate      map[WorkloadRef]float64
	rateAll   float64
	behaviors map[behaviorKey]Behavior
	routes    map[WorkloadRef][]WorkloadRef // callee -> callers
	series    map[seriesKey]*series
	// connections are ztunnel's inbound connection counters of pods in
	// ambient without a waypoint, code "opened" or "failed".
	connections map[seriesKey]float64
	// durations are the request-duration histograms, per series key
	// without the pod: see recordLocked.
	durations map[seriesKey]*series
	last      time.Time
	// incarnations are the UIDs of the pods that have series: a pod
	// recreated under the same name (a StatefulSet's) runs a new proxy,
	// whose counters start again from nothing.
	incarnations map[podRef]types.UID
}

// podRef names a pod.
type podRef struct{ namespace, name string }

func newTraffic(pods corev1listers.PodLister, defaultRate float64) *Traffic {
	return &Traffic{
		pods: pods, rateAll: defaultRate,
		rate: map[WorkloadRef]float64{}, behaviors: map[behaviorKey]Behavior{},
		routes: map[WorkloadRef][]WorkloadRef{}, series: map[seriesKey]*series{}, durations: map[seriesKey]*series{},
		connections:  map[seriesKey]float64{},
		incarnations: map[podRef]types.UID{},
	}
}

// URL is where the exporter serves /metrics.
func (t *Traffic) URL() string { return t.url }

// Addr is the exporter's host:port, for a scrape configuration.
func (t *Traffic) Addr() string { return t.server.Addr }

// SetRate sets the requests per second a workload receives; 0 stops its
// traffic, which stages the low-traffic cases.
func (t *Traffic) SetRate(w WorkloadRef, perSecond float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(time.Now())
	t.rate[w] = perSecond
}

// SetDefaultRate sets the rate of every workload without its own.
func (t *Traffic) SetDefaultRate(perSecond float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(time.Now())
	t.rateAll = perSecond
}

// SetBehavior sets how w behaves on revision rev ("" for every revision
// without a setting of its own).
func (t *Traffic) SetBehavior(w WorkloadRef, rev string, b Behavior) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(time.Now())
	t.behaviors[behaviorKey{w, rev}] = b
}

// Route makes caller send its share of callee's traffic; otherwise the load
// generator sends it all. Both proxies report the call, with
// reporter="source" and reporter="destination".
func (t *Traffic) Route(caller, callee WorkloadRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(time.Now())
	t.routes[callee] = append(t.routes[callee], caller)
}

func (t *Traffic) behavior(w WorkloadRef, rev string) Behavior {
	if b, ok := t.behaviors[behaviorKey{w, rev}]; ok {
		return b
	}
	if b, ok := t.behaviors[behaviorKey{w, ""}]; ok {
		return b
	}
	return DefaultBehavior
}

// meshPods returns, per workload, the revision each of its ready injected
// pods runs, by pod name. Only those have a proxy to report requests.
func (t *Traffic) meshPods() map[WorkloadRef]map[string]string {
	out := map[WorkloadRef]map[string]string{}
	pods, err := t.pods.List(labels.Everything())
	if err != nil {
		return out
	}
	for _, p := range pods {
		st, ok := ParseSidecarStatus(p)
		rev := st.Revision
		if !ok && p.Annotations[AnnotationRedirection] == "enabled" {
			ok, rev = true, AmbientRevision
		}
		if !ok || p.DeletionTimestamp != nil || !podReady(p) {
			continue
		}
		w := WorkloadRef{p.Namespace, workloadName(p)}
		if out[w] == nil {
			out[w] = map[string]string{}
		}
		out[w][p.Name] = rev
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// advanceLocked adds the requests of the time since the last call. Counters
// only grow, as a proxy's do, so PromQL's rate() sees a steady stream.
func (t *Traffic) advanceLocked(now time.Time) {
	if t.last.IsZero() {
		t.last = now
		return
	}
	dt := now.Sub(t.last).Seconds()
	t.last = now
	if dt <= 0 {
		return
	}
	t.forgetGoneLocked()
	mesh := t.meshPods()
	for dest, pods := range mesh {
		rate, ok := t.rate[dest]
		if !ok {
			rate = t.rateAll
		}
		if rate <= 0 || len(pods) == 0 {
			continue
		}
		callers := t.routes[dest]
		for pod, rev := range pods {
			b := t.behavior(dest, rev)
			reqs := rate * dt / float64(len(pods))
			if rev == AmbientRevision {
				// No sidecar: the waypoint or ztunnel that sees the
				// traffic reports it. The callers' own sidecars are not
				// staged for pods in ambient.
				t.recordAmbientLocked(dest, pod, callers, reqs, b)
				continue
			}
			if len(callers) == 0 {
				t.recordLocked("destination", pod, WorkloadRef{LoadGeneratorNamespace, LoadGenerator}, dest, reqs, b.ErrorRatio, b.LatencyMs)
				continue
			}
			share := reqs / float64(len(callers))
			for _, src := range callers {
				// The caller's own proxy may fail the call before it leaves,
				// depending on the revision the caller runs.
				srcPods := mesh[src]
				outErr := 0.0
				for _, srcRev := range srcPods {
					outErr += t.behavior(src, srcRev).OutboundErrorRatio / float64(len(srcPods))
				}
				delivered := share * (1 - outErr)
				t.recordLocked("destination", pod, src, dest, delivered, b.ErrorRatio, b.LatencyMs)
				errShare := outErr + (1-outErr)*b.ErrorRatio
				// Each of the caller's pods reports its part of the calls.
				for srcPod, srcRev := range srcPods {
					if srcRev == AmbientRevision {
						continue // no sidecar of the caller's reports it
					}
					t.recordLocked("source", srcPod, src, dest, share/float64(len(srcPods)), errShare, b.LatencyMs)
				}
			}
		}
	}
}

// forgetGoneLocked drops the series of every pod that is gone or was
// recreated under its name since they began, as a proxy's counters go
// with its pod.
func (t *Traffic) forgetGoneLocked() {
	pods, err := t.pods.List(labels.Everything())
	if err != nil {
		return
	}
	live := make(map[podRef]types.UID, len(pods))
	for _, p := range pods {
		live[podRef{p.Namespace, p.Name}] = p.UID
	}
	gone := map[podRef]bool{}
	for ref, uid := range t.incarnations {
		if live[ref] != uid {
			gone[ref] = true
			delete(t.incarnations, ref)
		}
	}
	if len(gone) == 0 {
		return
	}
	for k := range t.series {
		if gone[k.podRef()] {
			delete(t.series, k)
		}
	}
	for k := range t.connections {
		if gone[k.podRef()] {
			delete(t.connections, k)
		}
	}
}

// podRef is the pod whose proxy reports the series.
func (k seriesKey) podRef() podRef {
	return podRef{k.podNamespace, k.pod}
}

// recordLocked adds reqs requests, errRatio of them 503, with a latency
// spread whose p99 is latencyMs: half at a quarter of it, 49% at half of it
// and 1% at the full value.
func (t *Traffic) recordLocked(reporter, pod string, src, dest WorkloadRef, reqs, errRatio, latencyMs float64) {
	t.recordByLocked(reporter, "", pod, src, dest, reqs, errRatio, latencyMs)
}

// recordByLocked is recordLocked for a reporting pod of namespace podNS
// ("": the destination's, or the caller's for reporter="source").
func (t *Traffic) recordByLocked(reporter, podNS, pod string, src, dest WorkloadRef, reqs, errRatio, latencyMs float64) {
	if reqs <= 0 {
		return
	}
	for _, c := range []struct {
		code  string
		share float64
	}{{"200", 1 - errRatio}, {"503", errRatio}} {
		n := reqs * c.share
		if n <= 0 {
			continue
		}
		k := seriesKey{reporter: reporter, source: src, destination: dest, code: c.code, pod: pod, podNamespace: dest.Namespace}
		if reporter == "source" {
			k.podNamespace = src.Namespace
		}
		if podNS != "" {
			k.podNamespace = podNS
		}
		if t.series[k] == nil {
			t.series[k] = &series{}
		}
		if ref := k.podRef(); t.incarnations[ref] == "" {
			if p, err := t.pods.Pods(ref.namespace).Get(ref.name); err == nil {
				t.incarnations[ref] = p.UID
			}
		}
		t.series[k].requests += n
		// The histogram is kept per workload, not per pod: the exporter
		// writes whole bucket counts, and the p99 of this latency model
		// sits on a bucket's bound, so the rounding of each pod's series
		// would move it from one bucket to the next.
		k.pod, k.podNamespace = "", ""
		s := t.durations[k]
		if s == nil {
			s = &series{buckets: make([]float64, len(durationBuckets))}
			t.durations[k] = s
		}
		s.requests += n
		for _, part := range []struct{ share, ms float64 }{{0.5, latencyMs / 4}, {0.49, latencyMs / 2}, {0.01, latencyMs}} {
			s.sumMs += n * part.share * part.ms
			for i, le := range durationBuckets {
				if part.ms <= le {
					s.buckets[i] += n * part.share
				}
			}
		}
	}
}

var (
	requestLabels = []string{"reporter", "source_workload", "source_workload_namespace", "destination_workload",
		"destination_workload_namespace", "destination_service_name", "destination_service_namespace",
		"response_code", "response_flags", "request_protocol", "connection_security_policy",
		// The target labels of the scrape: the reporting proxy's pod.
		"namespace", "pod"}
	requestsDesc = prometheus.NewDesc("istio_requests_total", "Requests seen by the simulated proxies.", requestLabels, nil)
	durationDesc = prometheus.NewDesc("istio_request_duration_milliseconds", "Request duration seen by the simulated proxies.", requestLabels, nil)
)

// Describe implements prometheus.Collector.
func (t *Traffic) Describe(ch chan<- *prometheus.Desc) {
	ch <- requestsDesc
	ch <- durationDesc
	ch <- connectionsOpenedDesc
	ch <- connectionsFailedDesc
}

// Collect implements prometheus.Collector: it brings the counters up to now
// and emits them.
func (t *Traffic) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(time.Now())
	for _, k := range sortedKeys(t.series) {
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, t.series[k].requests, labelValues(k)...)
	}
	for _, k := range sortedKeys(t.durations) {
		s := t.durations[k]
		buckets := make(map[float64]uint64, len(durationBuckets))
		for i, le := range durationBuckets {
			buckets[le] = uint64(s.buckets[i])
		}
		ch <- prometheus.MustNewConstHistogram(durationDesc, uint64(s.requests), s.sumMs, buckets, labelValues(k)...)
	}
	keys := make([]seriesKey, 0, len(t.connections))
	for k := range t.connections {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		desc := connectionsOpenedDesc
		if k.code == "failed" {
			desc = connectionsFailedDesc
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, t.connections[k],
			k.reporter, k.source.Name, k.source.Namespace, k.destination.Name, k.destination.Namespace, "mutual_tls", k.podNamespace, k.pod)
	}
}

func sortedKeys(m map[seriesKey]*series) []seriesKey {
	keys := make([]seriesKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	return keys
}

// labelValues are a series' labels, in requestLabels' order. A histogram
// kept per workload has no pod, and no namespace of one.
func labelValues(k seriesKey) []string {
	flags := "-"
	if k.code == "503" {
		flags = "URX"
	}
	return []string{k.reporter, k.source.Name, k.source.Namespace, k.destination.Name, k.destination.Namespace,
		k.destination.Name, k.destination.Namespace, k.code, flags, "http", "mutual_tls", k.podNamespace, k.pod}
}

func (t *Traffic) start(host string) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(t); err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("traffic exporter listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.server = &http.Server{Addr: l.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	t.url = "http://" + l.Addr().String() + "/metrics"
	go func() { _ = t.server.Serve(l) }()
	return nil
}

func (t *Traffic) stop(ctx context.Context) { _ = t.server.Shutdown(ctx) }
