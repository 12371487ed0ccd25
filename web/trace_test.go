package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkTurnTracing is a non-streamed chat turn over the fake backend
// with tracing off (the no-op tracer), and on (the SDK, spans kept in
// memory): what tracing costs a turn on top of the server's own work.
func BenchmarkTurnTracing(b *testing.B) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, bc := range []struct {
		name        string
		traceparent string
		tracer      func() trace.TracerProvider
	}{
		{"off", "", func() trace.TracerProvider { return nil }},
		{"off passing traceparent on", parent, func() trace.TracerProvider { return nil }},
		{"on", parent, func() trace.TracerProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fake := newFake()
			fake.Result.Timings = engineTimings(12, 0, 3)
			fake.Result.Text = "abc"
			s, err := New(Config{Tracer: bc.tracer()}, fake, nil)
			if err != nil {
				b.Fatal(err)
			}
			h := s.Handler()
			const body = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if bc.traceparent != "" {
					req.Header.Set("traceparent", bc.traceparent)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
