package web

import (
	"strings"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
)

// stream runs req on the backend and streams the answer as SSE (see sse.go
// for the framing). It blocks until the generation ends.
//
// Nothing is written before the backend's first event: an error before it
// still gets a proper status. The first event carries the prompt-side
// timings, so the X-Kvwin-* headers go out with it, as soon as prefill ends.
func (s *Server) stream(c *gin.Context, info engine.Info, req engine.Request, r reply) {
	ctx := c.Request.Context()
	sse := newSSEWriter(c.Writer, s.cfg.StallTimeout)
	var (
		opened   bool
		streamed strings.Builder // the text sent so far, to reconcile with the result
	)
	open := func(t engine.Timings, backend string) error {
		opened = true
		setGenerationHeaders(c.Writer.Header(), servedBy(info, backend), t)
		sse.start()
		if ch := r.format.chunk(r.meta, part{open: true}); ch != nil {
			return sse.send(ch)
		}
		return sse.flush()
	}

	res, err := s.backend.Generate(ctx, req, func(ev engine.Event) error {
		// Stop a generation whose client left at once, rather than at the
		// first failed write, which kernel buffers can delay by many events.
		if err := ctx.Err(); err != nil {
			return err
		}
		if !opened {
			if err := open(ev.Timings, ev.Backend); err != nil {
				return err
			}
		}
		if ev.Text == "" {
			return nil
		}
		streamed.WriteString(ev.Text)
		return sse.send(r.format.chunk(r.meta, part{text: ev.Text}))
	})

	switch {
	case ctx.Err() != nil || sse.err != nil:
		_ = c.Error(errClientGone) // nobody is reading: write nothing more
		return
	case err != nil && !opened:
		s.fail(c, err)
		return
	case err != nil:
		_ = c.Error(err)
		_, body := classify(err)
		_ = sse.send(errorBody{Error: body})
		return
	}

	if !opened {
		// The backend finished without a single event (nothing generated,
		// or an adapter that does not stream): the result has it all.
		_ = open(res.Timings, res.Backend)
	}
	// Streamed text must add up to the non-streamed text byte for byte. The
	// contract says the result's text is what was streamed; if a backend
	// streamed only a prefix of it, send the rest rather than lose it.
	sent := streamed.String()
	if rest, ok := strings.CutPrefix(res.Text, sent); !ok {
		s.log.Warn("backend result text differs from what it streamed",
			"backend", info.Name, "streamed_bytes", len(sent), "result_bytes", len(res.Text))
	} else if rest != "" {
		_ = sse.send(r.format.chunk(r.meta, part{text: rest}))
	}
	_ = sse.send(r.format.chunk(r.meta, part{finish: finishReason(res)}))
	if r.includeUsage {
		u := usageOf(res)
		_ = sse.send(r.format.chunk(r.meta, part{usage: &u}))
	}
	if sse.done() != nil {
		_ = c.Error(errClientGone)
	}
}
