package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/canary"
)

// act applies a decision: the status first, so that the intent survives a
// crash; then the namespace label; then the Deployment patches, up to a
// batch at once; then the Events, once the writes they report happened.
func (c *Controller) act(ctx context.Context, ns *corev1.Namespace, prev *canary.Status, d canary.Decision) error {
	logger := klog.FromContext(ctx)
	if d.Status != nil || d.SetPaused || d.ClearRollback {
		annotations := map[string]any{}
		if d.Status != nil {
			raw, err := d.Status.Encode()
			if err != nil {
				return err
			}
			annotations[canary.AnnotationStatus] = raw
		}
		if d.SetPaused {
			annotations[canary.AnnotationPaused] = "true"
		}
		if d.ClearRollback {
			annotations[canary.AnnotationRollback] = nil
		}
		if d.Status != nil && slotTaken(prev, d.Status) {
			c.markStarting(ns.Name)
		}
		if err := c.patchNamespace(ctx, ns.Name, map[string]any{"annotations": annotations}); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
		if raw, ok := annotations[canary.AnnotationStatus].(string); ok {
			c.expect.expectStatus(ns.Name, raw, c.clock.Now())
		}
		if d.Status != nil && (prev == nil || prev.Phase != d.Status.Phase || prev.Wave != d.Status.Wave) {
			logger.Info("Namespace changed phase", "phase", d.Status.Phase, "wave", d.Status.Wave, "totalWaves", d.Status.TotalWaves, "reason", d.Status.Reason)
		}
	}
	spanCtx := ctx
	if d.Status != nil {
		spanCtx = c.tracer.WaveContext(ctx, ns.Name, d.Status)
	} else {
		spanCtx = c.tracer.WaveContext(ctx, ns.Name, prev)
	}
	if d.Label != "" {
		_, span := c.tracer.Start(spanCtx, "switch "+canary.LabelRev, attrNS.String(ns.Name), attribute.String("meshwave.label", d.Label))
		defer span.End()
		if err := c.patchNamespace(ctx, ns.Name, map[string]any{"labels": map[string]string{canary.LabelRev: d.Label}}); err != nil {
			return fmt.Errorf("switch %s: %w", canary.LabelRev, err)
		}
		c.expect.expectLabel(ns.Name, d.Label, c.clock.Now())
		logger.Info("Switched namespace revision label", "label", canary.LabelRev, "value", d.Label)
	}
	if err := c.applyMoves(spanCtx, ns.Name, d.Moves); err != nil {
		return err
	}
	c.recordEvents(ns, d.Events)
	return nil
}

// slotTaken reports whether a status write starts a migration.
func slotTaken(prev, next *canary.Status) bool {
	was := prev != nil && holdsOrEnds(prev.Phase)
	return !was && next.Phase == canary.PhaseMigrating
}

func (c *Controller) patchNamespace(ctx context.Context, name string, metadata map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return err
	}
	return retry.OnError(retry.DefaultBackoff, transient, func() error {
		_, err := c.client.CoreV1().Namespaces().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "meshwave"})
		return err
	})
}

// applyMoves sends the Deployment patches, at most a batch at once. A
// conflict means the snapshot was stale: the error requeues the namespace
// and the next reconcile recomputes the patch from fresh data.
func (c *Controller) applyMoves(ctx context.Context, ns string, moves []canary.Move) error {
	if len(moves) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.BatchSize)
	for _, m := range moves {
		g.Go(func() error {
			name := "restart " + m.Workload
			if m.Record.Rollback {
				name = "roll back " + m.Workload
			}
			_, span := c.tracer.Start(ctx, name, attrNS.String(ns), attrWorkload.String(m.Workload),
				attrWave.Int(m.Record.Wave), attrTarget.String(m.Record.Revision))
			defer span.End()
			err := retry.OnError(retry.DefaultBackoff, transient, func() error {
				_, err := c.client.AppsV1().Deployments(ns).Patch(gctx, m.Workload, types.MergePatchType, m.Patch, metav1.PatchOptions{FieldManager: "meshwave"})
				return err
			})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
				return fmt.Errorf("patch deployment %s/%s: %w", ns, m.Workload, err)
			}
			if rec, err := json.Marshal(m.Record); err == nil {
				c.expect.expectMove(ns, m.Workload, string(rec), c.clock.Now())
			}
			logger.Info("Restarted workload", "workload", m.Workload, "revision", m.Record.Revision, "wave", m.Record.Wave, "rollback", m.Record.Rollback)
			return nil
		})
	}
	return g.Wait()
}

// transient reports whether an API error is worth retrying at once.
func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)
}

func (c *Controller) recordEvents(ns *corev1.Namespace, events []canary.Event) {
	for _, e := range events {
		var obj runtime.Object = ns
		if e.Deployment != "" {
			dep, err := c.caches.Deployments.Deployments(ns.Name).Get(e.Deployment)
			if err != nil {
				continue
			}
			obj = dep
		}
		c.recorder.Event(obj, string(e.Type), e.Reason, e.Message)
	}
}
