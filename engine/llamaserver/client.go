package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"kvwin/engine"
	"kvwin/engine/remote"
)

// maxBodyBytes bounds a metadata answer read into memory: the tokens of a
// long prompt (some MB as JSON) fit many times over; a server streaming
// garbage does not exhaust the gateway.
const maxBodyBytes = 64 << 20

// call sends one metadata request (in as its JSON body, if not nil) and
// decodes a 200 answer into out. It blocks for at most Config.Timeout.
//
// Errors: the caller's context ending is returned as such (it is not the
// server's fault); anything else that keeps the server from answering (no
// connection, the timeout, an error status, a body that is not the JSON
// asked for) wraps engine.ErrUnavailable, except the statuses StatusError
// maps to other sentinels.
func (b *Backend) call(ctx context.Context, method, path string, in, out any) error {
	op := method + " " + b.base + path
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()

	var body io.Reader
	if in != nil {
		data, err := marshal(in)
		if err != nil {
			return fmt.Errorf("llamaserver: %s: encode request: %w", op, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, body)
	if err != nil {
		return fmt.Errorf("llamaserver: %s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	b.authorize(req)
	replayable(req)

	resp, err := b.client.Do(req)
	if err != nil {
		return transportError(parent, op, err, fmt.Sprintf("no answer within %v", b.cfg.Timeout))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	switch {
	case err != nil:
		return transportError(parent, op, err, fmt.Sprintf("answer not complete within %v", b.cfg.Timeout))
	case len(data) > maxBodyBytes:
		return unavailable(op, "the answer is larger than %d bytes", maxBodyBytes)
	case resp.StatusCode != http.StatusOK:
		return decodeError(op, resp.StatusCode, data, 0, 0)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return unavailable(op, "the answer is not the JSON expected (%v): %s", err, remote.Snippet(data))
	}
	return nil
}

// transportError explains a failed round trip. parent is the caller's
// context: if it ended, that is the error; if only the call's own deadline
// passed, the server was too slow (timeout says how); anything else is a
// connection failure. The last two make the server unavailable.
func transportError(parent context.Context, op string, err error, timeout string) error {
	switch {
	case parent.Err() != nil:
		return fmt.Errorf("llamaserver: %s: %w", op, parent.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return unavailable(op, "%s", timeout)
	default:
		return fmt.Errorf("llamaserver: %s: %w (%w)", op, engine.ErrUnavailable, err)
	}
}

// unavailable returns an error wrapping engine.ErrUnavailable.
func unavailable(op, format string, args ...any) error {
	return fmt.Errorf("llamaserver: %s: %w: %s", op, engine.ErrUnavailable, fmt.Sprintf(format, args...))
}

// marshal encodes v without HTML escaping: the server is not a browser,
// and "<|im_start|>" reads better in a captured request than
// "\u003c|im_start|\u003e".
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// replayable lets net/http resend req on a new connection when a pooled
// one turns out to be closed before any answer. llama-server (cpp-httplib)
// closes idle keep-alive connections after a few seconds, so the first turn
// after a pause would otherwise fail, and a router fail over, for nothing.
// Every call kvwin makes is safe to repeat: /tokenize and the like are
// pure, and a /completion costs compute but changes nothing. A nil value
// marks the request idempotent without sending the header.
func replayable(req *http.Request) {
	req.Header["X-Idempotency-Key"] = nil
}
