package ollama

import (
	"context"
	"net/http"

	"github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/engine/idle"
)

// Draining. An answer whose caller leaves (its context ends, or its
// StreamFunc fails) is read to its end in the background, relayed to
// nobody, instead of closing the connection. Ollama v0.9.6's chat and
// generate handlers hand each line of the runner's answer to the HTTP
// writer over an unbuffered channel; once a client's connection closes,
// the writer stops reading it, and a line already on its way blocks its
// sender forever, holding one of the model's parallel request slots
// (OLLAMA_NUM_PARALLEL, one on most CPU hosts). Every later request to the
// model then waits with no end: the conformance suite saw it once in nine
// runs after a StreamFunc error. Read to the end, the handler ends and the
// slot returns. A drain is bounded as any answer is: by num_predict
// (Config's limits; more lines than that cut it) and the watchdog (a
// silent server is cut); Close leaves drains to end so, since cutting one
// is what leaks (a gateway's reload closes its backends). What it costs: Ollama
// generates the rest of an abandoned answer, which it largely does anyway
// (it finds a closed connection only when it next writes).

// run sends g's request and returns when the answer ended, or earlier
// when the caller left (g.left() then reports true and the answer drains
// on its own goroutine until it ends).
func (b *Backend) run(ctx context.Context, req engine.Request, p plan, g *generation) error {
	// The request's context carries the caller's values (request id, span)
	// but not its end: only a stall (the watchdog) ends it.
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.probe = &probe{dog: idle.New(b.cfg.FirstTokenTimeout, b.cfg.IdleTimeout, cancel)}
	run = withProbe(run, g.probe)
	g.gone = make(chan struct{})
	g.op = http.MethodPost + " " + b.cfg.BaseURL + "/api/generate"
	if len(req.Messages) > 0 {
		g.op = http.MethodPost + " " + b.cfg.BaseURL + "/api/chat"
	}
	if err := ctx.Err(); err != nil {
		cancel()
		g.probe.dog.Stop()
		return err // the caller left before anything was sent
	}
	ended := make(chan error, 1)
	b.drains.Add(1)
	go func() {
		defer b.drains.Done()
		defer cancel()
		defer g.probe.dog.Stop()
		err := b.call(run, req, p, g)
		if g.left() && b.ownClient {
			// A drained connection may go back to the pool: an abandoned
			// answer leaves no connection behind it.
			b.http.CloseIdleConnections()
		}
		ended <- err
	}()
	select {
	case err := <-ended:
		return err
	case <-g.gone: // the StreamFunc failed
		return nil
	case <-ctx.Done():
		if g.abandon() {
			return nil
		}
		return <-ended // the final line was read: the answer stands
	}
}

// call is the api client's call for req, each line to g.add.
func (b *Backend) call(ctx context.Context, req engine.Request, p plan, g *generation) error {
	if len(req.Messages) > 0 {
		return b.api.Chat(ctx, b.chatRequest(req, p), func(r api.ChatResponse) error {
			return g.add(r.Message.Content, r.Done, r.DoneReason, r.Metrics)
		})
	}
	return b.api.Generate(ctx, b.generateRequest(req, p), func(r api.GenerateResponse) error {
		return g.add(r.Response, r.Done, r.DoneReason, r.Metrics)
	})
}

// abandon marks g's caller as gone, unless the final line was read already
// (then the answer stands and abandon reports false). Later lines are
// drained.
func (g *generation) abandon() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	g.abandoned = true
	return true
}

// left reports whether the caller left before the answer ended (see
// abandon, and a StreamFunc's error).
func (g *generation) left() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.abandoned
}

// drained takes a line after the caller left: nothing is relayed; the
// final line, or one past the answer's bounds, ends the reading.
func (g *generation) drained(content string, done bool) error {
	if !done && content != "" {
		g.pieces++
	}
	if done || g.pieces > g.maxTokens {
		return errStop
	}
	return nil
}

// failed is the error the caller's StreamFunc returned, if it did.
func (g *generation) failed() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.streamErr
}
