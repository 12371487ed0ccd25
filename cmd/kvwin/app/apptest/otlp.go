package apptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one span an OTLPReceiver received, decoded from the wire: ids
// in hex ("" for no parent), attributes and its resource's attributes as
// Go values (string, int64, float64, bool, []any).
type Span struct {
	Name                     string
	Kind                     string // SPAN_KIND_SERVER, …
	TraceID, SpanID, Parent  string
	Start, End               time.Time
	Attrs, Resource          map[string]any
	StatusCode, StatusReason string
}

// OTLPReceiver is a real OTLP trace receiver in the test's process: it
// decodes each ExportTraceServiceRequest posted to it (OTLP/HTTP protobuf,
// gzip or not) or sent over gRPC, and keeps its spans.
type OTLPReceiver struct {
	// URL is the base URL to export to (--otlp-endpoint).
	URL string

	mu      sync.Mutex
	spans   []Span
	exports int
}

// StartOTLPReceiver starts an OTLP/HTTP receiver on a free loopback port,
// stopped with the test.
func StartOTLPReceiver(t *testing.T) *OTLPReceiver {
	t.Helper()
	r := &OTLPReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.Error(w, "want POST /v1/traces", http.StatusNotFound)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var msg collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &msg)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// StartOTLPGRPCReceiver starts an OTLP/gRPC receiver on a free loopback
// port (URL is http://HOST:PORT), stopped with the test.
func StartOTLPGRPCReceiver(t *testing.T) *OTLPReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPReceiver{URL: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, grpcTraces{r: r})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return r
}

// grpcTraces is the gRPC trace service of a receiver.
type grpcTraces struct {
	collectortrace.UnimplementedTraceServiceServer
	r *OTLPReceiver
}

func (g grpcTraces) Export(_ context.Context, msg *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.r.add(msg)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// add keeps the spans of one export.
func (r *OTLPReceiver) add(msg *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exports++
	for _, rs := range msg.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{
					Name: s.GetName(), Kind: s.GetKind().String(),
					TraceID: hexID(s.GetTraceId()), SpanID: hexID(s.GetSpanId()), Parent: hexID(s.GetParentSpanId()),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs: attrMap(s.GetAttributes()), Resource: res,
					StatusCode: s.GetStatus().GetCode().String(), StatusReason: s.GetStatus().GetMessage(),
				})
			}
		}
	}
}

// Spans are the spans received so far, in the order they came.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Exports is how many export requests came, spans or not.
func (r *OTLPReceiver) Exports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports
}

func hexID(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return hex.EncodeToString(b)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return out
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	}
	return nil
}
