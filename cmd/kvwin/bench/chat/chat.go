// Package chat holds the OpenAI chat pieces the benches share:
// deterministic filler text, the reading of a stream chunk, and a POST that
// survives a server closing its kept-alive connection.
package chat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// Words is n bytes of words drawn from a small vocabulary by seed: the
// same seed, the same text.
func Words(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	words := []string{"kv", "cache", "prefix", "slot", "turn", "window", "route", "node", "token", "block", "memory", "sink"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// Delta is the text of one OpenAI chat stream chunk (the data of one
// SSE event); ok is false for an error event or a chunk that is not JSON.
func Delta(data string) (text string, ok bool) {
	var chunk struct {
		Choices []struct {
			Delta struct{ Content string } `json:"delta"`
		} `json:"choices"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Error != nil {
		return "", false
	}
	for _, ch := range chunk.Choices {
		text += ch.Delta.Content
	}
	return text, true
}

// Stream is what ReadStream read of an OpenAI chat stream.
type Stream struct {
	TTFT time.Duration // from sent to the first data event (comments, keep-alives, do not count)
	Text string        // the deltas, joined
	Done bool          // the stream ended with [DONE]
	// CompletionTokens is the usage chunk's completion_tokens (sent when
	// the request asked for stream_options.include_usage; 0 without).
	CompletionTokens int
}

// usageTokens is the completion_tokens of a chunk's usage, 0 without.
func usageTokens(data string) int {
	var chunk struct {
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal([]byte(data), &chunk) != nil || chunk.Usage == nil {
		return 0
	}
	return chunk.Usage.CompletionTokens
}

// StreamError is an in-stream error event, or a data event that is not a
// chunk: Data is what it said.
type StreamError struct{ Data string }

func (e *StreamError) Error() string {
	var ev struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(e.Data), &ev) == nil && ev.Error != nil {
		return "in-stream error: " + ev.Error.Message
	}
	return "in-stream error: " + e.Data
}

// ReadStream reads an OpenAI chat SSE stream from r to its end (past
// [DONE], so that an HTTP response's trailers are then read): comment lines (keep-alives) are skipped, the first data event's
// time from sent is TTFT, the deltas are joined. An error event ends it
// with a *StreamError; so does a read failure, with its error.
func ReadStream(r io.Reader, sent time.Time) (Stream, error) {
	var st Stream
	var text strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if st.TTFT == 0 {
			st.TTFT = time.Since(sent)
		}
		if data == "[DONE]" {
			st.Done = true
			continue // read to the end: the stream's trailers follow its body
		}
		delta, ok := Delta(data)
		if !ok {
			st.Text = text.String()
			return st, &StreamError{Data: data}
		}
		text.WriteString(delta)
		if delta == "" && strings.Contains(data, `"usage"`) {
			st.CompletionTokens = max(st.CompletionTokens, usageTokens(data))
		}
	}
	st.Text = text.String()
	return st, sc.Err()
}

// Post sends body to url with header, and sends it once more on a fresh
// connection when the server had closed the kept-alive one as it was
// written: llama-server closed its kept-alive connection after about 100
// requests in the benches' runs, and Go's client resends only requests it
// knows to be idempotent. start is when the request that was answered was sent, so a
// turn's time never holds the failed write.
func Post(ctx context.Context, hc *http.Client, url string, header http.Header, body []byte) (resp *http.Response, start time.Time, err error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, time.Time{}, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		start = time.Now()
		resp, err = hc.Do(req)
		if err == nil || attempt > 0 || ctx.Err() != nil || !closedUnder(err) {
			return resp, start, err
		}
	}
}

// closedUnder reports whether err is the peer closing the connection as a
// request was written to it.
func closedUnder(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) // the client's reader saw the reset first and closed it under the writer
}
