package agent

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/meshwave/meshwave/canary"
)

// Metrics are the agent's Prometheus metrics. The per-namespace state is
// read from the informer cache at scrape time, so it is the same on every
// replica, leader or not; the counters count what this replica did.
type Metrics struct {
	state             *stateCollector
	reconcileDuration prometheus.Histogram
	reconcileErrors   prometheus.Counter
	verdicts          *prometheus.CounterVec
	restarts          *prometheus.CounterVec
	evictions         *prometheus.CounterVec
	rollbacks         *prometheus.CounterVec
	gitopsReverts     *prometheus.CounterVec
	waveDuration      *prometheus.HistogramVec
	leader            prometheus.Gauge
}

// NewMetrics registers the agent's metrics with reg. The state collector
// reads caches on each scrape.
func NewMetrics(reg prometheus.Registerer, caches *Caches, clk clock.PassiveClock) *Metrics {
	m := &Metrics{
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshwave_reconcile_duration_seconds", Help: "Time to reconcile one namespace.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshwave_reconcile_errors_total", Help: "Reconciles that failed and were retried.",
		}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwave_analysis_verdicts_total", Help: "Gate verdicts, by namespace, check and result.",
		}, []string{"namespace", "check", "result"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwave_restarts_total", Help: "Workloads restarted, by namespace and kind (move or rollback).",
		}, []string{"namespace", "kind"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwave_evictions_total", Help: "Pods of OnDelete workloads (or of a StatefulSet stuck in a rollback) evicted, by namespace.",
		}, []string{"namespace"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwave_rollbacks_total", Help: "Rollbacks started, by namespace and scope (wave or all).",
		}, []string{"namespace", "scope"}),
		gitopsReverts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwave_gitops_reverts_total", Help: "meshwave's changes found undone, by namespace, kind (label or template) and owner (the GitOps owner marked on the object, or none).",
		}, []string{"namespace", "kind", "owner"}),
		waveDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshwave_wave_duration_seconds", Help: "Time from a wave's start to its outcome, by namespace and outcome.",
			Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{"namespace", "outcome"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshwave_leader", Help: "1 while this replica holds the leader lease and runs the workers.",
		}),
	}
	m.state = &stateCollector{caches: caches, clock: clk}
	reg.MustRegister(m.reconcileDuration, m.reconcileErrors, m.verdicts, m.restarts, m.evictions, m.rollbacks, m.gitopsReverts, m.waveDuration, m.leader, m.state)
	return m
}

// observe counts what a reconcile decided and did.
func (m *Metrics) observe(ns string, prev *canary.Status, d canary.Decision, verdicts []canary.Verdict, now time.Time) {
	if m == nil {
		return
	}
	m.startAtZero(ns, verdicts)
	for _, v := range verdicts {
		if v.Deferred || (v.Result == canary.ResultPending && !v.Checked) {
			continue
		}
		m.verdicts.WithLabelValues(ns, v.Gate, string(v.Result)).Inc()
	}
	for _, mv := range d.Moves {
		if mv.RecordOnly {
			continue
		}
		kind := "move"
		if mv.Record.Rollback {
			kind = "rollback"
		}
		m.restarts.WithLabelValues(ns, kind).Inc()
	}
	for _, r := range d.Reverts {
		owner := r.Owner
		if owner == "" {
			owner = "none"
		}
		m.gitopsReverts.WithLabelValues(ns, r.Kind, owner).Inc()
	}
	next := d.Status
	if next == nil {
		return
	}
	if next.Phase == canary.PhaseRollingBack && (prev == nil || prev.Phase != canary.PhaseRollingBack) {
		m.rollbacks.WithLabelValues(ns, string(next.Rollback)).Inc()
	}
	if prev != nil && prev.WaveStartedAt != nil && prev.WaveState == canary.WaveVerifying {
		outcome := ""
		switch {
		case next.Wave != prev.Wave || next.WaveState == canary.WavePassed || next.Phase == canary.PhaseCompleted:
			outcome = "passed"
		case next.WaveState == canary.WaveFailed || next.Phase == canary.PhaseRollingBack:
			outcome = "failed"
		}
		if outcome != "" {
			m.waveDuration.WithLabelValues(ns, outcome).Observe(now.Sub(*prev.WaveStartedAt).Seconds())
		}
	}
}

// evicted counts one pod evicted.
func (m *Metrics) evicted(ns string) {
	if m != nil {
		m.evictions.WithLabelValues(ns).Inc()
	}
}

// startAtZero makes a namespace's counters and histograms exist, at zero,
// from its first reconcile. Prometheus takes a series' first sample as
// where it starts: a counter that first appears at 1 never increased for
// increase() and rate(), so the namespace's first rollback would not fire
// MeshwaveRollback nor show on the dashboard. Reconciles come well before
// anything is counted (a wave takes a reconcile to start and another to
// end), and a scrape in between sees the zeros. A gate's results start at
// zero with its first verdict, which is Pending while a wave rolls out.
func (m *Metrics) startAtZero(ns string, verdicts []canary.Verdict) {
	for _, kind := range []string{"move", "rollback"} {
		m.restarts.WithLabelValues(ns, kind)
	}
	m.evictions.WithLabelValues(ns)
	for _, scope := range []canary.RollbackScope{canary.RollbackWave, canary.RollbackAll} {
		m.rollbacks.WithLabelValues(ns, string(scope))
	}
	for _, outcome := range []string{"passed", "failed"} {
		m.waveDuration.WithLabelValues(ns, outcome)
	}
	for _, v := range verdicts {
		for _, r := range []canary.Result{canary.ResultPass, canary.ResultFail, canary.ResultInconclusive, canary.ResultPending} {
			m.verdicts.WithLabelValues(ns, v.Gate, string(r))
		}
	}
}

var (
	phaseDesc = prometheus.NewDesc("meshwave_namespace_phase",
		"The namespace's migration phase: one series per phase, 1 for the current one.", []string{"namespace", "phase"}, nil)
	infoDesc = prometheus.NewDesc("meshwave_namespace_info",
		"Always 1; the labels carry the source and target revisions, and the data-plane mode the migration's waves move into (sidecar or ambient).", []string{"namespace", "source_revision", "target", "target_revision", "mode"}, nil)
	waveDesc = prometheus.NewDesc("meshwave_namespace_wave",
		"The current wave, 1-based; 0 before the first.", []string{"namespace"}, nil)
	wavesDesc = prometheus.NewDesc("meshwave_namespace_waves",
		"The total number of waves of the migration.", []string{"namespace"}, nil)
	workloadsDesc = prometheus.NewDesc("meshwave_namespace_workloads",
		"Workloads by state: pending, moving, moved, failed, skipped, rolled_back.", []string{"namespace", "state"}, nil)
	pausedDesc = prometheus.NewDesc("meshwave_namespace_paused_seconds",
		"Seconds the migration has spent paused, the current pause included.", []string{"namespace"}, nil)
	waveAgeDesc = prometheus.NewDesc("meshwave_namespace_wave_age_seconds",
		"Seconds since the wave in progress started; 0 when none is in progress.", []string{"namespace"}, nil)
	blockedDesc = prometheus.NewDesc("meshwave_namespace_blocked",
		"1 when the namespace is Blocked, by kind: invalid_input or precheck.", []string{"namespace", "kind"}, nil)
	valueDesc = prometheus.NewDesc("meshwave_analysis_value",
		"The last measured value of a check, for the wave's worst workload.", []string{"namespace", "check"}, nil)
	thresholdDesc = prometheus.NewDesc("meshwave_analysis_threshold",
		"The threshold the check's value is held against.", []string{"namespace", "check"}, nil)
	baselineDesc = prometheus.NewDesc("meshwave_analysis_baseline",
		"The check's value before the wave's restart, for the same workload.", []string{"namespace", "check"}, nil)
	evidenceDesc = prometheus.NewDesc("meshwave_analysis_evidence",
		"A sequential check's evidence against a healthy wave, for the wave's worst workload: the wave fails when it reaches meshwave_analysis_evidence_bound.", []string{"namespace", "check"}, nil)
	evidenceBoundDesc = prometheus.NewDesc("meshwave_analysis_evidence_bound",
		"The evidence at which a sequential check fails the wave: 1/α, or 2/α against a history, for α as the wave's workloads share it.", []string{"namespace", "check"}, nil)
	windowOpenDesc = prometheus.NewDesc("meshwave_namespace_window_open",
		"1 while the namespace's maintenance windows (the configured ones, narrowed by meshwave.io/maintenance-window) are open; always 1 without windows.", []string{"namespace"}, nil)
	nextWindowDesc = prometheus.NewDesc("meshwave_namespace_next_window_timestamp_seconds",
		"When the maintenance window the namespace's next wave waits for opens, in Unix seconds; only while one waits.", []string{"namespace"}, nil)
	ringWaitDesc = prometheus.NewDesc("meshwave_namespace_waits_for_ring",
		"1 while the namespace's first wave waits for the ring before its own cluster's to complete the same move and soak (fleets).", []string{"namespace"}, nil)
	resultDesc = prometheus.NewDesc("meshwave_analysis_result",
		"The check's last result: one series per result, 1 for the current one.", []string{"namespace", "check", "result"}, nil)
)

// stateCollector reports each namespace's status from the cache.
type stateCollector struct {
	caches *Caches
	clock  clock.PassiveClock
	// progress, when set, is the controller's unwritten wave progress.
	progress *progressMemory
	// windows are the configured maintenance windows.
	windows canary.Windows
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{phaseDesc, infoDesc, waveDesc, wavesDesc, workloadsDesc, pausedDesc, waveAgeDesc, blockedDesc, windowOpenDesc, nextWindowDesc, ringWaitDesc, valueDesc, thresholdDesc, baselineDesc, evidenceDesc, evidenceBoundDesc, resultDesc} {
		ch <- d
	}
}

// Collect reports the namespaces that carry meshwave.io/target-revision:
// one that left keeps its last status, which must not keep an alert such
// as MeshwaveCanaryPaused firing. A status is input like any other (a
// person may edit it): one that cannot be read is skipped, a series it
// would report twice (a gate named in two verdicts) is reported once,
// from the last verdict, and a value the exposition refuses is dropped.
// Nothing one namespace holds can fail the scrape for the others:
// client_golang answers 500 to the whole scrape on a duplicate series.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	nss, err := c.caches.Namespaces.List(labels.Everything())
	if err != nil {
		return
	}
	now := c.clock.Now()
	for _, ns := range nss {
		if _, opted := ns.Annotations[canary.AnnotationTargetRevision]; !opted {
			continue
		}
		st, ok, err := canary.ParseStatus(ns.Annotations)
		if !ok || err != nil {
			continue
		}
		if c.progress != nil {
			if working := c.progress.get(ns.Name, ns.Annotations[canary.AnnotationStatus]); working != nil {
				st = working // the wave's progress, which is not written
			}
		}
		for _, m := range namespaceMetrics(ns.Name, st, now) {
			ch <- m
		}
		// An invalid annotation blocks the namespace; the configured
		// windows alone are reported for it.
		settings, _ := canary.ParseNamespace(ns.Name, ns.Annotations)
		ch <- prometheus.MustNewConstMetric(windowOpenDesc, prometheus.GaugeValue, b2f(canary.WindowsOpen(now, c.windows, settings.Windows)), ns.Name)
	}
}

// namespaceMetrics are one namespace's state series, each once.
func namespaceMetrics(n string, st *canary.Status, now time.Time) []prometheus.Metric {
	var out []prometheus.Metric
	seen := map[string]bool{}
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		key := d.String() + "\xff" + strings.Join(lv, "\xff")
		if seen[key] {
			return
		}
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, lv...)
		if err != nil {
			return
		}
		seen[key] = true
		out = append(out, m)
	}
	for _, p := range canary.Phases {
		gauge(phaseDesc, b2f(st.Phase == p), n, string(p))
	}
	mode := "sidecar"
	if st.Mode == canary.ModeAmbient {
		mode = "ambient"
	}
	gauge(infoDesc, 1, n, st.SourceRevision, st.Target, st.TargetRevision, mode)
	gauge(waveDesc, float64(st.Wave), n)
	gauge(wavesDesc, float64(st.TotalWaves), n)
	for state, v := range map[string]int{"pending": st.Counts.Pending, "moving": st.Counts.Moving, "moved": st.Counts.Moved,
		"failed": st.Counts.Failed, "skipped": st.Counts.Skipped, "rolled_back": st.Counts.RolledBack} {
		gauge(workloadsDesc, float64(v), n, state)
	}
	gauge(pausedDesc, st.PausedFor(now).Seconds(), n)
	age := 0.0
	if (st.Phase == canary.PhaseMigrating || st.Phase == canary.PhaseAnalyzing || st.Phase == canary.PhaseRollingBack) &&
		st.WaveState != canary.WavePassed && st.WaveStartedAt != nil {
		age = now.Sub(*st.WaveStartedAt).Seconds()
	}
	gauge(waveAgeDesc, age, n)
	if st.NextWindow != nil {
		gauge(nextWindowDesc, float64(st.NextWindow.Unix()), n)
	}
	gauge(ringWaitDesc, b2f(st.WaitsForRing), n)
	blocked := st.Phase == canary.PhaseBlocked
	gauge(blockedDesc, b2f(blocked && st.BlockedKind == canary.BlockedInvalidInput), n, "invalid_input")
	gauge(blockedDesc, b2f(blocked && st.BlockedKind == canary.BlockedPrecheck), n, "precheck")
	// The last verdict of each gate, in the order the gates first appear.
	last := map[string]int{}
	var gates []string
	for i, v := range st.Verdicts {
		if _, ok := last[v.Gate]; !ok {
			gates = append(gates, v.Gate)
		}
		last[v.Gate] = i
	}
	for _, g := range gates {
		v := st.Verdicts[last[g]]
		for _, r := range []canary.Result{canary.ResultPass, canary.ResultFail, canary.ResultInconclusive, canary.ResultPending} {
			gauge(resultDesc, b2f(v.Result == r), n, v.Gate, string(r))
		}
		if len(v.Measurements) == 0 || !v.Analysis {
			continue
		}
		worst := v.Measurements[0]
		gauge(valueDesc, worst.Value, n, v.Gate)
		if worst.Threshold != nil {
			gauge(thresholdDesc, *worst.Threshold, n, v.Gate)
		}
		if worst.Baseline != nil {
			gauge(baselineDesc, *worst.Baseline, n, v.Gate)
		}
		if worst.Evidence != nil && worst.EvidenceBound != nil {
			gauge(evidenceDesc, *worst.Evidence, n, v.Gate)
			gauge(evidenceBoundDesc, *worst.EvidenceBound, n, v.Gate)
		}
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// RegisterClientMetrics exports client-go's request latency and results,
// and the workqueue's metrics, through reg. client-go accepts one
// registration per process, so only the first call has an effect.
func RegisterClientMetrics(reg prometheus.Registerer) {
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "meshwave_kube_request_duration_seconds", Help: "Kubernetes API request latency, by verb.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30},
	}, []string{"verb"})
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshwave_kube_requests_total", Help: "Kubernetes API requests, by method and status code.",
	}, []string{"method", "code"})
	if err := reg.Register(latency); err != nil {
		return
	}
	if err := reg.Register(results); err != nil {
		return
	}
	if err := reg.Register(receivedBytes); err != nil {
		return
	}
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestLatency: latencyAdapter{latency},
		RequestResult:  resultAdapter{results},
	})
	workqueue.SetProvider(queueMetrics{reg: reg})
}

type latencyAdapter struct{ h *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, _ url.URL, d time.Duration) {
	a.h.WithLabelValues(verb).Observe(d.Seconds())
}

type resultAdapter struct{ c *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, _ string) {
	a.c.WithLabelValues(method, code).Inc()
}

// queueMetrics implements client-go's workqueue.MetricsProvider.
type queueMetrics struct{ reg prometheus.Registerer }

func (q queueMetrics) register(c prometheus.Collector) prometheus.Collector {
	if err := q.reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			return are.ExistingCollector
		}
	}
	return c
}

func (q queueMetrics) gauge(name, queue, help string) prometheus.Gauge {
	return q.register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshwave_workqueue_" + name, Help: help, ConstLabels: prometheus.Labels{"queue": queue}})).(prometheus.Gauge)
}

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.gauge("depth", name, "Current depth of the workqueue.")
}
func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.register(prometheus.NewCounter(prometheus.CounterOpts{Name: "meshwave_workqueue_adds_total", Help: "Items added to the workqueue.", ConstLabels: prometheus.Labels{"queue": name}})).(prometheus.Counter)
}
func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.register(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshwave_workqueue_queue_duration_seconds", Help: "Time an item waits in the workqueue.", ConstLabels: prometheus.Labels{"queue": name}, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})).(prometheus.Histogram)
}
func (q queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.register(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshwave_workqueue_work_duration_seconds", Help: "Time to process an item.", ConstLabels: prometheus.Labels{"queue": name}, Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})).(prometheus.Histogram)
}
func (q queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.gauge("unfinished_work_seconds", name, "Seconds of work in progress not yet finished.")
}
func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.gauge("longest_running_processor_seconds", name, "Seconds the longest running item has been processed.")
}
func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.register(prometheus.NewCounter(prometheus.CounterOpts{Name: "meshwave_workqueue_retries_total", Help: "Items requeued after an error.", ConstLabels: prometheus.Labels{"queue": name}})).(prometheus.Counter)
}

var holdersDesc = prometheus.NewDesc("meshwave_revision_holders",
	"Pods injected by a revision, by reason code: running its proxy (will_move, moving, cronjob, job, bare_pod, not_opted_in, ...) or finished (pod_succeeded, pod_failed). Every installed revision and every revision a pod carries has a series per code, 0 included.",
	[]string{"revision", "reason"}, nil)

// holdersCollector reports, at scrape time and from the caches, the pods
// that still hold each revision, by reason: the count of meshwave holders
// for every revision at once. A scrape recounts only the namespaces whose
// objects changed since the one before (holderTally).
type holdersCollector struct {
	caches *Caches
	tally  *holderTally
}

// NewHoldersCollector builds the collector of meshwave_revision_holders
// and adds its event handlers to the caches' informers: call it once the
// caches watch everything they will (WatchJobs included). Like the
// namespace state, every replica reports it from its own caches.
func NewHoldersCollector(caches *Caches, rootNamespace string, decisions canary.Config) prometheus.Collector {
	t := newHolderTally(caches, rootNamespace, decisions)
	t.watch()
	return &holdersCollector{caches: caches, tally: t}
}

func (c *holdersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- holdersDesc }

// Collect reports nothing until the caches synced: a partial count would
// say a revision is emptier than it is.
func (c *holdersCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.caches.Synced() {
		return
	}
	counts, revisions, err := c.tally.counts()
	if err != nil {
		return
	}
	for rev := range revisions {
		for _, code := range canary.HolderReasons {
			ch <- prometheus.MustNewConstMetric(holdersDesc, prometheus.GaugeValue, float64(counts[holderKey{rev, code}]), rev, string(code))
		}
	}
}
