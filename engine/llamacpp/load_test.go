package llamacpp

import (
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// An idle node publishes that it is idle: once a turn has ended, the slot
// journal's load comes to nothing running and nothing waiting without
// another request. A turn gives its admission back after its last token,
// and the load published then counted it as waiting until the next
// request, so every gateway following the node predicted a wait on it.
func TestJournalLoadIsIdleAfterATurn(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 256})
	sub := e.SlotJournal().Subscribe(kvcache.Cursor{})
	defer sub.Close()
	var last kvcache.Load
	read := func(ev kvcache.JournalEvent) {
		if ev.Load != nil {
			last = *ev.Load
		}
	}
	for _, ev := range sub.Pending() {
		read(ev)
	}
	for turn := range 3 {
		chat(t, e, []engine.Message{{Role: "user", Content: text(turn, 40)}}, 4)
		deadline := time.After(2 * time.Minute) // a hang guard: the event comes at once or never
		busy := false                           // the turn's own load seen, then nothing
		for !busy || last != (kvcache.Load{}) {
			select {
			case ev, ok := <-sub.C():
				if !ok {
					t.Fatalf("turn %d: journal subscription ended: %v", turn, sub.Err())
				}
				read(ev)
				busy = busy || last != (kvcache.Load{})
			case <-deadline:
				t.Fatalf("turn %d: the journal's load after the turn is %+v, want nothing running or waiting", turn, last)
			}
		}
	}
}
