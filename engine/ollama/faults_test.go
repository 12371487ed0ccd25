package ollama

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// TestGenerateFaults: every way a server can fail ends Generate with a
// clear error, never a panic or a hang. Failures before the first event
// wrap engine.ErrUnavailable (a router may fail over), ErrUnknownModel (the
// server lacks the model) or ErrInvalidRequest; after the first event they
// are plain errors and the events already sent stand.
func TestGenerateFaults(t *testing.T) {
	tests := []struct {
		name     string
		fake     *fakeOllama
		cfg      Config
		timeout  time.Duration // the caller's deadline; 0 for none
		events   int           // events streamed before the error
		sentinel error         // the error wraps it; nil: it wraps none of the engine's
		status   int           // a *StatusError with this status
		message  string        // in the error's text
	}{
		{
			name:     "500 before the first byte",
			fake:     &fakeOllama{chat: answerWith(500, "application/json", `{"error":"llama runner process has terminated: exit status 2"}`)},
			sentinel: engine.ErrUnavailable, status: 500, message: "llama runner process has terminated",
		},
		{
			// The api client sees no line at all and reports nothing.
			name:     "500 with an empty body",
			fake:     &fakeOllama{chat: answerWith(500, "text/plain", "")},
			sentinel: engine.ErrUnavailable, status: 500,
		},
		{
			name:     "503 with a full queue",
			fake:     &fakeOllama{chat: answerWith(503, "application/json", `{"error":"server busy, please try again.  maximum pending requests exceeded"}`)},
			sentinel: engine.ErrUnavailable, status: 503, message: "server busy",
		},
		{
			name:     "502 from a proxy, in HTML",
			fake:     &fakeOllama{chat: answerWith(502, "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>")},
			sentinel: engine.ErrUnavailable, status: 502, message: "502 Bad Gateway</h1>",
		},
		{
			name:     "model not found on chat",
			fake:     &fakeOllama{chat: answerWith(404, "application/json", `{"error":"model \"m\" not found, try pulling it first"}`)},
			sentinel: engine.ErrUnknownModel, status: 404, message: "try pulling it first",
		},
		{
			name:     "model not found on show",
			fake:     &fakeOllama{show: answerWith(404, "application/json", `{"error":"model 'm' not found"}`)},
			sentinel: engine.ErrUnknownModel, status: 404, message: "model 'm' not found",
		},
		{
			name:     "400",
			fake:     &fakeOllama{chat: answerWith(400, "application/json", `{"error":"option \"num_ctx\" must be of type integer"}`)},
			sentinel: engine.ErrInvalidRequest, status: 400, message: "must be of type integer",
		},
		{
			name:     "garbage line",
			fake:     &fakeOllama{chat: answerWith(200, "application/x-ndjson", "{\"message\": Hello}\n")},
			sentinel: engine.ErrUnavailable, message: "unmarshal",
		},
		{
			name:     "garbage show",
			fake:     &fakeOllama{show: answerWith(200, "application/json", "<html>hello</html>")},
			sentinel: engine.ErrUnavailable, message: "not the JSON expected",
		},
		{
			name:     "empty stream",
			fake:     &fakeOllama{chat: answerWith(200, "application/x-ndjson", "")},
			sentinel: engine.ErrUnavailable, message: "without its final response",
		},
		{
			name:     "error as the first line",
			fake:     &fakeOllama{chat: answerWith(200, "application/x-ndjson", `{"error":"an error was encountered while running the model"}`+"\n")},
			sentinel: engine.ErrUnavailable, message: "while running the model",
		},
		{
			name: "error mid-stream",
			fake: &fakeOllama{chat: answerWith(200, "application/x-ndjson",
				chunk("message", "a")+"\n"+chunk("message", "b")+"\n"+`{"error":"model runner has unexpectedly stopped"}`+"\n")},
			events: 2, message: "unexpectedly stopped",
		},
		{
			name:    "stream cut short",
			fake:    &fakeOllama{chat: answerWith(200, "application/x-ndjson", chunk("message", "a")+"\n"+chunk("message", "b")+"\n")},
			events:  2,
			message: "cut short after 2 bytes of text: the stream ended without its final response",
		},
		{
			name: "server that hangs: the caller's deadline",
			fake: &fakeOllama{chat: hang},
			// The caller leaves at its deadline; the answer it left is
			// drained (drain.go) until the first-token timeout.
			cfg:      Config{FirstTokenTimeout: time.Second},
			timeout:  50 * time.Millisecond,
			sentinel: context.DeadlineExceeded,
		},
		{
			name:     "server that hangs: the first-token timeout",
			fake:     &fakeOllama{chat: hang},
			cfg:      Config{FirstTokenTimeout: 50 * time.Millisecond},
			sentinel: engine.ErrTimeout, message: "no first token within 50ms",
		},
		{
			name:    "server that stalls mid-stream",
			fake:    &fakeOllama{chat: stall(chunk("message", "a"))},
			cfg:     Config{IdleTimeout: 50 * time.Millisecond},
			events:  1,
			message: "sent nothing for 50ms mid-stream",
		},
		{
			name:     "show that hangs: the metadata timeout",
			fake:     &fakeOllama{show: hang},
			cfg:      Config{Timeout: 50 * time.Millisecond},
			sentinel: engine.ErrUnavailable, message: "no answer within 50ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, tt.fake)
			b := newBackend(t, f, tt.cfg)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			events := 0
			res, err := b.Generate(ctx, engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, MaxTokens: 8, Slot: -1},
				func(engine.Event) error { events++; return nil })
			checkFault(t, err, tt.sentinel, tt.status, tt.message)
			if events != tt.events {
				t.Errorf("%d events before the error, want %d", events, tt.events)
			}
			if res.Text != "" {
				t.Errorf("a failed generation returned text %q", res.Text)
			}
		})
	}
}

// checkFault fails unless err wraps sentinel (or, for nil, none of the
// engine's), is a *StatusError of status (if not 0) and says message.
func checkFault(t *testing.T, err error, sentinel error, status int, message string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %v", err, sentinel)
	}
	if sentinel == nil {
		for _, s := range []error{engine.ErrUnavailable, engine.ErrUnknownModel, engine.ErrInvalidRequest, engine.ErrQueueFull} {
			if errors.Is(err, s) {
				t.Errorf("error %q wraps %v; after the first event it must not", err, s)
			}
		}
	}
	var se *StatusError
	if got := errors.As(err, &se); got != (status != 0) || got && se.Status != status {
		t.Errorf("error %q: StatusError %v (%+v), want status %d", err, got, se, status)
	}
	if !strings.Contains(err.Error(), message) {
		t.Errorf("error %q does not say %q", err, message)
	}
}

// TestConnectionRefused: a server that is not there is unavailable.
func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	b, err := New(Config{BaseURL: "http://" + addr, Model: "m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, call := range []struct {
		name string
		run  func() error
	}{
		{"generate", func() error {
			_, err := b.Generate(context.Background(), engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}}, nil)
			return err
		}},
		{"show", func() error { _, err := b.LoadModelInfo(context.Background()); return err }},
	} {
		t.Run(call.name, func(t *testing.T) {
			checkFault(t, call.run(), engine.ErrUnavailable, 0, "connection refused")
		})
	}
}

// TestRefusedAfterShow: the server goes away between /api/show and the
// generation: the generation is unavailable, not a model error.
func TestRefusedAfterShow(t *testing.T) {
	f := startFake(t, &fakeOllama{})
	b := newBackend(t, f, Config{})
	if _, err := b.LoadModelInfo(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.srv.Close()
	_, err := b.Generate(context.Background(), engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}}, nil)
	checkFault(t, err, engine.ErrUnavailable, 0, "")
}
