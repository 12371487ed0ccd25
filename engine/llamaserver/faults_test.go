package llamaserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// TestGenerateFaults: every way a server can fail ends Generate with a
// clear error, never a panic or a hang. Failures before the first event
// wrap engine.ErrUnavailable (a router may fail over); after it, they are
// plain errors and the events already sent stand.
func TestGenerateFaults(t *testing.T) {
	tests := []struct {
		name     string
		answer   http.HandlerFunc
		cfg      Config
		timeout  time.Duration // the caller's deadline; 0 for none
		events   int           // events streamed before the error
		sentinel error         // the error wraps it; nil: it wraps none of the engine's
		ctxLen   *engine.ContextLengthError
		status   int    // a *StatusError with this status
		message  string // in the error's text
	}{
		{
			name:     "500 before the first byte",
			answer:   jsonAnswer(http.StatusInternalServerError, `{"error":{"code":500,"message":"llama_decode failed","type":"server_error"}}`),
			sentinel: engine.ErrUnavailable, status: 500, message: "llama_decode failed",
		},
		{
			name:     "503 while the model loads",
			answer:   fileAnswer(http.StatusServiceUnavailable, "error_loading.json"),
			sentinel: engine.ErrUnavailable, status: 503, message: "Loading model",
		},
		{
			name:     "502 from a proxy, in HTML",
			answer:   textAnswer(http.StatusBadGateway, "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>"),
			sentinel: engine.ErrUnavailable, status: 502, message: "502 Bad Gateway</h1>",
		},
		{
			name:     "400",
			answer:   fileAnswer(http.StatusBadRequest, "error_invalid.json"),
			sentinel: engine.ErrInvalidRequest, status: 400, message: `"prompt" must be a string`,
		},
		{
			name:   "context size exceeded",
			answer: fileAnswer(http.StatusBadRequest, "error_context_size.json"),
			ctxLen: &engine.ContextLengthError{PromptTokens: 9412, Limit: 8192},
		},
		{
			name:     "429 from a kvwin node with a full queue",
			answer:   jsonAnswer(http.StatusTooManyRequests, `{"error":{"code":429,"message":"all slots are busy and the queue is full","type":"unavailable_error"}}`),
			sentinel: engine.ErrQueueFull, status: 429,
		},
		{
			name:     "garbage chunk",
			answer:   textAnswer(http.StatusOK, "text/event-stream", "data: {\"content\": Hello}\n\n"),
			sentinel: engine.ErrUnavailable, message: "not the JSON expected",
		},
		{
			name:     "garbage JSON answer",
			answer:   textAnswer(http.StatusOK, "application/json", `[1,2,3]`),
			sentinel: engine.ErrUnavailable, message: "not the JSON expected",
		},
		{
			name:     "empty stream",
			answer:   textAnswer(http.StatusOK, "text/event-stream", ""),
			sentinel: engine.ErrUnavailable, message: "without its final chunk, before any chunk",
		},
		{
			name:     "cut inside the first line",
			answer:   textAnswer(http.StatusOK, "text/event-stream", `data: {"content":"Hel`),
			sentinel: engine.ErrUnavailable, message: "middle of a line",
		},
		{
			name:    "truncated stream",
			answer:  textAnswer(http.StatusOK, "text/event-stream", firstChunks(2)),
			events:  2,
			message: "cut short",
		},
		{
			name:    "error mid-stream",
			answer:  fileAnswer(http.StatusOK, "completion_stream_error.sse"),
			events:  2,
			message: "Failed to decode the batch",
		},
		{
			name:     "error as the first chunk",
			answer:   textAnswer(http.StatusOK, "text/event-stream", `error: {"code":503,"message":"no slot","type":"unavailable_error"}`+"\n\n"),
			sentinel: engine.ErrUnavailable, status: 503, message: "no slot",
		},
		{
			name:     "server that hangs: the caller's deadline",
			answer:   hang,
			timeout:  50 * time.Millisecond,
			sentinel: context.DeadlineExceeded,
		},
		{
			name:     "server that hangs: the first-token timeout",
			answer:   hang,
			cfg:      Config{FirstTokenTimeout: 50 * time.Millisecond},
			sentinel: engine.ErrTimeout, message: "no first token within 50ms",
		},
		{
			name:     "server that sends only keep-alives: the first-token timeout",
			answer:   keepAlives,
			cfg:      Config{FirstTokenTimeout: 50 * time.Millisecond, IdleTimeout: time.Hour},
			sentinel: engine.ErrTimeout, message: "no first token within 50ms",
		},
		{
			name:    "server that stalls mid-stream",
			answer:  stall(firstChunks(1)),
			cfg:     Config{IdleTimeout: 50 * time.Millisecond},
			events:  1,
			message: "sent nothing for 50ms mid-stream",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeServer{completion: tt.answer})
			b := f.backend(t, tt.cfg)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			events := 0
			_, err := b.Generate(ctx, engine.Request{Messages: chatMsgs}, func(engine.Event) error {
				events++
				return nil
			})
			if err == nil {
				t.Fatal("Generate succeeded")
			}
			if events != tt.events {
				t.Errorf("%d events before the error, want %d", events, tt.events)
			}
			checkFault(t, err, tt.sentinel, tt.ctxLen, tt.status, tt.message)
		})
	}
}

// checkFault checks an error against a TestGenerateFaults case.
func checkFault(t *testing.T, err, sentinel error, ctxLen *engine.ContextLengthError, status int, message string) {
	t.Helper()
	sentinels := []error{engine.ErrUnavailable, engine.ErrTimeout, engine.ErrInvalidRequest, engine.ErrQueueFull, context.DeadlineExceeded}
	for _, s := range sentinels {
		if got, want := errors.Is(err, s), s == sentinel; got != want {
			t.Errorf("errors.Is(err, %v) = %v, want %v; err: %v", s, got, want, err)
		}
	}
	if ctxLen != nil {
		var got *engine.ContextLengthError
		if !errors.As(err, &got) || *got != *ctxLen {
			t.Errorf("err = %v, want %v", err, ctxLen)
		}
	}
	var se *StatusError
	if got := errors.As(err, &se); got != (status != 0) || got && se.Status != status {
		t.Errorf("err = %#v, want a StatusError with status %d", err, status)
	}
	if !strings.Contains(err.Error(), message) {
		t.Errorf("err = %q, want it to say %q", err, message)
	}
}

// TestConnectionRefused: a server that is gone, before and after its props
// were read, is unavailable.
func TestConnectionRefused(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	if _, err := b.LoadProps(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.srv.Close()
	dead, err := New(Config{BaseURL: f.srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	// With props known, the kept-alive connection breaks first; the request
	// is replayed on a new one (see replayable), which is refused.
	tests := []struct {
		name    string
		b       *Backend
		message string
	}{{"props known", b, "refused"}, {"never reached", dead, "refused"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.b.Generate(context.Background(), engine.Request{Tokens: []int{1, 2}}, nil)
			if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("err = %v, want ErrUnavailable saying %q", err, tt.message)
			}
		})
	}
}

// TestStreamFuncErrorEndsGeneration: a StreamFunc error ends Generate with
// it, and the server sees its client leave (llama-server then stops).
func TestStreamFuncErrorEndsGeneration(t *testing.T) {
	left := make(chan struct{})
	f := startFake(t, &fakeServer{completion: func(w http.ResponseWriter, r *http.Request) {
		stall(firstChunks(1))(w, r)
		close(left)
	}})
	b := f.backend(t, Config{})
	stop := errors.New("client went away")
	_, err := b.Generate(context.Background(), engine.Request{Tokens: []int{1}}, func(engine.Event) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the StreamFunc's", err)
	}
	select {
	case <-left:
	case <-time.After(3 * time.Minute):
		t.Fatal("the server never saw its client leave")
	}
}

// TestBadProps: a server whose /props cannot be planned for is unavailable.
func TestBadProps(t *testing.T) {
	tests := []struct{ name, body, message string }{
		{"garbage", `<html>`, "not the JSON expected"},
		{"no slots", `{"total_slots":0,"default_generation_settings":{"n_ctx":4096}}`, "total_slots is 0"},
		{"no context", `{"total_slots":2,"default_generation_settings":{}}`, "n_ctx is 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := answering(t, jsonAnswer(http.StatusOK, tt.body), Config{})
			_, err := b.Generate(context.Background(), engine.Request{Tokens: []int{1}}, nil)
			if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), tt.message) {
				t.Errorf("err = %v, want ErrUnavailable saying %q", err, tt.message)
			}
			if info := b.Info(); info.Slots != 0 {
				t.Errorf("Info = %+v after bad props", info)
			}
		})
	}
}

// answering returns a Backend for a server that answers everything with h.
func answering(t *testing.T, h http.Handler, cfg Config) *Backend {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return (&fakeServer{srv: srv}).backend(t, cfg)
}

// firstChunks is the first n chunks of the recorded stream.
func firstChunks(n int) string {
	chunks := strings.SplitAfter(string(fixture("completion_stream.sse")), "\n\n")
	return strings.Join(chunks[:n], "")
}

func jsonAnswer(status int, body string) http.HandlerFunc {
	return textAnswer(status, "application/json", body)
}

func textAnswer(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func fileAnswer(status int, name string) http.HandlerFunc {
	return textAnswer(status, contentTypeOf(name), string(fixture(name)))
}

func contentTypeOf(name string) string {
	if strings.HasSuffix(name, ".sse") {
		return "text/event-stream"
	}
	return "application/json"
}

// hang answers nothing until the client leaves.
func hang(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// keepAlives answers 200 and sends SSE comments, never a chunk, until the
// client leaves: bytes that are no token.
func keepAlives(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := w.Write([]byte(": ping\n\n")); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// stall sends body, flushed, then nothing until the client leaves.
func stall(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(body))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}
