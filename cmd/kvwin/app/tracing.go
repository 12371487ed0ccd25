package app

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Traces (see docs/observability.md): with an OTLP endpoint, from
// --otlp-endpoint or the standard OTEL_EXPORTER_OTLP_* variables, a server
// exports each turn's span and its phases (web/trace.go) through
// OpenTelemetry's SDK, batched, over OTLP/HTTP or gRPC. Without one no
// exporter and no SDK exist: web runs OpenTelemetry's no-op tracer. The
// provider belongs to the process (sharedState), not to a generation: a
// reload keeps it, and it is flushed when the server closes.

// The OTLP protocols a server exports with (OTEL_EXPORTER_OTLP_PROTOCOL's
// values the Go SDK has an exporter for).
const (
	OTLPHTTP = "http/protobuf"
	OTLPGRPC = "grpc"
)

// otlpTracesPath is where an OTLP/HTTP collector takes traces, appended to
// a base URL as the spec says for OTEL_EXPORTER_OTLP_ENDPOINT.
const otlpTracesPath = "/v1/traces"

// tracerFlushTimeout bounds the export of the last spans at shutdown.
const tracerFlushTimeout = 5 * time.Second

// serviceName is the service.name of kvwin's spans unless
// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says another.
const serviceName = "kvwin"

// newTracerProvider returns the tracer provider f asks for: nil (no
// tracing, no exporter) when f names no endpoint, else an SDK provider
// batching spans to an OTLP exporter. Creating it connects to nothing.
func newTracerProvider(f Config) (*sdktrace.TracerProvider, error) {
	if f.OTLPEndpoint == "" && !f.OTLPFromEnv {
		return nil, nil
	}
	exp, err := newSpanExporter(f.OTLPEndpoint, f.OTLPProtocol)
	if err != nil {
		return nil, err
	}
	role := "node"
	if len(f.Backends) > 0 {
		role = "gateway"
	}
	// Later options win: the variables over kvwin's defaults.
	res, err := resource.New(context.Background(),
		resource.WithAttributes(attribute.String("service.name", serviceName), attribute.String("kvwin.role", role)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("otlp: resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// newSpanExporter makes the OTLP exporter of protocol ("" is OTLPHTTP) to
// endpoint, a base URL (OTEL_EXPORTER_OTLP_ENDPOINT's form: for HTTP,
// /v1/traces is appended unless the path ends with it), or, with endpoint
// "", to where the OTEL_EXPORTER_OTLP_* variables say, which the exporter
// reads itself. An option given here wins over a variable.
func newSpanExporter(endpoint, protocol string) (sdktrace.SpanExporter, error) {
	var u *url.URL
	if endpoint != "" {
		var err error
		if u, err = url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--otlp-endpoint %q: want a URL such as http://collector:4318", endpoint)
		}
	}
	ctx := context.Background()
	switch protocol {
	case "", OTLPHTTP:
		var opts []otlptracehttp.Option
		if u != nil {
			if !strings.HasSuffix(u.Path, otlpTracesPath) {
				u.Path = strings.TrimSuffix(u.Path, "/") + otlpTracesPath
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		return otlptracehttp.New(ctx, opts...)
	case OTLPGRPC:
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		return otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("--otlp-protocol %q: want %s or %s", protocol, OTLPHTTP, OTLPGRPC)
	}
}

// otlpEndpointForLog is where f exports to, for the log: the flag's URL
// without its user and password, or the variables'.
func otlpEndpointForLog(f Config) string {
	if f.OTLPEndpoint == "" {
		return "OTEL_EXPORTER_OTLP_* variables"
	}
	if u, err := url.Parse(f.OTLPEndpoint); err == nil {
		return u.Redacted()
	}
	return ""
}
