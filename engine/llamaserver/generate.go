package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"kvwin/engine"
	"kvwin/engine/idle"
	"kvwin/engine/remote"
)

// complete sends body to POST /completion and turns the streamed answer
// into events and a result. limit is the slot's context (for errors). It
// blocks until the final chunk, an error, the end of ctx,
// Config.FirstTokenTimeout without a first chunk, or Config.IdleTimeout of
// silence after it. top is the request's TopLogprobs, when body asks for
// probabilities.
//
// What it relays is bounded whatever the server sends: at most
// maxTokens generated tokens, counted here (a server that ignores
// n_predict is cut off there, the answer finishing with "length"), at most
// Config.MaxAnswerBytes of text, and no chunk over Config.MaxChunkBytes
// read into memory.
func (b *Backend) complete(ctx context.Context, body completionRequest, who owner, limit, maxTokens, top int, stream engine.StreamFunc) (engine.Result, error) {
	g := &generation{
		ctx: ctx, op: http.MethodPost + " " + b.base + "/completion", idle: b.cfg.IdleTimeout, firstWait: b.cfg.FirstTokenTimeout,
		prompt: len(body.Prompt), limit: limit, stream: stream, slot: -1, top: top, probs: body.NProbs > 0,
		maxTokens: max(maxTokens, 1), maxChunk: b.cfg.MaxChunkBytes, maxText: b.cfg.MaxAnswerBytes, log: b.log,
	}
	data, err := marshal(body)
	if err != nil {
		return engine.Result{}, fmt.Errorf("llamaserver: %s: encode request: %w", g.op, err)
	}
	// The request's own context ends it on a stall (the watchdog) or when
	// Generate returns early (a StreamFunc error): either way the
	// connection closes and the server stops generating.
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	g.dog = idle.New(b.cfg.FirstTokenTimeout, b.cfg.IdleTimeout, cancel)
	defer g.dog.Stop()

	req, err := http.NewRequestWithContext(run, http.MethodPost, b.base+"/completion", bytes.NewReader(data))
	if err != nil {
		return engine.Result{}, fmt.Errorf("llamaserver: %s: %w", g.op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	b.authorize(req)
	who.set(req.Header)
	replayable(req)
	g.sent = time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		return engine.Result{}, g.broken(err)
	}
	defer resp.Body.Close()
	r := idle.Reader{R: resp.Body, W: g.dog}

	if resp.StatusCode != http.StatusOK {
		data, err := io.ReadAll(io.LimitReader(r, maxBodyBytes))
		if err != nil {
			return engine.Result{}, g.broken(err)
		}
		return engine.Result{}, decodeError(g.op, resp.StatusCode, data, g.prompt, limit)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "application/json" {
		return g.whole(r) // a server that does not stream
	}
	// The server started its stream: it took the request (a kvwin node
	// answers its status only once its engine has queued it).
	engine.Accepted(ctx)
	return g.sse(r)
}

// generation is the state of one /completion answer being read. It lives
// on the calling goroutine.
type generation struct {
	ctx       context.Context // the caller's
	op        string
	idle      time.Duration // Config.IdleTimeout
	firstWait time.Duration // Config.FirstTokenTimeout
	prompt    int           // tokens sent
	limit     int
	stream    engine.StreamFunc
	dog       *idle.Watchdog
	sent      time.Time
	firstAt   time.Time // when the first event was made

	// The bounds of what is relayed (see complete) and the count of
	// tokens against them: the ids of partials, one per partial that
	// has text and no ids, or the server's own tokens_predicted if more.
	maxTokens, maxChunk, maxText int
	generated                    int
	empty                        int // partials with neither text nor ids
	log                          *slog.Logger

	started  bool           // the first event was produced: something was generated
	first    engine.Timings // the first event's timings
	slot     int
	text     strings.Builder
	tokens   []int
	probs    bool                  // probabilities were asked for
	top      int                   // top alternatives kept per token
	logprobs []engine.TokenLogprob // of the tokens so far, when asked for
}

// sse reads a streamed answer.
func (g *generation) sse(r io.Reader) (engine.Result, error) {
	lines := newLineReader(r, g.maxChunk)
	for {
		line, err := lines.next()
		switch {
		case errors.Is(err, io.EOF):
			return engine.Result{}, g.cut("the stream ended without its final chunk")
		case errors.Is(err, errLineCut), errors.Is(err, errLineLong):
			return engine.Result{}, g.cut(err.Error())
		case err != nil:
			return engine.Result{}, g.broken(err)
		}
		name, value := field(line)
		if name != "data" && name != "error" {
			continue // blank line, keep-alive comment, event:, id:, retry:
		}
		if string(value) == "[DONE]" {
			return engine.Result{}, g.cut("the stream ended without its final chunk")
		}
		var c chunk
		if err := json.Unmarshal(value, &c); err != nil {
			return engine.Result{}, g.garbage(err, value)
		}
		if name == "error" && c.Error == nil {
			// An older server's `error: {…}` line holds the object itself.
			c.Error = new(errorObject)
			_ = json.Unmarshal(value, c.Error)
		}
		if res, done, err := g.add(&c); err != nil || done {
			return res, err
		}
	}
}

// whole reads an answer that is one JSON object, the final one.
func (g *generation) whole(r io.Reader) (engine.Result, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(g.maxChunk)+1))
	switch {
	case err != nil:
		return engine.Result{}, g.broken(err)
	case len(data) > g.maxChunk:
		return engine.Result{}, g.cut(fmt.Sprintf("%v of %d bytes", errLineLong, g.maxChunk))
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return engine.Result{}, g.garbage(err, data)
	}
	if !c.Stop && c.Error == nil {
		return engine.Result{}, g.garbage(errors.New(`no "stop": true`), data)
	}
	res, _, err := g.add(&c)
	return res, err
}

// add takes one chunk: it streams its text (the first chunk as the First
// event, with the prompt-side timings) and, for the final chunk, returns the
// result with done set.
func (g *generation) add(c *chunk) (res engine.Result, done bool, err error) {
	if c.Error != nil {
		return engine.Result{}, true, g.failed(c.Error)
	}
	if c.IDSlot != nil {
		g.slot = *c.IDSlot
	}
	cut := g.over(c)
	if cut {
		// Not relayed; the first event still opens the answer.
		c.Content, c.Tokens, c.Probs = "", nil, nil
	}
	// Partials carry their token; a final object carries all of them only
	// when nothing was streamed (llama-server, non-streamed), or when the
	// partials did not (a kvwin node).
	if !c.Stop || len(g.tokens) == 0 {
		g.tokens = append(g.tokens, c.Tokens...)
	}
	// The same for probabilities: a final object repeats them only
	// when the partials had none (an older server, or not streamed).
	var lps []engine.TokenLogprob
	if g.probs && (!c.Stop || len(g.logprobs) == 0) {
		lps = logprobsOf(c.Probs, g.top)
		g.logprobs = append(g.logprobs, lps...)
	}
	ev := engine.Event{Text: c.Content, Slot: g.slot, Logprobs: lps}
	if !g.started {
		ev.First = true
		var ok bool
		if ev.Timings, ok = c.promptSide(); !ok || ev.Timings.PromptTokens == 0 {
			ev.Timings.PromptTokens = g.prompt // a server that says nothing of it
		}
		// Measured here: the server's own clock does not include the
		// network and its queue, which the client waits for too.
		ev.Timings.FirstToken = time.Since(g.sent)
		g.first, g.firstAt = ev.Timings, time.Now()
	}
	if ev.First || ev.Text != "" || len(ev.Logprobs) > 0 {
		g.started = true
		g.dog.Started()
		g.text.WriteString(ev.Text)
		if g.stream != nil {
			g.dog.Pause()
			err := g.stream(ev)
			g.dog.Kick()
			if err != nil {
				return engine.Result{}, true, err
			}
		}
	}
	if cut {
		return g.cutShort(), true, nil
	}
	if !c.Stop {
		return engine.Result{}, false, nil
	}

	t := g.first
	if p, ok := c.promptSide(); ok && c.Timings != nil {
		t.PromptTokens, t.CachedTokens, t.PromptEval = p.PromptTokens, p.CachedTokens, p.PromptEval
		t.GeneratedTokens, t.Decode = c.Timings.PredictedN, ms(c.Timings.PredictedMS)
	} else {
		t.GeneratedTokens = c.TokensPredicted
		if ok {
			t.PromptTokens, t.CachedTokens = p.PromptTokens, p.CachedTokens
		}
	}
	return engine.Result{
		Text: g.text.String(), Tokens: g.tokens, Logprobs: g.logprobs, FinishReason: finishReason(c), Slot: g.slot, Timings: t,
		StopSequence: stoppingWord(c), Journal: c.journal(),
	}, true, nil
}

// seeLog ends what a client is told of a backend's failure mid-stream
// (engine.Public): the call's URL and the server's words are the log's.
const seeLog = " (the gateway's log has the details under this request's X-Request-Id)"

// failed is the error of an error object in the answer. Before anything
// was generated it means what the same error as a status would; after, it
// can only end the stream.
func (g *generation) failed(obj *errorObject) error {
	if !g.started {
		return errorFromObject(g.op, obj.status(), obj, g.prompt, g.limit)
	}
	return engine.Public(fmt.Errorf("llamaserver: %s: the server failed mid-stream (%s): %s", g.op, obj.Type, obj.Message),
		"the backend failed mid-stream: the answer is cut short"+seeLog)
}

// garbage is the error of a chunk that is not the JSON expected.
func (g *generation) garbage(err error, data []byte) error {
	if !g.started {
		return unavailable(g.op, "the answer is not the JSON expected (%v): %s", err, remote.Snippet(data))
	}
	return engine.Public(fmt.Errorf("llamaserver: %s: a streamed chunk is not the JSON expected (%v): %s", g.op, err, remote.Snippet(data)),
		"the backend sent a chunk that is not the JSON expected: the answer is cut short"+seeLog)
}

// cut is the error of an answer that ended early (why says how).
func (g *generation) cut(why string) error {
	if !g.started {
		return unavailable(g.op, "%s, before any chunk", why)
	}
	return engine.Public(fmt.Errorf("llamaserver: %s: %s (after %d bytes of text): the answer is cut short", g.op, why, g.text.Len()),
		fmt.Sprintf("the backend's answer broke off after %d bytes of text (%s): the answer is cut short", g.text.Len(), why)+seeLog)
}

// broken is the error of a failed connection or read: the caller's context
// ending, the watchdog's (the server was silent), or the network's.
func (g *generation) broken(err error) error {
	switch {
	case g.ctx.Err() != nil:
		return fmt.Errorf("llamaserver: %s: %w", g.op, g.ctx.Err())
	case g.dog.Fired() && !g.started:
		return fmt.Errorf("llamaserver: %s: %w: no first token within %v", g.op, engine.ErrTimeout, g.firstWait)
	case !g.started && isTimeout(err):
		return fmt.Errorf("llamaserver: %s: %w: %w", g.op, engine.ErrTimeout, err)
	case g.dog.Fired():
		return engine.Public(fmt.Errorf("llamaserver: %s: the server sent nothing for %v mid-stream: the answer is cut short", g.op, g.idle),
			fmt.Sprintf("the backend sent nothing for %v mid-stream: the answer is cut short", g.idle))
	case !g.started:
		return fmt.Errorf("llamaserver: %s: %w (%w)", g.op, engine.ErrUnavailable, err)
	default:
		return engine.Public(fmt.Errorf("llamaserver: %s: the connection broke mid-stream: %w", g.op, err),
			"the connection to the backend broke mid-stream: the answer is cut short"+seeLog)
	}
}

// isTimeout reports whether a transport error is a timeout of its own (a
// connect that did not complete in Config.ConnectTimeout), not a refusal.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// over counts a partial's tokens and text against the bounds of the
// answer (see complete) and reports whether it would pass one: then it is
// not relayed, and the answer ends before it (cutShort). A final
// object's ids are cut to the bound instead.
func (g *generation) over(c *chunk) bool {
	if c.Stop {
		if len(c.Tokens) > g.maxTokens {
			c.Tokens = c.Tokens[:g.maxTokens]
		}
		return false
	}
	n := len(c.Tokens)
	if n == 0 && c.Content != "" {
		n = 1
	}
	if n == 0 && len(c.Probs) == 0 {
		// A partial with nothing in it (a kvwin node's first): free,
		// but not without end.
		g.empty++
	}
	count := max(g.generated+n, c.TokensPredicted)
	text := g.text.Len() + len(c.Content)
	if count <= g.maxTokens && text <= g.maxText && g.empty <= g.maxTokens+16 {
		g.generated = count
		return false
	}
	g.log.WarnContext(g.ctx, "the server sent more than was asked for; the answer is cut there",
		"max_tokens", g.maxTokens, "tokens_sent", count, "max_answer_bytes", g.maxText, "bytes_sent", text)
	return true
}

// cutShort is the result of an answer cut at its bounds (see over): what
// was relayed, finishing with "length".
func (g *generation) cutShort() engine.Result {
	t := g.first
	t.GeneratedTokens = min(g.generated, g.maxTokens)
	t.Decode = time.Since(g.firstAt)
	tokens := g.tokens
	if len(tokens) > g.maxTokens {
		tokens = tokens[:g.maxTokens]
	}
	return engine.Result{
		Text: g.text.String(), Tokens: tokens, Logprobs: g.logprobs, FinishReason: engine.FinishLength, Slot: g.slot, Timings: t,
	}
}
