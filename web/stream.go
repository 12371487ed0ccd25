package web

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// The streamed half of a turn (see turn.go), in three states:
//
//	waiting   nothing written: an error is still a status, in the wire's shape
//	accepted  the backend accepted the request (engine.Accepted): the status,
//	          the headers and the API's opening event (core.Opener) or a
//	          keep-alive are out, and a keep-alive follows every
//	          Config.KeepAlive until the first token; an error is now in-stream
//	first     the first event came: its text, then the rest as it comes
//
// A backend that never says it accepted goes from waiting to first at its
// first event, as every answer did before acceptance existed. Values known
// only once the backend has taken a slot (X-Kvwin-Backend, the prompt and
// cached tokens, the prompt time, Server-Timing) are HTTP trailers of every
// streamed answer, sent after its last event, whichever way it opened.
//
// The keep-alives are written by a goroutine of the turn's (keepAlive),
// between acceptance and the first event; the turn stops it, and waits for
// it, before it writes anything itself, so the writer is never shared.

// streamTrailers are the trailers a streamed answer declares.
var streamTrailers = append([]string{"Server-Timing"}, wire.GenerationHeaders...)

// streamTurn is one streamed generation being answered. It lives on the
// request's goroutine, but for its keep-alive goroutine, which owns the
// writer from acceptance until stop returns.
type streamTurn struct {
	s      *Server
	c      *gin.Context
	t      *core.Turn
	w      core.Wire
	out    *core.EventWriter
	called time.Time // the backend was called

	opened   bool      // the status and headers are out
	firstAt  time.Time // the first event came (zero before)
	streamed strings.Builder
	alive    *keepAlive
}

// send writes objs as events, stopping at the first failed write.
func (st *streamTurn) send(objs []any) error {
	for _, o := range objs {
		if err := st.out.Send(o); err != nil {
			return err
		}
	}
	return nil
}

// start writes the status and headers, with the trailers declared.
func (st *streamTurn) start() {
	st.opened = true
	st.out.Start(streamTrailers...)
}

// accepted opens the stream when the backend accepted the request: the
// headers and the API's opening event, or a first keep-alive, so bytes
// flow at once. Called by the keep-alive goroutine.
func (st *streamTurn) accepted() error {
	st.start()
	if op, ok := st.w.Enc.(core.Opener); ok {
		if objs := op.Opening(); len(objs) > 0 {
			return st.send(objs)
		}
	}
	return st.keepAlive()
}

// keepAlive writes one keep-alive: the encoder's object, or the framing's.
func (st *streamTurn) keepAlive() error {
	if ka, ok := st.w.Enc.(core.KeepAliver); ok {
		return st.out.Send(ka.KeepAlive())
	}
	return st.out.KeepAlive()
}

// first answers the first event: the stream opened if it was not, the
// trailers' values, and what the encoder renders of it.
func (st *streamTurn) first(ev engine.Event) error {
	st.alive.stop()
	st.firstAt = time.Now()
	if !st.opened {
		st.start()
	}
	st.s.setPhases(st.c, st.t, st.called, st.firstAt, st.firstAt, ev.Timings)
	core.SetGenerationHeaders(st.c.Writer.Header(), core.ServedBy(st.t.Info, ev.Backend), ev.Timings)
	objs := st.w.Enc.Open(ev)
	if len(objs) == 0 {
		return st.out.Flush()
	}
	return st.send(objs)
}

// event is the turn's engine.StreamFunc.
func (st *streamTurn) event(ctx context.Context, ev engine.Event) error {
	// Stop a generation whose client left at once, rather than at the
	// first failed write, which kernel buffers can delay by many events.
	if err := ctx.Err(); err != nil {
		return err
	}
	st.streamed.WriteString(ev.Text)
	if st.firstAt.IsZero() {
		return st.first(ev)
	}
	return st.send(core.StreamText(st.w.Enc, ev))
}

// keepAlive is the goroutine that opens a stream on acceptance and keeps it
// alive until stopped.
type keepAlive struct {
	acceptOnce sync.Once
	acceptc    chan struct{} // closed on acceptance
	stopOnce   sync.Once
	stopc      chan struct{} // closed by stop
	done       chan struct{} // closed when the goroutine has returned
}

// watch starts st's keep-alive goroutine, which ends with ctx or stop, and
// returns ctx carrying the acceptance hook (engine.WithAccepted) that
// wakes it.
func (st *streamTurn) watch(ctx context.Context, every time.Duration) context.Context {
	a := &keepAlive{acceptc: make(chan struct{}), stopc: make(chan struct{}), done: make(chan struct{})}
	st.alive = a
	go func() {
		defer close(a.done)
		select {
		case <-a.acceptc:
		case <-a.stopc:
			return
		case <-ctx.Done():
			return
		}
		if st.accepted() != nil || every <= 0 {
			return // the client left: the next event finds out
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if st.keepAlive() != nil {
					return
				}
			case <-a.stopc:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return engine.WithAccepted(ctx, func() { a.acceptOnce.Do(func() { close(a.acceptc) }) })
}

// stop ends the goroutine and waits for it: after stop the writer, and
// whether the stream opened, are the turn's again. Safe to call more than
// once.
func (a *keepAlive) stop() {
	a.stopOnce.Do(func() { close(a.stopc) })
	<-a.done
}
