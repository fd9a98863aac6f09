package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// Options are the controller's dependencies; every outside system is a
// field, so tests can replace it.
type Options struct {
	Client kubernetes.Interface
	Config Config
	// Gates builds the chain that judges a wave; default: the chain the
	// configuration describes, talking to GateDeps.
	Gates func(canary.WaveUnderTest) analysis.Chain
	// GateDeps replace the outside systems the configured gates talk to.
	GateDeps GateDeps
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Recorder defaults to one that writes Events through Client.
	Recorder record.EventRecorder
	// Identity names this replica in the leader lease; default the host name.
	Identity string
	// Registerer receives the agent's metrics; nil registers none.
	Registerer prometheus.Registerer
	// TracerProvider receives the agent's spans; nil exports none.
	TracerProvider trace.TracerProvider
	// Metadata reads the Jobs' metadata, to tell a CronJob's pods in
	// meshwave_revision_holders; nil counts them as their Job's.
	Metadata metadata.Interface
	// Dynamic reads the EnvoyFilters, Telemetries and Sail Istio resources
	// of the compatibility prechecks, each once Client's discovery lists
	// it; nil skips those prechecks.
	Dynamic dynamic.Interface
	// RestConfig reaches pods through the apiserver's port-forward: the
	// ztunnels' config dumps of the sync gate. Nil reads none.
	RestConfig *rest.Config
}

// Controller moves opted-in namespaces between revisions, one reconcile of
// one namespace at a time.
type Controller struct {
	client    kubernetes.Interface
	cfg       Config
	decisions canary.Config
	caches    *Caches
	// dynamic deletes and restores the replaced policies; nil when the
	// agent has no dynamic client.
	dynamic dynamic.Interface
	// fleet reads the other clusters of the rings; nil for a cluster
	// alone.
	fleet *fleetClusters
	queue workqueue.TypedRateLimitingInterface[string]
	gates func(canary.WaveUnderTest) analysis.Chain
	// observe, when set (by tests), is told of every evaluation of a
	// wave's gates: what they were shown, their verdicts and when.
	observe  func(canary.WaveUnderTest, []canary.Verdict, time.Time)
	clock    clock.Clock
	recorder record.EventRecorder
	identity string
	stopRec  func()

	// admitMu serialises the reconciles whose decision reads the peers to
	// decide whether to start a migration, so that two workers never both
	// take the last concurrency slot (admission).
	admitMu sync.Mutex
	// starting holds namespaces this process started whose new phase the
	// cache may not show yet.
	startMu  sync.Mutex
	starting map[string]startMark
	expect   *expectations
	refusals refusals
	// progress holds what the wave under test learnt that is not written.
	progress progressMemory
	// refusedEvictions hold the evictions budgets refused, for the rollout
	// gate's reason.
	refusedEvictions evictionRefusals
	optedIn          optedInAtLastDecision
	metrics          *Metrics
	tracer           *Tracer
	// fleetAlerts reads the other clusters' alerts for a soak with no
	// alert; nil without fleet.soakAlerts.
	fleetAlerts canary.FleetAlerts
}

// New builds a controller and registers its event handlers.
func New(opts Options) (*Controller, error) {
	opts.Config.applyFleetDefaults()
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		client:    opts.Client,
		cfg:       opts.Config,
		decisions: opts.Config.Decisions(),
		caches:    NewCaches(opts.Client, opts.Config.ResyncPeriod.D(), opts.Config.PersistAnnotations),
		dynamic:   opts.Dynamic,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(newRetryLimiter(),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "meshwave"}),
		gates:    opts.Gates,
		clock:    opts.Clock,
		recorder: opts.Recorder,
		identity: opts.Identity,
		starting: map[string]startMark{},
		expect:   newExpectations(),
	}
	if opts.Metadata != nil {
		c.caches.WatchJobs(opts.Metadata, opts.Config.ResyncPeriod.D())
	}
	if len(opts.Config.Fleet.Rings) > 0 {
		// The other clusters' kubeconfig Secrets are in the agent's own
		// namespace, where its lease is.
		ns := opts.Config.LeaderElection.Namespace
		if ns == "" {
			ns = opts.Config.RootNamespace
		}
		c.fleet = newFleetClusters(opts.Client, ns, opts.Config.Fleet, c.peerChanged)
	}
	if opts.Dynamic != nil {
		c.caches.WatchCompat(opts.Dynamic, opts.Client.Discovery(), opts.Config.ResyncPeriod.D())
	}
	if c.gates == nil {
		deps := opts.GateDeps
		if deps.Ztunnels == nil {
			deps.Ztunnels = c.caches.Ztunnels(opts.Config.RootNamespace)
		}
		if deps.Istiods == nil {
			deps.Istiods = c.caches.Istiods(opts.Config.RootNamespace)
		}
		if deps.ZtunnelDumps == nil && opts.RestConfig != nil {
			deps.ZtunnelDumps = portForwardDumps{config: opts.RestConfig, timeout: opts.Config.Gates.Sync.RequestTimeout.D(), dialing: &sync.Map{}}
		}
		gates, err := opts.Config.Gates.BuildGates(opts.Config.RootNamespace, deps)
		if err != nil {
			return nil, err
		}
		c.gates = gates
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if f := opts.Config.Fleet; f.SoakAlerts {
		p := opts.Config.Gates.Metrics.Prometheus
		q, err := p.querier(opts.GateDeps)
		if err != nil {
			return nil, err
		}
		c.fleetAlerts = fleetAlerts(q, p.ClusterLabel, opts.Config.Gates.Metrics.QueryTimeout.D(), func() time.Time { return c.clock.Now() })
	}
	if reg := opts.Registerer; reg != nil {
		if cluster := opts.Config.Fleet.Cluster; cluster != "" {
			// A fleet's Prometheus tells the clusters' series apart.
			reg = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cluster}, reg)
		}
		opts.Registerer = reg
		c.metrics = NewMetrics(opts.Registerer, c.caches, c.clock)
		c.metrics.state.progress = &c.progress
		c.metrics.state.windows = c.decisions.MaintenanceWindows
		opts.Registerer.MustRegister(NewHoldersCollector(c.caches, opts.Config.RootNamespace, c.decisions))
		if c.fleet != nil {
			opts.Registerer.MustRegister(c.fleet)
		}
	}
	c.tracer = NewTracer(opts.TracerProvider)
	if c.recorder == nil {
		b := record.NewBroadcaster()
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: opts.Client.CoreV1().Events("")})
		c.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "meshwave"})
		c.stopRec = b.Shutdown
	}
	if err := c.addHandlers(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) addHandlers() error {
	nsHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNamespace(obj) },
		UpdateFunc: func(old, obj any) {
			c.enqueueNamespace(obj)
			// A namespace that took or freed a slot changes who may start.
			if o, n := old.(*corev1.Namespace), obj.(*corev1.Namespace); c.changesAdmission(o, n) {
				c.enqueueAwaitingAdmission()
			}
		},
		DeleteFunc: func(any) { c.enqueueAll() },
	}
	inNamespace := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueOwnerNamespace,
		UpdateFunc: func(_, obj any) { c.enqueueOwnerNamespace(obj) },
		DeleteFunc: c.enqueueOwnerNamespace,
	}
	// A workload's move records can change its namespace as a peer
	// without any write of the namespace.
	workloads := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.workloadChanged,
		UpdateFunc: func(_, obj any) { c.workloadChanged(obj) },
		DeleteFunc: c.workloadChanged,
	}
	everyone := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAll() },
		UpdateFunc: func(any, any) { c.enqueueAll() },
		DeleteFunc: func(any) { c.enqueueAll() },
	}
	if c.caches.compat != nil {
		// An EnvoyFilter, Telemetry or Sail Istio resource may concern
		// any namespace that has not started.
		if err := c.caches.compat.onChange(everyone); err != nil {
			return err
		}
	}
	for name, h := range map[string]cache.ResourceEventHandler{
		"namespaces": nsHandler, "deployments": inNamespace, "statefulsets": inNamespace, "daemonsets": inNamespace,
		"pods": inNamespace, "webhooks": everyone,
	} {
		if _, err := c.caches.informers[name].AddEventHandler(h); err != nil {
			return err
		}
	}
	for _, name := range []string{"deployments", "statefulsets", "daemonsets"} {
		if _, err := c.caches.informers[name].AddEventHandler(workloads); err != nil {
			return err
		}
	}
	return nil
}

// workloadChanged wakes the namespaces waiting for a slot when a change
// of a workload changes its namespace as a peer: when the answer the
// admissions were last given for it was read from its workloads' move
// records (no status, or one that ended), and reading it again now gives
// another. A record copied in and taken away again, or one taken away
// before its namespace adopted it, would otherwise leave them waiting on
// a slot no one holds.
func (c *Controller) workloadChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, ok := obj.(interface{ GetNamespace() string })
	if !ok {
		return
	}
	kept, keptOK, fromRecords := c.caches.peerMemo.readFromWorkloads(m.GetNamespace())
	if !fromRecords {
		return
	}
	ns, err := c.caches.Namespaces.Get(m.GetNamespace())
	if err != nil {
		c.enqueueAwaitingAdmission()
		return
	}
	mesh, err := c.caches.revisions()
	if err != nil {
		c.enqueueAwaitingAdmission()
		return
	}
	now, nowOK := canary.PeerOf(ns.Name, ns.Annotations, mesh.Resolve, func() ([]canary.Workload, error) { return c.caches.recordsOf(ns.Name) })
	if now != kept || nowOK != keptOK {
		c.enqueueAwaitingAdmission()
	}
}

func (c *Controller) enqueueNamespace(obj any) {
	if ns, ok := obj.(*corev1.Namespace); ok && concerns(ns) {
		c.queue.Add(ns.Name)
	}
}

// concerns reports whether a namespace is meshwave's: opted in, or
// carrying a status from an earlier opt-in.
func concerns(ns *corev1.Namespace) bool {
	_, opted := ns.Annotations[canary.AnnotationTargetRevision]
	_, status := ns.Annotations[canary.AnnotationStatus]
	return opted || status
}

// enqueueOwnerNamespace reacts to a Deployment or pod: its namespace is
// reconciled if it concerns meshwave, and every one is when an istiod pod
// changes, since that decides prechecks.
func (c *Controller) enqueueOwnerNamespace(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	var ns string
	switch o := obj.(type) {
	case *CachedPod:
		if o.Namespace == c.cfg.RootNamespace && o.Labels["app"] == "istiod" {
			c.enqueueAll()
			return
		}
		ns = o.Namespace
	default:
		m, ok := obj.(interface{ GetNamespace() string })
		if !ok {
			return
		}
		ns = m.GetNamespace()
	}
	if n, err := c.caches.Namespaces.Get(ns); err == nil && concerns(n) {
		c.queue.Add(ns)
	}
}

// changesAdmission reports whether an update of a namespace changes what
// the namespaces waiting for a slot read of it: whether it is a peer, and
// its priority, phase, slot and wait for its ring (canary.Peer), read from
// the annotations canary.PeerOf reads (peerInput). A wave's
// progress written by a namespace migrating changes none of them, and
// waking every namespace that waits on each such write made a wave cost
// as many reconciles as there are namespaces waiting. When the mesh
// cannot be read it says yes: waking them is the careful answer.
func (c *Controller) changesAdmission(old, cur *corev1.Namespace) bool {
	if peerInputOf(old.Annotations) == peerInputOf(cur.Annotations) {
		return false
	}
	mesh, err := c.caches.revisions()
	if err != nil {
		return true
	}
	// Either reading may come from the workloads' move records as they
	// are now, which a waiting namespace may not have read yet (records
	// change without a namespace write): such a write wakes them whatever
	// the readings say.
	fromRecords := false
	workloads := func() ([]canary.Workload, error) {
		fromRecords = true
		return c.caches.recordsOf(cur.Name)
	}
	before, was := canary.PeerOf(old.Name, old.Annotations, mesh.Resolve, workloads)
	after, is := canary.PeerOf(cur.Name, cur.Annotations, mesh.Resolve, workloads)
	return fromRecords || was != is || before != after
}

// enqueueAwaitingAdmission enqueues the namespaces whose decision depends
// on the others' slots: those opted in that wait for one (Pending, or with
// no status yet). Only their admission reads the peers; a namespace
// migrating, or done, decides the same whatever the others do, and
// reconciling every one on every status write made each write cost as
// many reconciles as there are opted-in namespaces. One paused before its
// first wave waits for meshwave.io/paused to go, and one Blocked for its
// input or a precheck to be fixed: changes of their own, or of the mesh,
// that wake them. Both are left alone too.
func (c *Controller) enqueueAwaitingAdmission() {
	nss, err := c.caches.Namespaces.List(labels.Everything())
	if err != nil {
		return
	}
	mesh, err := c.caches.revisions()
	if err != nil {
		c.enqueueAll()
		return
	}
	for _, ns := range nss {
		if p, ok := c.caches.peerOf(ns, mesh.Resolve); ok && !p.HoldsSlot && (p.Phase == canary.PhasePending || p.Phase == "") {
			c.queue.Add(ns.Name)
		}
	}
}

func (c *Controller) enqueueAll() {
	nss, err := c.caches.Namespaces.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ns := range nss {
		if concerns(ns) {
			c.queue.Add(ns.Name)
		}
	}
}

// peerChanged takes a namespace that changed in another cluster of the
// fleet to the one of its name here, or, when every namespace of the ring
// before is awaited (or name is "": a cluster's watch began), to every
// namespace here.
func (c *Controller) peerChanged(name string) {
	if name == "" || c.cfg.Fleet.Await == "ring" {
		c.enqueueAll()
		return
	}
	c.queue.Add(name)
}

// Start starts the caches and waits for them to sync. Every replica does
// this, leader or not, so a new leader starts warm.
func (c *Controller) Start(ctx context.Context) error {
	c.caches.Start(ctx)
	if c.fleet != nil {
		c.fleet.start(ctx)
	}
	if !c.caches.WaitForSync() {
		return errors.New("informer caches did not sync")
	}
	return nil
}

// RunWorkers processes the queue until ctx ends.
func (c *Controller) RunWorkers(ctx context.Context) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx)
	logger.Info("Starting workers", "workers", c.cfg.Workers)
	c.enqueueAll()
	var wg sync.WaitGroup
	for i := 0; i < c.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, c.worker, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	logger.Info("Workers stopped")
}

// Shutdown releases what New started.
func (c *Controller) Shutdown() {
	c.queue.ShutDown()
	c.caches.Shutdown()
	if c.stopRec != nil {
		c.stopRec()
	}
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := c.clock.Now()
	logger := klog.FromContext(ctx).WithValues("namespace", key)
	err := c.sync(klog.NewContext(ctx, logger), key)
	if v := logger.V(5); v.Enabled() {
		v.Info("Reconciled the namespace", "took", c.clock.Since(start), "failed", err != nil)
	}
	if c.metrics != nil {
		c.metrics.reconcileDuration.Observe(c.clock.Since(start).Seconds())
		if err != nil {
			c.metrics.reconcileErrors.Inc()
		}
	}
	c.handleErr(ctx, key, err)
	return true
}

// handleErr retries transient errors with the queue's exponential backoff.
func (c *Controller) handleErr(ctx context.Context, key string, err error) {
	if err == nil {
		c.queue.Forget(key)
		return
	}
	if errors.As(err, new(refusedWrite)) {
		klog.FromContext(ctx).Error(err, "The apiserver refused the namespace write; asking again later", "namespace", key, "after", refusedRetry)
		c.queue.Forget(key)
		c.queue.AddAfter(key, refusedRetry)
		return
	}
	klog.FromContext(ctx).Error(err, "Reconcile failed; retrying", "namespace", key, "retries", c.queue.NumRequeues(key))
	c.queue.AddRateLimited(key)
}

// sync reconciles one namespace: gather a snapshot from the caches, run
// the gates of the wave in flight, decide, act.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, err := c.caches.Namespaces.Get(key)
	if apierrors.IsNotFound(err) {
		c.progress.drop(key)
		c.refusedEvictions.drop(key)
		return nil
	}
	if err != nil {
		return err
	}
	// An unreadable status is not ours to guess at: the decision rebuilds
	// it from the move records, and says so with an Event.
	written, _, statusErr := canary.ParseStatus(ns.Annotations)
	base := ns.Annotations[canary.AnnotationStatus]
	status := written
	if working := c.progress.get(key, base); working != nil && written != nil {
		status = working
	}
	if !concerns(ns) {
		c.refusedEvictions.drop(key)
		return nil
	}
	if !c.expect.satisfied(ns, c.cachedWorkload(ns.Name), c.cachedPod(ns.Name), c.clock.Now()) {
		// Our last writes are not in the cache yet; their events requeue
		// the namespace, and this is a backstop.
		klog.FromContext(ctx).V(5).Info("The caches do not show the agent's last writes yet; deciding once they do")
		c.queue.AddAfter(key, 200*time.Millisecond)
		return nil
	}
	snap, err := c.caches.Gather(ns, c.cfg.RootNamespace)
	if err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	if c.fleet != nil {
		snap.Clusters = c.fleet.clusters()
		snap.FleetAlerts = c.fleetAlerts
	}
	c.refusedEvictions.attach(key, evictionStage(status), snap.Workloads)
	admission := &admission{c: c, ns: key, resolve: snap.Mesh.Resolve}
	defer admission.done()
	snap.ReadPeers = admission.peers
	now := c.clock.Now()
	// The migration is read once: the wave to verify and the decision
	// come from the same reading.
	reading := canary.Read(snap, status, statusErr, c.decisions, now)
	var verdicts []canary.Verdict
	if wave, ok := reading.WaveToVerify(); ok {
		if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
			logger.Info("Evaluating the wave's gates", "wave", wave.Wave, "rollback", wave.Rollback, "expect", wave.Expect, "readyWorkloads", readyWorkloads(wave))
		}
		verdicts = c.tracer.traced(c.gates(wave)).Evaluate(c.tracer.WaveContext(ctx, key, status), wave, now)
		if c.observe != nil {
			c.observe(wave, verdicts, now)
		}
	}
	_, optedIn := ns.Annotations[canary.AnnotationTargetRevision]
	refused := c.refusals.take(key)
	d := canary.Decide(canary.Input{Snapshot: snap, Status: status, StatusErr: statusErr, Verdicts: verdicts,
		WasOptedIn: c.optedIn.get(key), Refused: refused, Now: now, Config: c.decisions, Reading: &reading})
	if admission.err != nil {
		// Decided without its peers: nothing of it is carried out.
		c.refusals.add(key, refused)
		return fmt.Errorf("read the peers: %w", admission.err)
	}
	next := d.Status
	if next != nil && d.Label == "" && len(d.Moves) == 0 && !d.SetPaused && !d.ClearRollback && canary.OnlyProgress(written, next) {
		// Progress is kept here, not written: a wave costs the namespace
		// a write when it starts and one when it ends.
		c.progress.set(key, base, next)
		d.Status = nil
	} else if next != nil {
		c.progress.drop(key)
	}
	if err := c.act(ctx, ns, status, d); err != nil {
		return err
	}
	c.optedIn.set(key, optedIn)
	d.Status = next
	c.metrics.observe(key, status, d, verdicts, now)
	if d.Status != nil {
		c.tracer.Transitions(ctx, key, status, d.Status, now)
	}
	if d.RequeueAfter > 0 {
		c.queue.AddAfter(key, d.RequeueAfter)
	}
	if !admission.heldUntil.IsZero() {
		c.queue.AddAfter(key, admission.heldUntil.Sub(now)+time.Millisecond)
	}
	return nil
}

// admission hands one reconcile's decision the other namespaces, read
// when the decision asks for them: only a namespace that may start a
// migration does (canary.Snapshot.ReadPeers). Before reading them it takes
// the controller's admission lock, and keeps it until the reconcile is
// done, writes included: two decisions that each read the others before
// either wrote would both take the last slot. A migration under way, or
// one that ended, never asks, and never waits for the lock.
type admission struct {
	c  *Controller
	ns string
	// resolve resolves the peers' targets as the decision resolves its
	// own: from the mesh it gathered.
	resolve func(string) (string, bool)
	locked  bool
	// err is why the peers could not be read; the decision made without
	// them must not be carried out.
	err error
	// heldUntil, when set, is when the first start this process made that
	// the peers were counted as holding a slot for (withStarting) stops
	// counting: a namespace that waited for it looks again then, since no
	// change in the cluster comes to say so (a migration that started and
	// ended before the cache showed it under way).
	heldUntil time.Time
}

func (a *admission) peers() []canary.Peer {
	if !a.locked {
		a.c.admitMu.Lock()
		a.locked = true
	}
	peers, err := a.c.caches.peers(a.ns, a.resolve)
	if err != nil {
		a.err = err
		return nil
	}
	peers, a.heldUntil = a.c.withStarting(peers)
	return peers
}

// done releases the admission lock, if the decision took it.
func (a *admission) done() {
	if a.locked {
		a.c.admitMu.Unlock()
		a.locked = false
	}
}

// withStarting counts the namespaces this process just started as
// migrating until the cache catches up, for at most startingHold. It
// returns when the first of those it counted stops counting (zero when
// none).
func (c *Controller) withStarting(peers []canary.Peer) ([]canary.Peer, time.Time) {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	now := c.clock.Now()
	var until time.Time
	for i, p := range peers {
		mark, ok := c.starting[p.Name]
		if !ok {
			continue
		}
		at := mark.at
		if p.HoldsSlot || now.Sub(at) > startingHold || c.showsWrite(p.Name, mark.resourceVersion) {
			delete(c.starting, p.Name)
			continue
		}
		peers[i].Phase, peers[i].HoldsSlot = canary.PhaseMigrating, true
		if end := at.Add(startingHold); until.IsZero() || end.Before(until) {
			until = end
		}
	}
	return peers, until
}

// startingHold bounds how long a start this process made counts as
// holding a slot while the cache does not show it.
const startingHold = time.Minute

// cachedWorkload returns a workload's resourceVersion and move record in
// the cache, by ID, and whether it exists there.
func (c *Controller) cachedWorkload(ns string) func(string) (string, string, bool) {
	return func(id string) (string, string, bool) {
		m, _, ok := c.caches.workloadMeta(ns, id)
		if !ok {
			return "", "", false
		}
		return m.GetResourceVersion(), m.GetAnnotations()[canary.AnnotationMove], true
	}
}

// cachedPod returns a pod's UID in the cache, and whether it is there and
// not being deleted.
func (c *Controller) cachedPod(ns string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		p, err := c.caches.Pods.In(ns).Get(name)
		if err != nil || p.DeletionTimestamp != nil {
			return "", false
		}
		return string(p.UID), true
	}
}

// optedInAtLastDecision remembers, per namespace, whether it carried its
// target the last time this process decided on it.
type optedInAtLastDecision struct {
	mu   sync.Mutex
	byNS map[string]bool
}

func (o *optedInAtLastDecision) get(ns string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byNS[ns]
}

// set records the namespace's opt-in once a decision on it was carried out.
func (o *optedInAtLastDecision) set(ns string, optedIn bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byNS == nil {
		o.byNS = map[string]bool{}
	}
	o.byNS[ns] = optedIn
}

// refusals hold, per namespace, the move patches the apiserver refused,
// until the next decision takes them.
type refusals struct {
	mu   sync.Mutex
	byNS map[string]map[string]string
}

func (r *refusals) add(ns string, refused map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNS == nil {
		r.byNS = map[string]map[string]string{}
	}
	if r.byNS[ns] == nil {
		r.byNS[ns] = map[string]string{}
	}
	for k, v := range refused {
		r.byNS[ns][k] = v
	}
}

func (r *refusals) take(ns string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.byNS[ns]
	delete(r.byNS, ns)
	return out
}

// startMark is a start this process made: when, and the resourceVersion
// its write returned ("" until it returned).
type startMark struct {
	at              time.Time
	resourceVersion string
}

func (c *Controller) markStarting(ns string) {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	c.starting[ns] = startMark{at: c.clock.Now()}
}

// markStarted records the resourceVersion the start's write returned:
// once the cache holds the namespace at it or later, what the cache says
// of it is the truth, whatever phase that is (a migration that started
// and ended before the cache showed it under way).
func (c *Controller) markStarted(ns, resourceVersion string) {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	if m, ok := c.starting[ns]; ok {
		m.resourceVersion = resourceVersion
		c.starting[ns] = m
	}
}

// showsWrite reports whether the namespace cache holds ns at
// resourceVersion or later.
func (c *Controller) showsWrite(ns, resourceVersion string) bool {
	if resourceVersion == "" {
		return false
	}
	cached, err := c.caches.Namespaces.Get(ns)
	if err != nil {
		return false
	}
	return caughtUp(&written{resourceVersion: resourceVersion}, cached.ResourceVersion, func() bool { return false })
}

// unmarkStarting forgets a start whose write did not land.
func (c *Controller) unmarkStarting(ns string) {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	delete(c.starting, ns)
}

// readyWorkloads names, comma-separated, the members of a wave under test
// that have a pod Ready on the revision the wave expects: what the gates
// are shown, for a log read when a wave waits.
func readyWorkloads(wave canary.WaveUnderTest) string {
	var names []string
	for _, w := range wave.Workloads {
		for _, p := range w.Pods {
			if p.Revision == wave.Expect && p.Ready && !p.Terminating {
				names = append(names, w.Name)
				break
			}
		}
	}
	return strings.Join(names, ",")
}
