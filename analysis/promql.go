package analysis

import (
	"context"
	"fmt"
	"strings"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwave/meshwave/canary"
)

// ask runs one PromQL query of a check, traced, and reads the answer as a
// T (a vector or a matrix). Anything else is an Inconclusive verdict: no
// answer, an answer with warnings (Thanos and Cortex answer so when a
// store did not: the very series that would fail may be missing, so it is
// judged neither way), or a value of another type.
func ask[T model.Value](ctx context.Context, check, q string, query func(context.Context) (model.Value, promv1.Warnings, error)) (T, *canary.Verdict) {
	var zero T
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/meshwave/meshwave/analysis").
		Start(ctx, "promql "+check, trace.WithAttributes(attribute.String("db.query.text", q), attribute.String("meshwave.check", check)))
	val, warnings, err := query(ctx)
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case len(warnings) > 0:
		span.SetStatus(codes.Error, "warnings: "+strings.Join(warnings, "; "))
	}
	span.End()
	switch {
	case err != nil:
		return zero, &canary.Verdict{Result: canary.ResultInconclusive, Reason: "Prometheus did not answer: " + clip(err.Error())}
	case len(warnings) > 0:
		return zero, &canary.Verdict{Result: canary.ResultInconclusive, Reason: "Prometheus's answer may be incomplete: " + clipWarnings(warnings)}
	}
	got, ok := val.(T)
	if !ok {
		kind := "nothing"
		if val != nil {
			kind = "a " + val.Type().String()
		}
		return zero, &canary.Verdict{Result: canary.ResultInconclusive, Reason: fmt.Sprintf("the query returned %s, not a %s", kind, zero.Type())}
	}
	return got, nil
}
