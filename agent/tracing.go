package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// NewTracerProvider configures tracing from the standard OTEL_* variables
// only. With none of OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, or with OTEL_TRACES_EXPORTER=none,
// nothing is exported and the provider is a no-op. OTEL_TRACES_EXPORTER may
// be otlp (the protocol from OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL: grpc or
// http/protobuf, the default) or console.
func NewTracerProvider(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	exporter := os.Getenv("OTEL_TRACES_EXPORTER")
	configured := exporter != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if !configured || exporter == "none" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch exporter {
	case "", "otlp":
		protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if protocol == "" {
			protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch protocol {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "", "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		default:
			return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q is not grpc or http/protobuf", protocol)
		}
	case "console":
		exp, err = stdouttrace.New()
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER %q is not otlp, console or none", exporter)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(semconv.ServiceName("meshwave")))
	if err != nil {
		return nil, nil, err
	}
	tp := NewSDKTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// NewSDKTracerProvider is an SDK provider whose IDs for migrations and
// waves are derived from their identity (see Tracer), so that every span of
// a migration lands in one trace whichever replica, and whichever restart
// of it, made the span.
func NewSDKTracerProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithIDGenerator(&stableIDs{}))...)
}

// stableIDs gives a span the IDs its context asks for, and random ones
// otherwise.
type stableIDs struct{}

type idHintKey struct{}

type idHint struct {
	trace trace.TraceID
	span  trace.SpanID
}

func (g *stableIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if h, ok := ctx.Value(idHintKey{}).(idHint); ok {
		return h.trace, h.span
	}
	var t trace.TraceID
	var s trace.SpanID
	_, _ = rand.Read(t[:])
	_, _ = rand.Read(s[:])
	return t, s
}

func (g *stableIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if h, ok := ctx.Value(idHintKey{}).(idHint); ok {
		return h.span
	}
	var s trace.SpanID
	_, _ = rand.Read(s[:])
	return s
}

// Span and attribute names.
const (
	tracerName   = "github.com/meshwave/meshwave/agent"
	attrNS       = attribute.Key("meshwave.namespace")
	attrWave     = attribute.Key("meshwave.wave")
	attrTarget   = attribute.Key("meshwave.revision.target")
	attrSource   = attribute.Key("meshwave.revision.source")
	attrVerdict  = attribute.Key("meshwave.verdict")
	attrWorkload = attribute.Key("meshwave.workload")
	attrPhase    = attribute.Key("meshwave.phase")
)

// Tracer makes meshwave's spans: one trace per namespace migration, one
// span per wave, and under each wave the spans of its patches, gates and
// PromQL queries.
type Tracer struct {
	tracer trace.Tracer
}

// NewTracer returns a Tracer over tp.
func NewTracer(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(tracerName)}
}

func digest(parts ...string) [32]byte { return sha256.Sum256([]byte(strings.Join(parts, "\x00"))) }

// ids derives the trace of a migration and the spans of its root and waves.
func ids(st *canary.Status, ns string) (trace.TraceID, trace.SpanID) {
	d := digest("migration", ns, st.MigrationID())
	var t trace.TraceID
	var s trace.SpanID
	copy(t[:], d[:16])
	copy(s[:], d[16:24])
	return t, s
}

func waveSpanID(st *canary.Status, ns string, wave int) trace.SpanID {
	d := digest("wave", ns, st.MigrationID(), fmt.Sprint(wave))
	var s trace.SpanID
	copy(s[:], d[:8])
	return s
}

// WaveContext returns ctx carrying the span context of the status's
// current wave (or of the migration, before the first wave), for the spans
// a reconcile makes. A status without a started migration gives ctx back.
func (t *Tracer) WaveContext(ctx context.Context, ns string, st *canary.Status) context.Context {
	if t == nil || st == nil || st.StartedAt == nil {
		return ctx
	}
	traceID, rootID := ids(st, ns)
	span := rootID
	if st.Wave > 0 {
		span = waveSpanID(st, ns, st.Wave)
	}
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: span, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
}

// Start starts a span under ctx's wave.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// Transitions emits the spans that a status change closes: a wave that
// ended, and the migration when it ended. They carry their real start
// times from the status.
func (t *Tracer) Transitions(ctx context.Context, ns string, prev, next *canary.Status, now time.Time) {
	if t == nil || prev == nil || next == nil || prev.StartedAt == nil {
		return
	}
	common := []attribute.KeyValue{attrNS.String(ns), attrTarget.String(prev.TargetRevision), attrSource.String(prev.SourceRevision)}
	traceID, rootID := ids(prev, ns)
	root := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: rootID, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	// A wave's span is emitted once, when the migration leaves the wave for
	// good: the next wave starts, or the migration ends. A paused wave waits.
	ended := canary.Terminal(next.Phase) && !canary.Terminal(prev.Phase)
	if prev.Wave > 0 && prev.WaveStartedAt != nil && (next.Wave != prev.Wave || ended) {
		outcome := "passed"
		if next.Wave == prev.Wave {
			switch next.Phase {
			case canary.PhaseRolledBack:
				outcome = "rolled back"
			case canary.PhaseStopped:
				outcome = "stopped"
			}
		}
		wctx := context.WithValue(root, idHintKey{}, idHint{trace: traceID, span: waveSpanID(prev, ns, prev.Wave)})
		_, span := t.tracer.Start(wctx, fmt.Sprintf("wave %d", prev.Wave), trace.WithTimestamp(*prev.WaveStartedAt),
			trace.WithAttributes(append(common, attrWave.Int(prev.Wave), attrVerdict.String(outcome))...))
		if outcome != "passed" {
			span.SetStatus(codes.Error, next.Reason)
		}
		span.End(trace.WithTimestamp(now))
	}
	if ended {
		rctx := context.WithValue(ctx, idHintKey{}, idHint{trace: traceID, span: rootID})
		_, span := t.tracer.Start(rctx, "migration "+ns, trace.WithTimestamp(*prev.StartedAt), trace.WithNewRoot(),
			trace.WithAttributes(append(common, attrPhase.String(string(next.Phase)), attrVerdict.String(string(next.Phase)))...))
		if next.Phase != canary.PhaseCompleted {
			span.SetStatus(codes.Error, next.Reason)
		}
		span.End(trace.WithTimestamp(now))
	}
}

// dueGate is a gate that asks an outside system only when due.
type dueGate interface {
	Due(wave canary.WaveUnderTest, now time.Time) bool
}

// tracedGate gives a gate's real evaluations a span under the wave: a
// gate that asks an outside system, when it is due; a pure gate, when its
// answer is decided. "Still rolling out" on every pod event is not traced.
type tracedGate struct {
	inner  analysis.Gate
	tracer *Tracer
}

func (g tracedGate) Name() string { return g.inner.Name() }

func (g tracedGate) Evaluate(ctx context.Context, wave canary.WaveUnderTest, now time.Time) canary.Verdict {
	attrs := []attribute.KeyValue{attrNS.String(wave.Namespace), attrWave.Int(wave.Wave), attrTarget.String(wave.Expect)}
	if d, ok := g.inner.(dueGate); ok {
		if !d.Due(wave, now) {
			return g.inner.Evaluate(ctx, wave, now)
		}
		ctx, span := g.tracer.Start(ctx, "gate "+g.Name(), attrs...)
		v := g.inner.Evaluate(ctx, wave, now)
		endGateSpan(span, v)
		return v
	}
	v := g.inner.Evaluate(ctx, wave, now)
	if v.Result != canary.ResultPending {
		_, span := g.tracer.Start(ctx, "gate "+g.Name(), attrs...)
		endGateSpan(span, v)
	}
	return v
}

func endGateSpan(span trace.Span, v canary.Verdict) {
	span.SetAttributes(attrVerdict.String(string(v.Result)), attribute.String("meshwave.reason", v.Reason))
	if v.Result == canary.ResultFail || v.Result == canary.ResultInconclusive {
		span.SetStatus(codes.Error, v.Reason)
	}
	span.End()
}

// traced wraps every gate of a chain.
func (t *Tracer) traced(chain analysis.Chain) analysis.Chain {
	if t == nil {
		return chain
	}
	out := make(analysis.Chain, len(chain))
	for i, g := range chain {
		out[i] = tracedGate{inner: g, tracer: t}
	}
	return out
}
