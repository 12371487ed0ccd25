package web

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/kvcache"
	"kvwin/web/core"
)

// GET /kvwin/v1/events: the node's journal of what its slots hold
// (kvcache.Journal), which every gateway of a fleet follows with the admin
// key (docs/fleet.md, "Residency from the nodes"). NDJSON, one
// kvcache.JournalEvent a line:
//
//	?epoch=E&after=S   resume after event S of epoch E: the events since,
//	                   or, when they are gone (another epoch: the node
//	                   restarted; older than the history), a snapshot first
//	(neither)          a snapshot first, then every change
//	?model=NAME        the model's engine, on a node of several models
//
// A heartbeat line ({"type":"heartbeat", "seq", "epoch"}) goes out after
// eventsHeartbeat without events, so a follower tells a quiet node from a
// dead connection. A follower that reads too slowly is dropped by the
// journal (it never waits for one): its stream ends and it resumes.

// eventsHeartbeat is the quiet time after which a heartbeat is sent: a
// third of a follower's idle timeout (engine/llamaserver's 30s), so two
// can be lost before it gives up.
const eventsHeartbeat = 10 * time.Second

// eventsStall is how long one line may take to reach the follower's socket
// before the follower is taken for gone.
const eventsStall = 30 * time.Second

// events serves GET /kvwin/v1/events (see above).
func (s *Server) events(c *gin.Context, t *core.Turn) error {
	b, _, err := s.SelectBackend(t, c.Query("model"))
	if err != nil {
		return err
	}
	jr, ok := engine.As[engine.SlotJournaler](b)
	if !ok {
		return fmt.Errorf("events: this server's backend publishes no slot journal: %w", engine.ErrNotSupported)
	}
	cursor := kvcache.Cursor{Epoch: c.Query("epoch")}
	if a := c.Query("after"); a != "" {
		if cursor.After, err = strconv.ParseUint(a, 10, 64); err != nil {
			return engine.Invalid("after=%q: want the sequence number of the last event read", a)
		}
	}
	j := jr.SlotJournal()
	sub := j.Subscribe(cursor)
	defer sub.Close()
	w := core.NewEventWriter(c.Writer, eventsStall, core.FrameNDJSON)
	w.Start()
	last := cursor.After
	for _, ev := range sub.Pending() {
		if w.Send(ev) != nil {
			return nil
		}
		last = ev.Seq
	}
	if err := w.Flush(); err != nil {
		return nil
	}
	beat := time.NewTicker(eventsHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-c.Request.Context().Done():
			return nil
		case <-s.streamsDone:
			return nil // the server is shutting down: followers resume elsewhere or later
		case <-beat.C:
			if w.Send(kvcache.JournalEvent{Type: "heartbeat", Seq: last, Epoch: j.Epoch()}) != nil {
				return nil
			}
		case ev, ok := <-sub.C():
			if !ok {
				return nil // dropped (too slow): the follower resumes after last
			}
			if w.Send(ev) != nil {
				return nil
			}
			last = ev.Seq
			beat.Reset(eventsHeartbeat)
		}
	}
}

// EndStreams ends the event streams of GET /kvwin/v1/events, which would
// otherwise hold a graceful shutdown until its deadline. Safe to call more
// than once and concurrently.
func (s *Server) EndStreams() {
	s.endStreams.Do(func() { close(s.streamsDone) })
}
