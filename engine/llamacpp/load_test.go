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

// A turn's answer says where the slot journal stood at its end, and the
// journal's events up to there already say the turn ended: its slot as it
// left it and the load after it. A gateway reads the journal by another
// connection than the answer's; with this it takes no event from before
// the end as the load now (router.member.loadReported).
func TestJournalSaysWhereATurnEnded(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 256})
	j := e.SlotJournal()
	sub := j.Subscribe(kvcache.Cursor{})
	defer sub.Close()
	mirror := kvcache.NewMirror()
	for _, ev := range sub.Pending() {
		if _, err := mirror.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	for turn := range 3 {
		res := chat(t, e, []engine.Message{{Role: "user", Content: text(turn, 60)}}, 4)
		if res.Journal.Epoch != j.Epoch() || res.Journal.After == 0 {
			t.Fatalf("turn %d: the answer says the journal stood at %+v (epoch %s)", turn, res.Journal, j.Epoch())
		}
		// Every event up to there was published before the answer
		// returned: it is in the subscription's buffer already.
		for mirror.Cursor().After < res.Journal.After {
			select {
			case ev := <-sub.C():
				if _, err := mirror.Apply(ev); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("turn %d: the journal has events up to %d when the answer says %d", turn, mirror.Cursor().After, res.Journal.After)
			}
		}
		if l := mirror.Load(); l != (kvcache.Load{}) {
			t.Errorf("turn %d: load at the answer's end %+v, want nothing running or waiting", turn, l)
		}
		if held := mirror.Slot(res.Slot).Tokens; len(held) < res.Timings.PromptTokens/j.BlockTokens()*j.BlockTokens() {
			t.Errorf("turn %d: the slot holds %d tokens at the answer's end, want the turn's %d-token prompt's blocks", turn, len(held), res.Timings.PromptTokens)
		}
	}
}
