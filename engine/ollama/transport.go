package ollama

import (
	"context"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"kvwin/engine/idle"
	"kvwin/engine/remote"
	"kvwin/engine/wire"
)

// The api client of Ollama reports a failed call in ways that lose what a
// router needs: a status of 400 or more whose body is `{"error": "…"}`
// becomes errors.New of the message (the status is gone), a body that is not
// JSON becomes "unmarshal: …", an empty 500 body is no error at all, and a
// connection that breaks mid-stream ends the stream as if it were complete
// (its scanner's error is never checked). So every call carries a probe in
// its context, and the transport below fills it in: the status, the start of
// an error body, and bytes arriving (for the idle watchdog). The error is
// then decided from what happened on the wire, not from the client's text.

// probe records one call's response. It is written by probeTransport on the
// goroutine that called the api client (net/http runs RoundTrip and Read on
// the caller's goroutine) and read on the same goroutine after the call.
type probe struct {
	status  int    // the HTTP status; 0 if no response arrived
	errBody []byte // the start of the body of a status of 400 or more
	dog     *idle.Watchdog
}

type probeKey struct{}

// withProbe returns ctx carrying p.
func withProbe(ctx context.Context, p *probe) context.Context {
	return context.WithValue(ctx, probeKey{}, p)
}

// maxErrorBody bounds the error body kept: Ollama's error objects are one
// line; a proxy's HTML page is not worth more.
const maxErrorBody = 4 << 10

// probeTransport fills in the probe of each request's context.
type probeTransport struct {
	base http.RoundTripper
}

// RoundTrip also sends the request id of the turn (wire.RequestIDFrom), so Ollama's
// lines and a proxy's in front of it can be matched with the gateway's, and
// the turn's span context (wire.SetTraceContext), for a traced proxy.
func (t probeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if wire.RequestIDFrom(ctx) != "" || trace.SpanContextFromContext(ctx).IsValid() {
		req = req.Clone(ctx) // a RoundTripper must not modify its request
		wire.SetRequestID(ctx, req.Header)
		wire.SetTraceContext(ctx, req.Header)
	}
	resp, err := t.base.RoundTrip(req)
	p, _ := req.Context().Value(probeKey{}).(*probe)
	if err != nil || p == nil {
		return resp, err
	}
	p.status = resp.StatusCode
	if p.dog != nil {
		p.dog.Kick() // the headers are a sign of life
	}
	resp.Body = &probeBody{ReadCloser: resp.Body, p: p, keep: resp.StatusCode >= http.StatusBadRequest}
	return resp, nil
}

// CloseIdleConnections closes the base transport's idle connections, so
// that http.Client.CloseIdleConnections reaches them through the wrapper.
func (t probeTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// probeBody kicks the watchdog when bytes arrive and keeps the start of an
// error body.
type probeBody struct {
	io.ReadCloser
	p    *probe
	keep bool
}

func (b *probeBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if n > 0 {
		if b.p.dog != nil {
			b.p.dog.Kick()
		}
		if b.keep && len(b.p.errBody) < maxErrorBody {
			b.p.errBody = append(b.p.errBody, buf[:min(n, maxErrorBody-len(b.p.errBody))]...)
		}
	}
	return n, err
}

// newHTTPClient returns the client the api client uses: c (or a client of
// our own, whose connects are bounded by connect) with its transport
// wrapped in a probeTransport.
func newHTTPClient(c *http.Client, connect time.Duration) *http.Client {
	if c == nil {
		return &http.Client{Transport: probeTransport{base: remote.NewTransport(connect)}}
	}
	wrapped := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wrapped.Transport = probeTransport{base: base}
	return &wrapped
}
