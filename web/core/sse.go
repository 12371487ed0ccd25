package core

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// The SSE stream of a generation, as OpenAI clients read it:
//
//	data: {chunk}\n\n   one line per event, flushed at once
//	...
//	data: [DONE]\n\n    only after a generation that finished
//
// An error after the first byte cannot change the status any more, so it is
// sent in-stream as `data: {"error":{...}}` and the stream ends there,
// WITHOUT [DONE]: [DONE] means "this answer is complete", and clients that
// only look for it (rather than for an error object) must not take a cut
// answer for a whole one. The OpenAI SDKs raise on the error object.

//
// Ollama's NDJSON stream is the same machinery with another framing: one
// JSON object a line, no prefix, no sentinel; an error is a line
// {"error": "…"} that ends the stream.

// Framing is how a streamed wire format frames its events.
type Framing struct {
	contentType string
	prefix      string // before each event's JSON
	suffix      string // after each event's JSON (which ends with '\n')
	done        string // written after a finished stream's last event; "" for none
	keepAlive   string // a keep-alive that is no event; "" for none (the encoder's KeepAliver)
}

// sseKeepAlive is an SSE comment: every SSE reader skips it, so it carries
// bytes through proxies and client watchdogs and means nothing. It is one
// line, with no blank line after it: a blank line ends an event, and some
// readers (openai-go before v2) dispatch an event with no data there and
// fail to decode it; a lone comment line changes no event.
const sseKeepAlive = ": keep-alive\n"

// Framings of the streamed wire formats.
var (
	// frameOpenAI is OpenAI's SSE, ended by [DONE].
	FrameOpenAI = Framing{contentType: "text/event-stream", prefix: "data: ", suffix: "\n", done: "data: [DONE]\n\n", keepAlive: sseKeepAlive}
	// frameNode is llama-server's SSE: no [DONE].
	FrameNode = Framing{contentType: "text/event-stream", prefix: "data: ", suffix: "\n", keepAlive: sseKeepAlive}
	// frameNDJSON is Ollama's stream: one object a line. It has no
	// comment: every line must be an object of the stream (Ollama's client
	// fails on any other), so its encoder says what keeps it alive.
	FrameNDJSON = Framing{contentType: "application/x-ndjson"}
	// FrameEvents is SSE whose events are named (Anthropic's Messages
	// stream): an object that is an EventNamer gets an "event:" line
	// before its data; no [DONE], the last event says the stream is whole.
	FrameEvents = Framing{contentType: "text/event-stream", prefix: "data: ", suffix: "\n", keepAlive: sseKeepAlive}
)

// EventNamer is a streamed object that names its SSE event: the writer
// sends "event: NAME" before its data line. Clients that dispatch on the
// event name (Anthropic's SDKs skip unnamed events) need it.
type EventNamer interface {
	EventName() string
}

// EventWriter frames and flushes the events of a stream (SSE or NDJSON, by
// its framing). The first write or flush error sticks: every later call
// returns it and writes nothing, so a generation whose client left fails
// fast at its next event.
//
// It is used by one request goroutine and is not safe for concurrent use.
type EventWriter struct {
	w     gin.ResponseWriter
	rc    *http.ResponseController
	frame Framing
	stall time.Duration // a write that makes no progress for this long fails; 0: never
	buf   bytes.Buffer
	err   error
}

// newSSEWriter returns a writer on w. With stall > 0, each event must reach
// the client's socket within stall: a client that stops reading is taken
// for gone (its slot is freed), while a stream read at any pace, however
// long, is never cut. net/http lifts the deadline when the handler returns,
// so it does not outlive the stream on a kept-alive connection.
func newSSEWriter(w gin.ResponseWriter, stall time.Duration) *EventWriter {
	return NewEventWriter(w, stall, FrameOpenAI)
}

// NewEventWriter is newSSEWriter with the given framing.
func NewEventWriter(w gin.ResponseWriter, stall time.Duration, frame Framing) *EventWriter {
	// Flush through the net/http writer under gin's: gin's Flush drops the
	// error, and a failed flush is how a vanished client shows up.
	var under http.ResponseWriter = w
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
		under = u.Unwrap()
	}
	return &EventWriter{w: w, rc: http.NewResponseController(under), frame: frame, stall: stall}
}

// Start writes the status line and headers (those already set plus the
// stream's), declaring trailers as HTTP trailers: values set under those
// names after Start are sent after the last event. It does not flush: the
// first event does.
func (s *EventWriter) Start(trailers ...string) {
	h := s.w.Header()
	h.Set("Content-Type", s.frame.contentType)
	h.Set("Cache-Control", "no-cache")
	// Tell nginx-style proxies not to buffer: a buffered stream has the
	// latency of a non-streamed one.
	h.Set("X-Accel-Buffering", "no")
	if len(trailers) > 0 {
		h.Set("Trailer", strings.Join(trailers, ", "))
	}
	s.w.WriteHeader(http.StatusOK)
	// Through gin, so gin knows the header is out and does not write it again.
	s.w.WriteHeaderNow()
}

// Send writes v as one event and flushes it.
func (s *EventWriter) Send(v any) error {
	if s.err != nil {
		return s.err
	}
	body, err := EncodeJSON(v) // ends with '\n'
	if err != nil {
		s.err = err
		return err
	}
	s.buf.Reset()
	if n, ok := v.(EventNamer); ok && s.frame.prefix != "" {
		s.buf.WriteString("event: " + n.EventName() + "\n")
	}
	s.buf.WriteString(s.frame.prefix)
	s.buf.Write(body)
	s.buf.WriteString(s.frame.suffix)
	return s.write(s.buf.Bytes())
}

// KeepAlive writes the framing's keep-alive (an SSE comment) and flushes
// it; a framing without one writes nothing.
func (s *EventWriter) KeepAlive() error {
	if s.frame.keepAlive == "" {
		return s.err
	}
	return s.write([]byte(s.frame.keepAlive))
}

// Done writes the sentinel that ends a finished stream, if the framing
// has one ([DONE]); otherwise it only reports the sticky error.
func (s *EventWriter) Done() error {
	if s.frame.done == "" {
		return s.err
	}
	return s.write([]byte(s.frame.done))
}

func (s *EventWriter) write(b []byte) error {
	if s.err != nil {
		return s.err
	}
	if s.stall > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall)) // not supported only by test recorders
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = err
		return err
	}
	return s.Flush()
}

// Flush pushes what was written to the client. A writer that cannot flush
// (only in tests with unusual recorders) is not an error.
func (s *EventWriter) Flush() error {
	if s.err != nil {
		return s.err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s.err
}

// Err is the first write or flush error, which sticks; nil while the
// client reads.
func (s *EventWriter) Err() error { return s.err }
