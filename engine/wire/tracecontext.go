package wire

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
)

// traceContext is the W3C Trace Context format (traceparent, tracestate):
// the one kvwin reads from callers and writes to backends. It is a value
// with no state, so no process-wide propagator is needed.
var traceContext propagation.TraceContext

// WithTraceContext returns ctx carrying the remote span context h names in
// its traceparent (and tracestate) header, or ctx itself if h names none or
// a malformed one. A server that traces calls it on each request, so the
// turn's span is a child of its caller's (a client's, or a gateway's).
func WithTraceContext(ctx context.Context, h http.Header) context.Context {
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// SetTraceContext writes the span context ctx carries into h as
// traceparent (and tracestate), if it carries a valid one: a backend client
// calls it, beside SetRequestID, on each request it sends for a turn, so
// the node's spans join the gateway's trace. Without tracing no span
// context is there and nothing is written.
func SetTraceContext(ctx context.Context, h http.Header) {
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}
