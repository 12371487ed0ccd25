package app

import (
	"strings"
	"testing"
)

// TestNewTracerProvider: no endpoint is no provider and no exporter (web
// then runs the no-op tracer); an endpoint makes one for either protocol;
// a malformed endpoint or an unknown protocol is refused, naming the flag.
func TestNewTracerProvider(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       Config
		want    bool   // a provider
		wantErr string // "" none
	}{
		{"off", Config{}, false, ""},
		{"off with a protocol", Config{OTLPProtocol: OTLPGRPC}, false, ""},
		{"http", Config{OTLPEndpoint: "http://127.0.0.1:4318"}, true, ""},
		{"http with a path", Config{OTLPEndpoint: "https://collector.example/otlp/"}, true, ""},
		{"grpc", Config{OTLPEndpoint: "http://127.0.0.1:4317", OTLPProtocol: OTLPGRPC}, true, ""},
		{"from the environment", Config{OTLPFromEnv: true}, true, ""},
		{"no scheme", Config{OTLPEndpoint: "collector:4318"}, false, "--otlp-endpoint"},
		{"not a url", Config{OTLPEndpoint: "http://%zz"}, false, "--otlp-endpoint"},
		{"json", Config{OTLPEndpoint: "http://127.0.0.1:4318", OTLPProtocol: "http/json"}, false, "--otlp-protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := newTracerProvider(tc.f)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tp != nil) != tc.want {
				t.Fatalf("provider = %v, want one: %v", tp, tc.want)
			}
			if tp != nil {
				s := &sharedState{tracer: tp}
				s.close() // flushes nothing, and may be called again
				s.close()
				if s.tracerProvider() != nil {
					t.Fatal("a closed state still hands out its provider")
				}
			}
		})
	}
}
