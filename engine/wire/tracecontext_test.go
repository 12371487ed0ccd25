package wire

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestTraceContext(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name        string
		traceparent string // sent by the caller; "" none
		want        string // written on to a backend; "" none
	}{
		{"none", "", ""},
		{"valid", parent, parent},
		{"malformed", "00-xyz-00f067aa0ba902b7-01", ""},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := http.Header{}
			if tt.traceparent != "" {
				in.Set("Traceparent", tt.traceparent)
			}
			ctx := WithTraceContext(context.Background(), in)
			if got := trace.SpanContextFromContext(ctx).IsRemote(); got != (tt.want != "") {
				t.Fatalf("remote span context = %v, want %v", got, tt.want != "")
			}
			out := http.Header{}
			SetTraceContext(ctx, out)
			if got := out.Get("traceparent"); got != tt.want {
				t.Fatalf("traceparent written = %q, want %q", got, tt.want)
			}
		})
	}
}
