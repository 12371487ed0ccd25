package llamaserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"kvwin/engine"
	"kvwin/engine/remote"
	"kvwin/kvcache"
)

var _ engine.ResidencyFollower = (*Backend)(nil)

// followIdle is how long a journal stream may stay silent (no event, no
// heartbeat) before the connection is taken for dead: three of the node's
// heartbeats (web's 10s).
const followIdle = 30 * time.Second

// FollowResidency follows a kvwin node's journal of what its slots hold
// (GET /kvwin/v1/events, with the backend's key: the node's admin key),
// calling fn with each event from c on; heartbeats are not passed on. It
// blocks until ctx ends, the stream breaks or goes silent for followIdle,
// or fn returns an error, and returns why. A server that publishes no
// journal (llama-server, an older node: 404 or 501; a key that is not the
// node's admin key: 401 or 403) gives an error wrapping
// engine.ErrNotSupported.
func (b *Backend) FollowResidency(ctx context.Context, c kvcache.Cursor, fn func(kvcache.JournalEvent) error) error {
	q := url.Values{}
	if m := b.Info().Model; m != "" {
		q.Set("model", m)
	}
	if c.Epoch != "" {
		q.Set("epoch", c.Epoch)
		q.Set("after", strconv.FormatUint(c.After, 10))
	}
	op := "GET " + b.base + "/kvwin/v1/events"
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(followIdle, cancel)
	defer idle.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/kvwin/v1/events?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("llamaserver: %s: %w", op, err)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	b.authorize(req)
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("llamaserver: %s: %w", op, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusNotImplemented, http.StatusUnauthorized, http.StatusForbidden:
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("llamaserver: %s: %w: status %d: %s", op, engine.ErrNotSupported, resp.StatusCode, remote.Snippet(data))
	default:
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("llamaserver: %s: status %d: %s", op, resp.StatusCode, remote.Snippet(data))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxBodyBytes) // a snapshot holds every slot's tokens
	for sc.Scan() {
		idle.Reset(followIdle)
		var ev kvcache.JournalEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("llamaserver: %s: a line that is not an event (%v): %s", op, err, remote.Snippet(sc.Bytes()))
		}
		if ev.Type == "heartbeat" {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("llamaserver: %s: %w", op, err)
	}
	if ctx.Err() != nil && context.Cause(ctx) != nil {
		return fmt.Errorf("llamaserver: %s: stream ended: %w", op, ctx.Err())
	}
	return fmt.Errorf("llamaserver: %s: the node ended the stream", op)
}
