package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"
)

// PodSelector picks pods by namespace and labels. An empty Namespace matches
// every namespace; a nil Labels matches every pod. OnlyNew limits a fault to
// the pods created after it was staged, such as the new pods of a rollout.
type PodSelector struct {
	Namespace string
	Labels    labels.Selector
	OnlyNew   bool
}

func (s PodSelector) matches(pod *corev1.Pod) bool {
	if s.Namespace != "" && s.Namespace != pod.Namespace {
		return false
	}
	return s.Labels == nil || s.Labels.Matches(labels.Set(pod.Labels))
}

// PodFault is what the kubelet does to the pods a rule selects.
type PodFault int

const (
	// HoldUnready runs the containers but never reports them ready.
	HoldUnready PodFault = iota + 1
	// CrashLoop restarts the first app container over and over.
	CrashLoop
	// Fail ends the first app container with exit code 1 when its run ends
	// (RunTime after it started): a pod that does not restart it
	// (restartPolicy Never) ends Failed, as a failing Job's pod does. A pod
	// that restarts it crash-loops, as under CrashLoop; CrashLoop on a pod
	// that does not restart it acts as Fail.
	Fail
	// KeepRunning keeps the containers of a pod that would run to
	// completion (restartPolicy Never or OnFailure) running, as a
	// long-running Job's are.
	KeepRunning
)

func (f PodFault) String() string {
	switch f {
	case HoldUnready:
		return "HoldUnready"
	case CrashLoop:
		return "CrashLoop"
	case Fail:
		return "Fail"
	case KeepRunning:
		return "KeepRunning"
	}
	return fmt.Sprintf("PodFault(%d)", int(f))
}

type faultRule struct {
	id       int
	selector PodSelector
	fault    PodFault
	// existing are the pods that matched when an OnlyNew rule was staged;
	// creation timestamps have one-second resolution, UIDs are exact.
	existing map[types.UID]bool
}

func (r faultRule) matches(pod *corev1.Pod) bool {
	return r.selector.matches(pod) && !r.existing[pod.UID]
}

type ipRule struct {
	selector PodSelector
	next     func() (string, error)
}

type probeRule struct {
	selector PodSelector
	ready    func(*corev1.Pod) bool
}

// probePeriod is how often a probed pod's readiness is checked again, as a
// readiness probe's periodSeconds.
const probePeriod = 250 * time.Millisecond

// KubeletOptions configure the fake kubelet.
type KubeletOptions struct {
	// Nodes is the number of fake nodes; pods are spread over them.
	Nodes int
	// ReadyDelay is how long after creation a pod becomes Running and Ready.
	ReadyDelay time.Duration
	// RunTime is how long the containers of a pod that runs to completion
	// (restartPolicy Never or OnFailure, such as a Job's) run before they
	// exit with code 0; default 1s.
	RunTime time.Duration
	// StopDelay is how long a deleted pod's containers take to stop, at
	// most its grace period. Zero deletes terminating pods at once.
	StopDelay time.Duration
	// Workers is the number of pods handled concurrently.
	Workers int
}

// Kubelet is a fake kubelet: it registers nodes, binds pending pods to them
// as the scheduler would (honouring nodeName, nodeSelector and required node
// affinity, such as a DaemonSet pod's), gives each pod an IP and, after
// ReadyDelay, reports it Running and Ready with the container statuses a
// real kubelet writes, native sidecars included. A pod that runs to
// completion ends Succeeded after RunTime, its native sidecars stopped with
// it. A terminating pod's containers stop after StopDelay: the pod reports
// a terminal phase and is deleted. It serves the kubelet's port-forward
// endpoint, so that a client's port-forward through the apiserver
// (pods/portforward) reaches a port on the pod's IP.
type Kubelet struct {
	client kubernetes.Interface
	opts   KubeletOptions
	lister corelisters.PodLister
	queue  workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	faults   []faultRule
	ipRules  []ipRule
	probes   []probeRule
	nextRule int
	nextIP   uint32
	nodes    []string
	nodeObjs []*corev1.Node
	bindNext int
	// started and stopping record, by pod UID, when this kubelet reported a
	// pod Running and when it saw its deletion.
	started  map[types.UID]time.Time
	stopping map[types.UID]time.Time

	// port is where the kubelet's HTTPS server (port-forward) listens on
	// 127.0.0.1, the port every node reports; runtimeAddr is the runtime's
	// streaming server it hands streams to. served is closed once both
	// have stopped.
	port        int
	runtimeAddr string
	served      chan struct{}
}

func newKubelet(client kubernetes.Interface, opts KubeletOptions) *Kubelet {
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.ReadyDelay < 0 {
		opts.ReadyDelay = 0
	}
	if opts.RunTime <= 0 {
		opts.RunTime = time.Second
	}
	if opts.StopDelay < 0 {
		opts.StopDelay = 0
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	return &Kubelet{
		client: client,
		opts:   opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 2*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "fake-kubelet"}),
		// Pod IPs start at 10.244.0.10, the usual first pod CIDR.
		nextIP:   binary.BigEndian.Uint32(net.ParseIP("10.244.0.10").To4()),
		started:  map[types.UID]time.Time{},
		stopping: map[types.UID]time.Time{},
	}
}

// HoldUnready keeps the selected pods, present and future, unready until the
// returned function is called.
func (k *Kubelet) HoldUnready(sel PodSelector) (release func()) { return k.addFault(sel, HoldUnready) }

// CrashLoop makes the selected pods crash-loop until the returned function is
// called.
func (k *Kubelet) CrashLoop(sel PodSelector) (release func()) { return k.addFault(sel, CrashLoop) }

// Fail makes the selected pods' first app container exit with code 1 at
// the end of its run until the returned function is called: a Job's pod
// ends Failed.
func (k *Kubelet) Fail(sel PodSelector) (release func()) { return k.addFault(sel, Fail) }

// KeepRunning keeps the selected pods' containers running past RunTime
// until the returned function is called, as a long-running Job's are.
func (k *Kubelet) KeepRunning(sel PodSelector) (release func()) {
	return k.addFault(sel, KeepRunning)
}

func (k *Kubelet) addFault(sel PodSelector, fault PodFault) func() {
	rule := faultRule{selector: sel, fault: fault}
	if sel.OnlyNew {
		rule.existing = map[types.UID]bool{}
		pods, _ := k.lister.List(labels.Everything())
		for _, p := range pods {
			if sel.matches(p) {
				rule.existing[p.UID] = true
			}
		}
	}
	k.mu.Lock()
	k.nextRule++
	id := k.nextRule
	rule.id = id
	k.faults = append(k.faults, rule)
	k.mu.Unlock()
	k.requeueMatching(sel)
	return func() {
		k.mu.Lock()
		for i, r := range k.faults {
			if r.id == id {
				k.faults = append(k.faults[:i], k.faults[i+1:]...)
				break
			}
		}
		k.mu.Unlock()
		k.requeueMatching(sel)
	}
}

// AssignIPs gives the pods of namespace that match sel IPs from next instead
// of the pod range. The mesh uses it to put each istiod replica on its own
// loopback address, where its process listens.
func (k *Kubelet) AssignIPs(namespace string, sel labels.Selector, next func() (string, error)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ipRules = append(k.ipRules, ipRule{selector: PodSelector{Namespace: namespace, Labels: sel}, next: next})
}

// Probe gives the pods of namespace that match sel a readiness probe: they
// are Ready only while ready returns true, checked every probePeriod. The
// mesh probes istiod pods this way, so a pod is Ready when its process
// answers, as a real kubelet's probe of /ready decides.
func (k *Kubelet) Probe(namespace string, sel labels.Selector, ready func(*corev1.Pod) bool) {
	rule := probeRule{selector: PodSelector{Namespace: namespace, Labels: sel}, ready: ready}
	k.mu.Lock()
	k.probes = append(k.probes, rule)
	k.mu.Unlock()
	if k.lister != nil {
		k.requeueMatching(rule.selector)
	}
}

func (k *Kubelet) probeFor(pod *corev1.Pod) func(*corev1.Pod) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.probes {
		if r.selector.matches(pod) {
			return r.ready
		}
	}
	return nil
}

func (k *Kubelet) faultFor(pod *corev1.Pod) PodFault {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.faults {
		if r.matches(pod) {
			return r.fault
		}
	}
	return 0
}

func (k *Kubelet) allocateIP(pod *corev1.Pod) (string, error) {
	k.mu.Lock()
	for _, r := range k.ipRules {
		if r.selector.matches(pod) {
			k.mu.Unlock()
			return r.next()
		}
	}
	defer k.mu.Unlock()
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, k.nextIP)
	k.nextIP++
	return ip.String(), nil
}

func (k *Kubelet) requeueMatching(sel PodSelector) {
	pods, err := k.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		if sel.matches(p) {
			k.queue.Add(p.Namespace + "/" + p.Name)
		}
	}
}

// start starts the kubelet's server, registers the nodes and runs the pod
// loop until ctx ends.
func (k *Kubelet) start(ctx context.Context, factory informers.SharedInformerFactory) error {
	if err := k.serve(ctx); err != nil {
		return err
	}
	for i := 0; i < k.opts.Nodes; i++ {
		name := fmt.Sprintf("fake-node-%d", i)
		node, err := k.registerNode(ctx, name)
		if err != nil {
			return err
		}
		k.nodes = append(k.nodes, name)
		k.nodeObjs = append(k.nodeObjs, node)
	}
	podInformer := factory.Core().V1().Pods()
	k.lister = podInformer.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	_, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.mu.Lock()
				delete(k.started, pod.UID)
				delete(k.stopping, pod.UID)
				k.mu.Unlock()
			}
		},
	})
	if err != nil {
		return err
	}
	for i := 0; i < k.opts.Workers; i++ {
		go wait.UntilWithContext(ctx, k.worker, time.Second)
	}
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	return nil
}

// registerNode creates a Ready node with room for any pod and no taints,
// as the node lifecycle controller leaves a Ready node: what the DaemonSet
// controller needs to run a daemon pod on it. It reports the kubelet's
// port, where the apiserver reaches it at the node's InternalIP to
// port-forward to a pod, and declares ExtendWebSocketsToKubelet, as a 1.37
// kubelet does.
func (k *Kubelet) registerNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "fake-kubelet",
		}},
	}
	created, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("register node %s: %w", name, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("10000"),
	}
	created.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "fake kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
		NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.37.2-fake", OperatingSystem: "linux", Architecture: "amd64", ContainerRuntimeVersion: "fake://1.0"},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{
			KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.port)},
		},
		DeclaredFeatures: []string{extendWebSocketsToKubelet},
	}
	ready, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("mark node %s ready: %w", name, err)
	}
	// The apiserver's TaintNodesByCondition admission taints a new node
	// node.kubernetes.io/not-ready:NoSchedule; the node lifecycle controller,
	// which this world does not run, lifts it once the node is Ready. A
	// DaemonSet's pods do not tolerate it: the DaemonSet controller would
	// find no node to run them on.
	ready.Spec.Taints = slices.DeleteFunc(ready.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeNotReady && t.Effect == corev1.TaintEffectNoSchedule
	})
	untainted, err := k.client.CoreV1().Nodes().Update(ctx, ready, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("untaint node %s: %w", name, err)
	}
	return untainted, nil
}

func (k *Kubelet) worker(ctx context.Context) {
	for {
		key, quit := k.queue.Get()
		if quit {
			return
		}
		requeueAfter, err := k.sync(ctx, key)
		switch {
		case err != nil:
			if !apierrors.IsNotFound(err) {
				k.queue.AddRateLimited(key)
			}
		case requeueAfter > 0:
			k.queue.Forget(key)
			k.queue.AddAfter(key, requeueAfter)
		default:
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

// crashLoopPeriod is how often a crash-looping container "restarts".
const crashLoopPeriod = 2 * time.Second

func (k *Kubelet) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleError(err)
		return 0, nil
	}
	pod, err := k.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return k.stop(ctx, pod)
	case pod.Spec.NodeName == "":
		return 0, k.bind(ctx, pod)
	case !slices.Contains(k.nodes, pod.Spec.NodeName):
		// Bound to a node this kubelet does not run, as a real kubelet
		// leaves other nodes' pods (benchmarks load idle pods this way).
		return 0, nil
	case terminal(pod):
		return 0, nil
	}

	startAt := pod.CreationTimestamp.Add(k.opts.ReadyDelay)
	if pod.Status.Phase != corev1.PodRunning {
		if wait := time.Until(startAt); wait > 0 {
			return wait, nil
		}
	}
	fault := k.faultFor(pod)
	switch {
	case fault == Fail && pod.Spec.RestartPolicy != corev1.RestartPolicyNever:
		fault = CrashLoop // the kubelet restarts the failed container
	case fault == CrashLoop && pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		fault = Fail // nothing restarts it
	}
	probe := k.probeFor(pod)
	again := time.Duration(0)
	switch {
	case fault == CrashLoop:
		again = crashLoopPeriod
	case probe != nil:
		again = probePeriod
	}
	if exitCode, ok := exitsAtEnd(pod, fault); ok && pod.Status.Phase == corev1.PodRunning {
		if wait := time.Until(k.startedAt(pod).Add(k.opts.RunTime)); wait > 0 {
			if again == 0 || wait < again {
				again = wait
			}
		} else {
			return 0, k.writeStatus(ctx, pod, terminatedStatus(pod, exitCode, 0))
		}
	}
	want, err := k.runningStatus(pod, fault, probe)
	if err != nil {
		return 0, err
	}
	if statusEqual(&pod.Status, want) {
		return again, nil
	}
	if pod.Status.Phase != corev1.PodRunning {
		k.mu.Lock()
		if _, ok := k.started[pod.UID]; !ok {
			k.started[pod.UID] = time.Now()
		}
		k.mu.Unlock()
	}
	if err := k.writeStatus(ctx, pod, want); err != nil {
		return 0, err
	}
	return again, nil
}

func (k *Kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, status *corev1.PodStatus) error {
	updated := pod.DeepCopy()
	updated.Status = *status
	_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	return err
}

// keep is the transform of the kubelet's informers. A pod bound to a node
// this kubelet does not run is kept as the little it reads of one (its
// metadata, node and phase: it finishes the pod's deletion, and nothing
// else), as a real kubelet watches its own node's pods only; no pod keeps
// its managed fields. The nodes are registered before the informers start.
func (k *Kubelet) keep(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return StripManagedFields(obj)
	}
	pod.ManagedFields = nil
	if pod.Spec.NodeName == "" || slices.Contains(k.nodes, pod.Spec.NodeName) {
		return pod, nil
	}
	return &corev1.Pod{
		ObjectMeta: pod.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase},
	}, nil
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// exitsAtEnd reports whether pod's app containers exit on their own when
// their run ends, and the first one's exit code: a pod that runs to
// completion (restartPolicy Never or OnFailure) does, unless kept running;
// under Fail (restartPolicy Never) the first container exits with 1.
func exitsAtEnd(pod *corev1.Pod, fault PodFault) (int32, bool) {
	switch {
	case pod.Spec.RestartPolicy != corev1.RestartPolicyNever && pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure:
		return 0, false
	case fault == KeepRunning || fault == CrashLoop:
		return 0, false
	case fault == Fail:
		return 1, true
	}
	return 0, true
}

// startedAt is when this kubelet reported pod Running. Status timestamps
// have one-second resolution; the kubelet's own record is exact.
func (k *Kubelet) startedAt(pod *corev1.Pod) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.started[pod.UID]; ok {
		return t
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return pod.CreationTimestamp.Time
}

// stop finishes a terminating pod the way a kubelet does: StopDelay after
// it saw the deletion (at most the grace period) its containers have
// stopped, it reports the terminal status, then deletes the pod with a
// zero grace period. An evicted pod goes the same way: the Eviction API
// deletes it with its grace period. A pod whose finalizers hold it (a
// Job's, until the job controller has counted it) stays, terminal.
func (k *Kubelet) stop(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g == 0 && len(pod.Finalizers) > 0 && terminal(pod) {
		return 0, nil
	}
	if pod.Status.Phase == corev1.PodRunning && slices.Contains(k.nodes, pod.Spec.NodeName) {
		k.mu.Lock()
		seen, ok := k.stopping[pod.UID]
		if !ok {
			seen = time.Now()
			k.stopping[pod.UID] = seen
		}
		k.mu.Unlock()
		delay := k.opts.StopDelay
		if g := pod.DeletionGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < delay {
			delay = time.Duration(*g) * time.Second
		}
		if wait := time.Until(seen.Add(delay)); wait > 0 {
			return wait, nil
		}
		// Stopped by SIGTERM: the pod ends Failed, as a real kubelet
		// reports a deleted pod before it removes it.
		err := k.writeStatus(ctx, pod, terminatedStatus(pod, sigtermExitCode, sigtermExitCode))
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return 0, nil // gone, or changed: the event brings it back
		}
		if err != nil {
			return 0, err
		}
	}
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	return 0, err
}

// bind binds pod to a node, as the scheduler would: the next node, round
// robin, that its nodeSelector and required node affinity admit. A
// DaemonSet's pod names its one node by a matchFields term on
// metadata.name. The nodes have no taints, so tolerations do not matter.
// A pod no node admits is marked unschedulable and left pending.
func (k *Kubelet) bind(ctx context.Context, pod *corev1.Pod) error {
	node, ok := k.pickNode(pod)
	if !ok {
		return k.markUnschedulable(ctx, pod)
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	if apierrors.IsConflict(err) {
		return nil // already bound; the update event brings it back
	}
	return err
}

func (k *Kubelet) pickNode(pod *corev1.Pod) (string, bool) {
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.nodeObjs {
		n := (k.bindNext + i) % len(k.nodeObjs)
		if ok, err := required.Match(k.nodeObjs[n]); err == nil && ok {
			k.bindNext = n + 1
			return k.nodeObjs[n].Name, true
		}
	}
	return "", false
}

func (k *Kubelet) markUnschedulable(ctx context.Context, pod *corev1.Pod) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return nil
		}
	}
	st := pod.Status.DeepCopy()
	st.Conditions = append(st.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message:            fmt.Sprintf("0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector.", len(k.nodes), len(k.nodes)),
		LastTransitionTime: metav1.Now(),
	})
	err := k.writeStatus(ctx, pod, st)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// sigtermExitCode is what a process that does not catch SIGTERM exits with.
const sigtermExitCode = 128 + 15

// terminatedStatus is the status a kubelet reports once pod's containers
// have exited: the first app container with firstExit, the others with
// othersExit, native sidecars stopped after them with 0, as Envoy exits on
// SIGTERM. The pod is Succeeded when every app container exited 0, Failed
// otherwise.
func terminatedStatus(pod *corev1.Pod, firstExit, othersExit int32) *corev1.PodStatus {
	st := pod.Status.DeepCopy()
	now := metav1.Now()
	terminate := func(cs *corev1.ContainerStatus, code int32) {
		if cs.State.Terminated != nil {
			return // a classic init container, completed long ago
		}
		started := now
		if r := cs.State.Running; r != nil {
			started = r.StartedAt
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID,
		}}
		cs.Ready, cs.Started = false, ptr.To(false)
	}
	st.Phase = corev1.PodSucceeded
	for i := range st.ContainerStatuses {
		code := othersExit
		if i == 0 {
			code = firstExit
		}
		if code != 0 {
			st.Phase = corev1.PodFailed
		}
		terminate(&st.ContainerStatuses[i], code)
	}
	for i := range st.InitContainerStatuses {
		terminate(&st.InitContainerStatuses[i], 0)
	}
	st.Conditions = append([]corev1.PodCondition{
		podCondition(pod, corev1.PodReadyToStartContainers, false, "", now),
		podCondition(pod, corev1.PodInitialized, true, "", now),
		podCondition(pod, corev1.ContainersReady, false, "PodCompleted", now),
		podCondition(pod, corev1.PodReady, false, "PodCompleted", now),
		podCondition(pod, corev1.PodScheduled, true, "", now),
	}, othersConditions(pod)...)
	return st
}

// othersConditions are the conditions of pod the kubelet does not own,
// such as the DisruptionTarget the Eviction API adds; a kubelet keeps them.
func othersConditions(pod *corev1.Pod) []corev1.PodCondition {
	var out []corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled:
		default:
			out = append(out, c)
		}
	}
	return out
}

// podCondition is a condition of pod's status, its transition time kept
// when the status did not change, as a kubelet does: otherwise every
// resync would look like a change.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType, ok bool, reason string, now metav1.Time) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	if !ok {
		c.Status = corev1.ConditionFalse
		c.Reason = reason
	}
	for _, old := range pod.Status.Conditions {
		if old.Type == t && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return c
}

// runningStatus is the status a kubelet reports for pod once its containers
// have started, given the fault injected into it.
func (k *Kubelet) runningStatus(pod *corev1.Pod, fault PodFault, probe func(*corev1.Pod) bool) (*corev1.PodStatus, error) {
	st := pod.Status.DeepCopy()
	now := metav1.Now()
	if st.PodIP == "" {
		ip, err := k.allocateIP(pod)
		if err != nil {
			return nil, fmt.Errorf("allocate an IP for %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		st.PodIP = ip
		st.PodIPs = []corev1.PodIP{{IP: ip}}
		st.HostIP = "127.0.0.1"
		st.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		st.StartTime = &now
	}
	st.Phase = corev1.PodRunning
	started := st.StartTime
	if started == nil {
		started = &now
	}

	// Init containers: a native sidecar (restartPolicy Always) keeps running
	// and reports ready; a classic init container has completed.
	st.InitContainerStatuses = st.InitContainerStatuses[:0]
	for _, c := range pod.Spec.InitContainers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(pod.UID, c.Name)}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs.Ready, cs.Started = true, ptr.To(true)
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *started}}
		} else {
			cs.Started = ptr.To(false)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: *started, FinishedAt: *started}}
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}

	ready := fault != HoldUnready && fault != CrashLoop
	if ready && probe != nil {
		// The probe sees the pod with its IP, as a kubelet probes it.
		probed := pod.DeepCopy()
		probed.Status.PodIP, probed.Status.PodIPs = st.PodIP, st.PodIPs
		ready = probe(probed)
	}
	var prev map[string]corev1.ContainerStatus
	if len(pod.Status.ContainerStatuses) > 0 {
		prev = map[string]corev1.ContainerStatus{}
		for _, cs := range pod.Status.ContainerStatuses {
			prev[cs.Name] = cs
		}
	}
	st.ContainerStatuses = nil
	for i, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: containerID(pod.UID, c.Name)}
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *started}}
		cs.Started = ptr.To(true)
		cs.Ready = ready
		if fault == CrashLoop && i == 0 {
			// One more restart per crashLoopPeriod, however often the pod
			// is synced in between.
			p := prev[c.Name]
			restarts, finished := p.RestartCount, now
			if last := p.LastTerminationState.Terminated; last != nil && time.Since(last.FinishedAt.Time) < crashLoopPeriod {
				finished = last.FinishedAt
			} else {
				restarts++
			}
			cs.RestartCount = restarts
			cs.Started = ptr.To(false)
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting failed container " + c.Name}}
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: *started, FinishedAt: finished}}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}

	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		return podCondition(pod, t, ok, reason, now)
	}
	st.Conditions = append([]corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, true, ""),
		cond(corev1.PodInitialized, true, ""),
		cond(corev1.ContainersReady, ready, "ContainersNotReady"),
		cond(corev1.PodReady, ready, "ContainersNotReady"),
		cond(corev1.PodScheduled, true, ""),
	}, othersConditions(pod)...)
	return st, nil
}

func containerID(uid types.UID, name string) string {
	return "fake://" + string(uid) + "/" + name
}

// statusEqual compares the parts of a status the kubelet owns.
func statusEqual(a, b *corev1.PodStatus) bool {
	if a.Phase != b.Phase || a.PodIP != b.PodIP || len(a.Conditions) != len(b.Conditions) ||
		len(a.ContainerStatuses) != len(b.ContainerStatuses) || len(a.InitContainerStatuses) != len(b.InitContainerStatuses) {
		return false
	}
	for i := range a.Conditions {
		if a.Conditions[i].Type != b.Conditions[i].Type || a.Conditions[i].Status != b.Conditions[i].Status {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		x, y := a.ContainerStatuses[i], b.ContainerStatuses[i]
		if x.Name != y.Name || x.Ready != y.Ready || x.RestartCount != y.RestartCount || (x.State.Waiting == nil) != (y.State.Waiting == nil) {
			return false
		}
	}
	for i := range a.InitContainerStatuses {
		if a.InitContainerStatuses[i].Ready != b.InitContainerStatuses[i].Ready {
			return false
		}
	}
	return true
}
