package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/canary"
)

// act applies a decision: one namespace write first, carrying the status,
// the paused and rollback annotations and the istio.io/rev label together
// (an empty one when only Deployments are patched), fenced with the
// resourceVersion the decision was made from, so that the
// intent survives a crash and a stale writer gets a conflict rather than
// the last word; then the Deployment patches, up to a batch at once; then
// the Events of what happened. A patch the apiserver refuses (an admission
// policy's 403 or 422) is reported with an Event and handed to the next
// decision, which applies the failure policy.
func (c *Controller) act(ctx context.Context, ns *corev1.Namespace, prev *canary.Status, d canary.Decision) error {
	if err := c.writeNamespace(ctx, ns, prev, d); err != nil {
		if refusal(err) {
			// Nothing of the decision happened: no restart follows a
			// namespace write that did not land. Say so, and ask again
			// later rather than at the queue's back-off pace.
			c.recordEvents(ns, []canary.Event{{Type: canary.EventWarning, Reason: "NamespaceWriteRefused",
				Message: fmt.Sprintf("the apiserver refused meshwave's write to namespace %s, so nothing was changed; asking again in %s: %s", ns.Name, refusedRetry, answer(err))}})
			return refusedWrite{err}
		}
		return err
	}
	spanCtx := ctx
	if d.Status != nil {
		spanCtx = c.tracer.WaveContext(ctx, ns.Name, d.Status)
	} else {
		spanCtx = c.tracer.WaveContext(ctx, ns.Name, prev)
	}
	failed, refused, err := c.applyMoves(spanCtx, ns.Name, d.Moves)
	var events []canary.Event
	if err == nil {
		// The evictions belong to the status the decision leaves: the one
		// it wrote, or the one it kept.
		stage := evictionStage(prev)
		if d.Status != nil {
			stage = evictionStage(d.Status)
		}
		events = c.applyEvictions(spanCtx, ns.Name, stage, d.Evictions)
		// The replaced policies go after the restart that lets them go.
		var policyEvents []canary.Event
		policyEvents, err = c.applyPolicies(spanCtx, ns.Name, d)
		events = append(events, policyEvents...)
	}
	for _, e := range d.Events {
		if (e.Reason == "Restarted" || e.Reason == "MoveRecordRestored") && failed[e.Workload] {
			continue
		}
		events = append(events, e)
	}
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		events = append(events, canary.Event{Workload: name, Type: canary.EventWarning, Reason: "RestartRefused",
			Message: "the apiserver refused the move patch: " + refused[name]})
	}
	c.recordEvents(ns, events)
	if len(refused) > 0 {
		c.refusals.add(ns.Name, refused)
		c.queue.Add(ns.Name)
	}
	return err
}

// writeNamespace sends the decision's namespace changes as one merge patch
// that carries the namespace's resourceVersion.
func (c *Controller) writeNamespace(ctx context.Context, ns *corev1.Namespace, prev *canary.Status, d canary.Decision) error {
	annotations := map[string]any{}
	var statusRaw string
	if d.Status != nil {
		raw, err := d.Status.Encode()
		if err != nil {
			return err
		}
		statusRaw = raw
		annotations[canary.AnnotationStatus] = raw
	}
	if d.SetPaused {
		annotations[canary.AnnotationPaused] = "true"
	}
	if d.ClearRollback {
		annotations[canary.AnnotationRollback] = nil
	}
	if d.ReplacedPolicies != nil {
		// The copies go out before the restart that lets their policies
		// be deleted.
		if *d.ReplacedPolicies == "" {
			annotations[canary.AnnotationReplacedPolicies] = nil
		} else {
			annotations[canary.AnnotationReplacedPolicies] = *d.ReplacedPolicies
		}
	}
	fenceOnly := len(annotations) == 0 && d.Label == "" && !d.EnrolNamespace && d.UseWaypoint == "" && !d.RemoveWaypoint
	if fenceOnly && len(d.Moves) == 0 && len(d.Evictions) == 0 && len(d.DeletePolicies) == 0 && len(d.RestorePolicies) == 0 {
		return nil
	}
	// Restarts decided with nothing to change on the namespace still go
	// through it: an empty patch fenced with the resourceVersion they were
	// decided from, which the apiserver answers with a conflict, writing
	// nothing, when the namespace cache was behind.
	metadata := map[string]any{"resourceVersion": ns.ResourceVersion}
	if len(annotations) > 0 {
		metadata["annotations"] = annotations
	}
	labels := map[string]any{}
	switch {
	case d.EnrolNamespace:
		// The move to ambient completed: the namespace is enrolled and
		// loses its injection labels, in the write of the status that
		// says so.
		labels[canary.LabelDataplaneMode], labels[canary.LabelRev], labels[canary.LabelInjection] = canary.DataplaneAmbient, nil, nil
	case d.UnenrolNamespace:
		labels[canary.LabelRev], labels[canary.LabelDataplaneMode] = d.Label, nil
	case d.Label != "":
		labels[canary.LabelRev] = d.Label
	}
	// The waypoint, in the write of the status that records meshwave set
	// it (or took it off).
	switch {
	case d.UseWaypoint != "":
		labels[canary.LabelUseWaypoint] = d.UseWaypoint
	case d.RemoveWaypoint:
		labels[canary.LabelUseWaypoint] = nil
	}
	if len(labels) > 0 {
		metadata["labels"] = labels
	}
	if d.Status != nil && canary.TakesSlot(prev, d.Status) {
		c.markStarting(ns.Name)
	}
	spanCtx := c.tracer.WaveContext(ctx, ns.Name, prev)
	if d.Status != nil {
		spanCtx = c.tracer.WaveContext(ctx, ns.Name, d.Status)
	}
	if d.Label != "" {
		_, span := c.tracer.Start(spanCtx, "switch "+canary.LabelRev, attrNS.String(ns.Name), attribute.String("meshwave.label", d.Label))
		defer span.End()
	}
	patch, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return err
	}
	if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
		var phase canary.Phase
		var wave int
		var waveState canary.WaveState
		if d.Status != nil {
			phase, wave, waveState = d.Status.Phase, d.Status.Wave, d.Status.WaveState
		}
		logger.Info("Writing the namespace", "phase", phase, "wave", wave, "waveState", waveState, "fenceOnly", fenceOnly)
	}
	var updated *corev1.Namespace
	err = c.retryTransient(ctx, func() error {
		var err error
		updated, err = c.client.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "meshwave"})
		return err
	})
	if err != nil {
		if d.Status != nil && canary.TakesSlot(prev, d.Status) {
			c.unmarkStarting(ns.Name) // nothing started
		}
		return fmt.Errorf("write namespace %s: %w", ns.Name, err)
	}
	if d.Status != nil && canary.TakesSlot(prev, d.Status) {
		c.markStarted(ns.Name, updated.ResourceVersion)
	}
	if fenceOnly {
		return nil
	}
	c.expect.expectNamespace(ns.Name, updated.ResourceVersion, statusRaw, d.Label, c.clock.Now())
	logger := klog.FromContext(ctx)
	if d.Status != nil && (prev == nil || prev.Phase != d.Status.Phase || prev.Wave != d.Status.Wave) {
		logger.Info("Namespace changed phase", "phase", d.Status.Phase, "wave", d.Status.Wave, "totalWaves", d.Status.TotalWaves, "reason", d.Status.Reason)
	}
	if d.Label != "" {
		logger.Info("Set namespace revision label", "label", canary.LabelRev, "value", d.Label)
	}
	if d.EnrolNamespace {
		logger.Info("Enrolled the namespace in ambient", "label", canary.LabelDataplaneMode, "value", canary.DataplaneAmbient)
	}
	if d.UseWaypoint != "" {
		logger.Info("Put the namespace behind its waypoint", "label", canary.LabelUseWaypoint, "value", d.UseWaypoint)
	}
	if d.RemoveWaypoint {
		logger.Info("Took the namespace's waypoint label off", "label", canary.LabelUseWaypoint)
	}
	return nil
}

// applyMoves sends the Deployment patches, at most a batch at once. It
// returns the moves that were not made, and among them those the apiserver
// refused, with its answer. Any other failure (a conflict: the snapshot was
// stale) is returned as an error: the namespace is retried and the next
// reconcile recomputes the patch from fresh data.
func (c *Controller) applyMoves(ctx context.Context, ns string, moves []canary.Move) (failed map[string]bool, refused map[string]string, err error) {
	failed, refused = map[string]bool{}, map[string]string{}
	if len(moves) == 0 {
		return failed, refused, nil
	}
	logger := klog.FromContext(ctx)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.BatchSize)
	for _, m := range moves {
		g.Go(func() error {
			name := "restart " + m.Workload
			switch {
			case m.RecordOnly:
				name = "restore the move record of " + m.Workload
			case m.Record.Rollback:
				name = "roll back " + m.Workload
			}
			_, span := c.tracer.Start(ctx, name, attrNS.String(ns), attrWorkload.String(m.Workload),
				attrWave.Int(m.Record.Wave), attrTarget.String(m.Record.Revision))
			defer span.End()
			var updated metav1.Object
			err := c.retryTransient(gctx, func() error {
				var err error
				updated, err = c.patchWorkload(gctx, ns, m.Workload, m.Patch)
				return err
			})
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
				mu.Lock()
				defer mu.Unlock()
				failed[m.Workload] = true
				switch {
				case apierrors.IsNotFound(err):
					return nil
				case refusal(err):
					refused[m.Workload] = answer(err)
					logger.Info("The apiserver refused a move patch", "workload", m.Workload, "answer", refused[m.Workload])
					return nil
				}
				return fmt.Errorf("patch %s in %s: %w", m.Workload, ns, err)
			}
			c.expect.expectMove(ns, m.Workload, updated.GetResourceVersion(), m.Record.Encode(), c.clock.Now())
			if m.RecordOnly {
				logger.Info("Restored a move record", "workload", m.Workload, "revision", m.Record.Revision, "wave", m.Record.Wave)
				return nil
			}
			logger.Info("Restarted workload", "workload", m.Workload, "revision", m.Record.Revision, "wave", m.Record.Wave, "rollback", m.Record.Rollback)
			return nil
		})
	}
	err = g.Wait()
	return failed, refused, err
}

// patchWorkload sends a move patch to the object a workload ID names.
func (c *Controller) patchWorkload(ctx context.Context, ns, id string, patch []byte) (metav1.Object, error) {
	kind, name, ok := canary.SplitWorkloadID(id)
	if !ok {
		return nil, fmt.Errorf("no workload kind meshwave moves is named %q", id)
	}
	opts := metav1.PatchOptions{FieldManager: "meshwave"}
	apps := c.client.AppsV1()
	switch kind {
	case canary.KindStatefulSet:
		return apps.StatefulSets(ns).Patch(ctx, name, types.MergePatchType, patch, opts)
	case canary.KindDaemonSet:
		return apps.DaemonSets(ns).Patch(ctx, name, types.MergePatchType, patch, opts)
	}
	return apps.Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, opts)
}

// applyEvictions evicts the pods of OnDelete workloads the decision chose,
// through the Eviction API so that PodDisruptionBudgets are honoured, each
// bound to the pod's UID so that a pod its controller already recreated
// under the same name is never evicted by mistake. A budget that allows
// no disruption now answers 429: the pod is evicted on a later reconcile,
// and the refusal is remembered for the rollout gate's reason, in stage
// (evictionStage), until an eviction of the workload succeeds. It returns
// the Events to record.
func (c *Controller) applyEvictions(ctx context.Context, ns, stage string, evictions []canary.Eviction) []canary.Event {
	logger := klog.FromContext(ctx)
	var events []canary.Event
	for _, e := range evictions {
		_, span := c.tracer.Start(ctx, "evict "+e.Pod, attrNS.String(ns), attrWorkload.String(e.Workload))
		uid := types.UID(e.UID)
		// Tried once: a 429 is a budget's answer, not a busy apiserver, and
		// any failure is tried again by a later decision.
		err := c.client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: e.Pod, Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
		})
		switch {
		case err == nil:
			c.expect.expectEviction(ns, e.Pod, e.UID, c.clock.Now())
			c.refusedEvictions.evicted(ns, e.Workload)
			c.metrics.evicted(ns)
			logger.Info("Evicted pod", "workload", e.Workload, "pod", e.Pod)
			events = append(events, canary.Event{Workload: e.Workload, Type: canary.EventNormal, Reason: "PodEvicted", Message: e.Message})
		case apierrors.IsTooManyRequests(err):
			who, said := "its PodDisruptionBudget", answer(err)
			if budget, text, ok := c.caches.budgetRefusal(ns, e.Pod, err); ok {
				who, said = budgetDescribed(budget), text
				c.refusedEvictions.refused(ns, e.Workload, stage, e.Pod, e.UID, refusalReason(budget, e.Pod, text))
			}
			logger.Info("A disruption budget holds the eviction for now", "workload", e.Workload, "pod", e.Pod, "answer", said)
			events = append(events, canary.Event{Workload: e.Workload, Type: canary.EventNormal, Reason: "EvictionWaiting",
				Message: fmt.Sprintf("pod %s waits for %s to allow an eviction: %s", e.Pod, who, said)})
			c.queue.AddAfter(ns, evictionRetry)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or already replaced: the next decision sees it.
		case transient(err):
			c.queue.AddAfter(ns, evictionRetry)
		default:
			span.SetStatus(codes.Error, err.Error())
			events = append(events, canary.Event{Workload: e.Workload, Type: canary.EventWarning, Reason: "EvictionRefused",
				Message: fmt.Sprintf("the apiserver refused to evict pod %s: %s", e.Pod, answer(err))})
		}
		span.End()
	}
	return events
}

// evictionRetry is how soon an eviction a disruption budget held is tried
// again.
const evictionRetry = 5 * time.Second

// retryTransient runs a write, retrying it with exponential backoff while
// the apiserver answers with a transient error (429, 5xx, a timeout), for
// at most writeRetryBudget. Any other answer, a conflict included, ends it:
// a conflict means the decision was made from stale data, and the
// namespace is decided again from fresh data instead.
func (c *Controller) retryTransient(ctx context.Context, write func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, 2*time.Second, writeRetryBudget
	b.Clock = c.clock
	return backoff.Retry(func() error {
		err := write()
		if err != nil && !transient(err) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
}

// writeRetryBudget bounds the retries of one write; past it, the
// reconcile fails and the workqueue retries the namespace with its own
// rate limit.
const writeRetryBudget = 10 * time.Second

// transient reports whether an API error is worth retrying at once.
func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)
}

// refusal reports whether the apiserver refused a patch for good: no retry
// of the same patch can succeed (an admission policy's 403 or 422, a 400).
// A conflict is not one: it means the snapshot was stale.
func refusal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsUnauthorized(err)
}

// answer is the apiserver's answer as a person reads it: its message and
// the HTTP status.
func answer(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		st := s.Status()
		return fmt.Sprintf("%s (%d %s)", st.Message, st.Code, st.Reason)
	}
	return err.Error()
}

func (c *Controller) recordEvents(ns *corev1.Namespace, events []canary.Event) {
	for _, e := range events {
		var obj runtime.Object = ns
		if e.Workload != "" {
			_, o, ok := c.caches.workloadMeta(ns.Name, e.Workload)
			if !ok {
				continue
			}
			obj = o
		}
		c.recorder.Event(obj, string(e.Type), e.Reason, e.Message)
	}
}

// refusedRetry is how long a namespace whose write the apiserver refused
// waits before it is decided again (sooner when it changes).
const refusedRetry = time.Minute

// refusedWrite is a namespace write the apiserver refused for good.
type refusedWrite struct{ err error }

func (r refusedWrite) Error() string { return r.err.Error() }
func (r refusedWrite) Unwrap() error { return r.err }

// applyPolicies deletes the replaced policies the decision names, each by
// its UID (a policy of the same name made since is not the one replaced),
// and creates again those a rollback restores, from their copies. A
// policy already gone, or already there again, is done. Each is told with
// an Event; a failure is returned, and the next decision asks again.
func (c *Controller) applyPolicies(ctx context.Context, ns string, d canary.Decision) ([]canary.Event, error) {
	if len(d.DeletePolicies) == 0 && len(d.RestorePolicies) == 0 {
		return nil, nil
	}
	if c.dynamic == nil {
		return nil, errors.New("replaced policies: the agent has no dynamic client")
	}
	policies := c.dynamic.Resource(authorizationPoliciesResource).Namespace(ns)
	logger := klog.FromContext(ctx)
	var events []canary.Event
	var errs []error
	for _, p := range d.DeletePolicies {
		uid := types.UID(p.UID)
		err := policies.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case err == nil:
			logger.Info("Deleted a replaced policy", "policy", p.Name, "uid", p.UID)
			events = append(events, canary.Event{Type: canary.EventNormal, Reason: "ReplacedPolicyDeleted",
				Message: fmt.Sprintf("AuthorizationPolicy %s/%s is deleted: %s", ns, p.Name, p.Why)})
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already, or another policy of its name: nothing of ours.
		default:
			events = append(events, canary.Event{Type: canary.EventWarning, Reason: "ReplacedPolicyDeleteFailed",
				Message: fmt.Sprintf("AuthorizationPolicy %s/%s could not be deleted: %s", ns, p.Name, answer(err))})
			errs = append(errs, fmt.Errorf("delete AuthorizationPolicy %s/%s: %w", ns, p.Name, err))
		}
	}
	for _, s := range d.RestorePolicies {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(s.Object); err != nil {
			events = append(events, canary.Event{Type: canary.EventWarning, Reason: "ReplacedPolicyRestoreFailed",
				Message: fmt.Sprintf("the copy of AuthorizationPolicy %s/%s in %s cannot be read: %v", ns, s.Name, canary.AnnotationReplacedPolicies, err)})
			continue
		}
		obj.SetNamespace(ns)
		obj.SetName(s.Name)
		_, err := policies.Create(ctx, obj, metav1.CreateOptions{FieldManager: "meshwave"})
		switch {
		case err == nil:
			logger.Info("Restored a replaced policy", "policy", s.Name)
			events = append(events, canary.Event{Type: canary.EventNormal, Reason: "ReplacedPolicyRestored",
				Message: fmt.Sprintf("AuthorizationPolicy %s/%s, deleted when the workloads it selects left their sidecars, is created again from its copy: they are back on their sidecars", ns, s.Name)})
		case apierrors.IsAlreadyExists(err):
		default:
			events = append(events, canary.Event{Type: canary.EventWarning, Reason: "ReplacedPolicyRestoreFailed",
				Message: fmt.Sprintf("AuthorizationPolicy %s/%s could not be created again from its copy in %s: %s", ns, s.Name, canary.AnnotationReplacedPolicies, answer(err))})
			errs = append(errs, fmt.Errorf("restore AuthorizationPolicy %s/%s: %w", ns, s.Name, err))
		}
	}
	return events, errors.Join(errs...)
}
