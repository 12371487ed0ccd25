package web

import (
	"context"
	"errors"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// A turn's trace (see docs/observability.md): one span from the request's
// arrival to the end of its answer, a child of the caller's span context
// (a client's traceparent, or the gateway's span whose request this is),
// in the request's context while the backend runs, so a backend adapter
// sends it on (wire.SetTraceContext). Its children are the turn's
// Server-Timing phases, made when the turn ends from the same timestamps
// the header is made from (core.TurnPhases), each starting where the one
// before it ended; a phase of zero length has no span. Attributes follow
// OpenTelemetry's GenAI conventions, plus kvwin's own; they name the
// tenant, never a key, and hold no prompt or answer text.

// tracerName is the instrumentation scope of the server's spans.
const tracerName = "kvwin/web"

// headerTraceparent carries a caller's span context (W3C Trace Context).
const headerTraceparent = "Traceparent"

// kvwin's attributes of a turn's span, beside OpenTelemetry's GenAI and
// HTTP ones (semconv).
const (
	attrBackend   = attribute.Key("kvwin.backend")
	attrSlot      = attribute.Key("kvwin.slot")
	attrTenant    = attribute.Key("kvwin.tenant")
	attrRequestID = attribute.Key("kvwin.request_id")
)

// The operations a turn is, by gen_ai.operation.name: a chat (messages) or
// a completion of a prompt.
const (
	operationChat       = "chat"
	operationCompletion = "text_completion"
)

// startTurnSpan starts turn t's span at its arrival and puts it in the
// request's context. Without a tracer the span records nothing, and the
// caller's span context (if any) is what the context carries on; without
// one either, nothing is done at all.
func (s *Server) startTurnSpan(c *gin.Context, t *core.Turn, req engine.Request) trace.Span {
	if !s.traced && c.Request.Header.Get(headerTraceparent) == "" {
		return trace.SpanFromContext(c.Request.Context()) // a no-op span
	}
	start := t.Start
	if start.IsZero() {
		start = time.Now()
	}
	op, model := operation(req), turnModel(t, req)
	ctx := wire.WithTraceContext(c.Request.Context(), c.Request.Header)
	ctx, span := s.tracer.Start(ctx, op+" "+model, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(semconv.GenAIOperationNameKey.String(op), semconv.GenAIRequestModelKey.String(model))
	}
	c.Request = c.Request.WithContext(ctx)
	return span
}

// endTurnSpan ends turn t's span now, with its phases as children: called
// is when the backend was handed the request, first when the first token
// came, res and err how the turn ended. Nothing is done for a span that
// does not record.
func (s *Server) endTurnSpan(c *gin.Context, span trace.Span, t *core.Turn, called, first time.Time, res engine.Result, err error) {
	if !span.IsRecording() {
		return
	}
	end := time.Now()
	s.phaseSpans(trace.ContextWithSpan(context.Background(), span), core.TurnPhases(t, called, first, end, res.Timings), t.Start, called)
	span.SetAttributes(turnAttributes(c, t, res)...)
	if err != nil {
		kind := errorType(err)
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.SetStatus(codes.Error, kind)
	}
	span.End(trace.WithTimestamp(end))
}

// phaseSpans makes one child span of ctx's per phase of p longer than
// zero, laid end to end from the turn's start (start, or called if the
// turn has none).
func (s *Server) phaseSpans(ctx context.Context, p core.Phases, start, called time.Time) {
	at := start
	if at.IsZero() {
		at = called
	}
	p.Each(func(name string, d time.Duration) {
		if name == core.PhaseTotal || d <= 0 {
			return
		}
		_, ps := s.tracer.Start(ctx, name, trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindInternal))
		at = at.Add(d)
		ps.End(trace.WithTimestamp(at))
	})
}

// turnAttributes are what a finished turn's span says of it.
func turnAttributes(c *gin.Context, t *core.Turn, res engine.Result) []attribute.KeyValue {
	tm := res.Timings
	attrs := []attribute.KeyValue{
		semconv.GenAIUsageInputTokensKey.Int(tm.PromptTokens), semconv.GenAIUsageOutputTokensKey.Int(core.OutputTokens(res)),
		semconv.GenAIUsageCacheReadInputTokensKey.Int(tm.CachedTokens), attrBackend.String(core.ServedBy(t.Info, res.Backend)),
		attrRequestID.String(t.RequestID), semconv.HTTPRouteKey.String(c.FullPath()), semconv.HTTPResponseStatusCodeKey.Int(c.Writer.Status()),
	}
	if t.Tenant != "" {
		attrs = append(attrs, attrTenant.String(t.Tenant))
	}
	if res.Slot >= 0 {
		attrs = append(attrs, attrSlot.Int(res.Slot))
	}
	if res.FinishReason != "" {
		attrs = append(attrs, semconv.GenAIResponseFinishReasonsKey.StringSlice([]string{res.FinishReason}))
	}
	return attrs
}

// operation is req's gen_ai.operation.name.
func operation(req engine.Request) string {
	if len(req.Messages) > 0 {
		return operationChat
	}
	return operationCompletion
}

// turnModel is the model req names, or else the one t's backend serves.
func turnModel(t *core.Turn, req engine.Request) string {
	if req.Model != "" {
		return req.Model
	}
	return t.Info.Model
}

// errorType is the error.type of a turn that failed: the code its error
// answer has (core.Classify), or client_gone; never the error's message,
// which may quote the request.
func errorType(err error) string {
	if errors.Is(err, core.ErrClientGone) {
		return "client_gone"
	}
	_, body := core.Classify(err)
	if body.Code != "" {
		return body.Code
	}
	return body.Type
}
