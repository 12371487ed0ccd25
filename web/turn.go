package web

import (
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
)

// The turn pipeline's last step: one generation, answered in one wire
// format. Every generating route (OpenAI chat and completions, llama-server's
// /completion, Ollama's /api/chat and /api/generate) decodes its body into an
// engine.Request, windows it where it is a chat, and hands it to RunTurn with
// the wire it speaks. RunTurn owns the one streaming state machine:
//
//   - nothing is written before the backend has accepted the request
//     (engine.Accepted: every check that answers with a status passed), so
//     an error before it still gets its status, in the wire's error shape;
//   - streamed, the status, the headers and the opening event go out on
//     acceptance, then a keep-alive every Config.KeepAlive until the first
//     event, which carries the prompt-side timings: the X-Kvwin-* values
//     are the stream's trailers (stream.go);
//   - text is sent as it comes; a client that left stops the generation at
//     its next event;
//   - what was streamed must add up to the result's text byte for byte: if a
//     backend streamed only a prefix of it, the rest is sent;
//   - an error once the stream is open is the encoder's in-stream error,
//     and the stream ends without the framing's "done" sentinel.

// RunTurn runs req on t's backend and answers as w says. It blocks until the
// generation ends. The request's context goes to the backend, so a client
// that leaves stops the generation. The request acts as t's tenant in t's
// conversation: they are set here, once. The turn is one span (trace.go),
// in the request's context while the backend runs.
func (s *Server) RunTurn(c *gin.Context, t *core.Turn, req engine.Request, w core.Wire) {
	req.Owner = t.Owner
	req.Class, req.Weight = t.Class, t.Weight
	span := s.startTurnSpan(c, t, req)
	called := time.Now()
	run := s.runWhole
	if w.Stream {
		run = s.runStream
	}
	res, first, err := run(c, t, req, w, called)
	if t.Charge != nil {
		t.Charge(res.Timings.PromptTokens + res.Timings.GeneratedTokens)
	}
	s.endTurnSpan(c, span, t, called, first, res, err)
}

// runWhole runs req not streamed: it blocks until the generation ends and
// its answer is written, and returns the result, when the first token came
// and the error the turn ended with.
func (s *Server) runWhole(c *gin.Context, t *core.Turn, req engine.Request, w core.Wire, called time.Time) (engine.Result, time.Time, error) {
	res, err := t.Backend.Generate(c.Request.Context(), req, nil)
	s.remember(t, req, res, err)
	// Not streamed, the first token is known from the backend's timings.
	first := called.Add(res.Timings.FirstToken)
	if res.Timings.FirstToken == 0 {
		first = time.Now()
	}
	s.observe(c, t, req, res, false, first, err)
	if err != nil {
		w.Fail(c, err)
		return res, first, err
	}
	s.setPhases(c, t, called, first, time.Now(), res.Timings)
	core.SetGenerationHeaders(c.Writer.Header(), core.ServedBy(t.Info, res.Backend), res.Timings)
	core.WriteJSON(c.Writer, http.StatusOK, w.Enc.Whole(res))
	return res, first, nil
}

// runStream runs req streamed (stream.go): it blocks until the generation
// ends and its answer is written, and returns as runWhole does.
func (s *Server) runStream(c *gin.Context, t *core.Turn, req engine.Request, w core.Wire, called time.Time) (engine.Result, time.Time, error) {
	ctx := c.Request.Context()
	st := &streamTurn{s: s, c: c, t: t, w: w, called: called, out: core.NewEventWriter(c.Writer, s.cfg.StallTimeout, w.Frame)}
	gen := st.watch(ctx, s.cfg.KeepAlive)
	defer st.alive.stop()
	res, err := t.Backend.Generate(gen, req, func(ev engine.Event) error { return st.event(ctx, ev) })
	st.alive.stop() // the writer is the turn's again

	firstAt := st.firstAt
	if firstAt.IsZero() {
		firstAt = time.Now()
	}
	s.remember(t, req, res, err)
	s.observe(c, t, req, res, true, firstAt, err)
	switch {
	case ctx.Err() != nil || st.out.Err() != nil:
		_ = c.Error(core.ErrClientGone) // nobody is reading: write nothing more
		return res, firstAt, core.ErrClientGone
	case err != nil && !st.opened:
		w.Fail(c, err)
		return res, firstAt, err
	case err != nil:
		_ = c.Error(err)
		_ = st.out.Send(w.Enc.StreamError(err))
		return res, firstAt, err
	}

	if st.firstAt.IsZero() {
		// The backend finished without a single event (nothing generated,
		// or an adapter that does not stream): the result has it all.
		_ = st.first(engine.Event{First: true, Slot: res.Slot, Timings: res.Timings, Backend: res.Backend})
	}
	if rest, ok := strings.CutPrefix(res.Text, st.streamed.String()); !ok {
		s.log.WarnContext(c.Request.Context(), "backend result text differs from what it streamed",
			"backend", t.Info.Name, "streamed_bytes", st.streamed.Len(), "result_bytes", len(res.Text))
	} else if rest != "" {
		_ = st.send(w.Enc.Text(rest))
	}
	_ = st.send(w.Enc.End(res))
	if st.out.Done() != nil {
		_ = c.Error(core.ErrClientGone)
		return res, firstAt, core.ErrClientGone
	}
	return res, firstAt, nil
}

// remember keeps a chat's whole answer that called tools, as generated,
// for the tenant's next turn (toolcall.Answers), streamed or not.
func (s *Server) remember(t *core.Turn, req engine.Request, res engine.Result, err error) {
	if err == nil && len(req.Messages) > 0 {
		s.answers.Remember(t.Tenant, res.Text)
	}
}

// setPhases writes the turn's Server-Timing header, its phases up to at
// (the headers go out: with the first token when streamed), and observes
// them in the phase histograms.
func (s *Server) setPhases(c *gin.Context, t *core.Turn, called, first, at time.Time, tm engine.Timings) {
	p := core.TurnPhases(t, called, first, at, tm)
	core.SetServerTiming(c.Writer.Header(), p)
	s.metrics.phases(p)
}

// observe records a finished generation: the histograms and counters for a
// successful one, and the recent-traffic ring either way.
func (s *Server) observe(c *gin.Context, t *core.Turn, req engine.Request, res engine.Result, stream bool, first time.Time, err error) {
	start := t.Start
	if start.IsZero() {
		start = first
	}
	model := req.Model
	if model == "" {
		model = t.Info.Model
	}
	backend := core.ServedBy(t.Info, res.Backend)
	now := time.Now()
	rec := TrafficTurn{Time: start, Route: c.FullPath(), Model: model, Backend: backend, Tenant: req.Tenant,
		Conversation: req.Conversation, Stream: stream, PromptTokens: res.Timings.PromptTokens,
		CachedTokens: res.Timings.CachedTokens, Generated: res.Timings.GeneratedTokens,
		TTFTSeconds: first.Sub(start).Seconds(), Seconds: now.Sub(start).Seconds(), Window: t.Window}
	if err != nil {
		rec.Error = err.Error()
	} else {
		s.metrics.generation(model, backend, res.Timings, first.Sub(start), now.Sub(start))
	}
	s.traffic.add(rec)
}
