package router

import (
	"bytes"
	"context"
	"fmt"
	"kvwin/internal/ident"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// slotFake is a fake that says what its slots hold, as llama-server's
// /slots does in each build's shape: "prompt" (the tokens of the slot's
// last prompt), "counts" (how many tokens it holds), "off" (not served).
type slotFake struct {
	*fake
	shape string
	reads chan struct{} // one per ReadSlots, if not full
}

func newSlotFake(name, shape string) *slotFake {
	return &slotFake{fake: newFake(name), shape: shape, reads: make(chan struct{}, 64)}
}

func (f *slotFake) ReadSlots(context.Context) ([]engine.SlotContent, error) {
	select {
	case f.reads <- struct{}{}:
	default:
	}
	if f.shape == "off" {
		return nil, fmt.Errorf("GET /slots: 501: %w", engine.ErrNotSupported)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.SlotContent, f.slots)
	for s := range f.slots {
		tokens := f.slotTokens[s]
		out[s] = engine.SlotContent{ID: s, Count: len(tokens)}
		if f.shape == "prompt" {
			out[s].Tokens = append([]int{}, tokens...)
		}
	}
	return out, nil
}

// restart empties every slot, as a server restarted between two health
// checks.
func (f *slotFake) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slotTokens = map[int][]int{}
}

func newSlotRouter(t *testing.T, cfg Config, fakes ...*slotFake) (*Router, *[]Decision) {
	t.Helper()
	var mu sync.Mutex
	var decisions []Decision
	cfg.Observe = func(d Decision) {
		mu.Lock()
		decisions = append(decisions, d)
		mu.Unlock()
	}
	var bs []engine.Backend
	for _, f := range fakes {
		bs = append(bs, f)
	}
	r, err := New(cfg, bs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, &decisions
}

// waitChange waits, on the router's change signal, until cond holds.
func waitChange(t *testing.T, r *Router, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		ch := r.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// heldBlocks is what the registry says slot holds on backend.
func heldBlocks(r *Router, backend string, slot int) int {
	return len(r.reg.Held(kvcache.Location{Backend: backend, Slot: slot}))
}

// TestRestartCorrectedFromSlots: a backend restarted between turns (its KV
// empty, the registry believing it full) is corrected from its slots
// within one read, or by the first turn whose reuse disagrees (which then
// has the other slots read), whichever comes first; the next turn is
// routed on the corrected state (its own prefix no longer predicted).
func TestRestartCorrectedFromSlots(t *testing.T) {
	for _, shape := range []string{"prompt", "counts"} {
		for _, by := range []string{"poll", "disagreeing turn"} {
			t.Run(shape+"/"+by, func(t *testing.T) {
				cfg := Config{HealthInterval: 5 * time.Millisecond, SlotsInterval: time.Hour, SoleTenant: "default"}
				if by == "poll" {
					cfg.SlotsInterval = 20 * time.Millisecond
				}
				f := newSlotFake("a", shape)
				r, decisions := newSlotRouter(t, cfg, f)
				x, y := groupConv(1, 1, 1), groupConv(2, 2, 1)
				rx, ry := generate(t, r, x), generate(t, r, y)
				if rx.Slot == ry.Slot || heldBlocks(r, "a", rx.Slot) == 0 || heldBlocks(r, "a", ry.Slot) == 0 {
					t.Fatalf("x on slot %d, y on slot %d (%d, %d blocks held): want a slot each", rx.Slot, ry.Slot,
						heldBlocks(r, "a", rx.Slot), heldBlocks(r, "a", ry.Slot))
				}
				heldY := heldBlocks(r, "a", ry.Slot) * 16
				f.restart()
				if by == "disagreeing turn" {
					res := generate(t, r, groupConv(1, 1, 2)) // x's next turn: the backend reused nothing
					if res.Timings.CachedTokens != 0 {
						t.Fatalf("x's turn after the restart reports %d cached", res.Timings.CachedTokens)
					}
				}
				waitChange(t, r, "y's slot corrected", func() bool { return heldBlocks(r, "a", ry.Slot) == 0 })
				generate(t, r, groupConv(2, 2, 2))
				d := (*decisions)[len(*decisions)-1]
				if d.PredictedCached >= heldY {
					// (x's conversation shares a first block with y's.)
					t.Errorf("y's turn after the correction was routed predicting %d cached tokens, as before the restart (%d)", d.PredictedCached, heldY)
				}
				if got := r.Status()[0].Residency; got != ResidencyRead {
					t.Errorf("residency %q, want %q", got, ResidencyRead)
				}
			})
		}
	}
}

// TestSlotsRebuildResidency: at join, a slot's prompt the server gives is
// keyed (a gateway of one tenant), so a turn continuing it is routed to
// it predicting its tokens; with counts alone, or on a gateway with keys
// (whose prompt is it?), nothing is invented.
func TestSlotsRebuildResidency(t *testing.T) {
	for _, shape := range []string{"prompt", "counts", "prompt, with keys"} {
		t.Run(shape, func(t *testing.T) {
			sole := "default"
			if shape == "prompt, with keys" {
				shape, sole = "prompt", "" // whose prompt it is, the router cannot tell
			}
			a, b := newSlotFake("a", shape), newSlotFake("b", shape)
			msgs := groupConv(3, 3, 2)
			tokens, _ := b.Prompt(context.Background(), engine.Request{Messages: msgs[:len(msgs)-2]})
			b.slotTokens[1] = tokens // someone ran the conversation's first turn on b's slot 1
			r, decisions := newSlotRouter(t, Config{HealthInterval: 5 * time.Millisecond, SlotsInterval: time.Hour, SoleTenant: sole}, a, b)
			waitChange(t, r, "slots read at join", func() bool {
				st := r.Status()
				return st[0].Residency == ResidencyRead && st[1].Residency == ResidencyRead
			})
			res, err := r.Generate(context.Background(), engine.Request{Messages: msgs, Slot: -1, Owner: ident.Owner{Tenant: "default"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := (*decisions)[len(*decisions)-1]
			switch {
			case shape == "prompt" && sole != "":
				if res.Backend != "b" || d.PredictedCached < len(tokens)/16*16 || b.last().Slot != 1 {
					t.Errorf("went to %s slot %d predicting %d cached; want b slot 1, %d", res.Backend, b.last().Slot, d.PredictedCached, len(tokens)/16*16)
				}
			default:
				if d.PredictedCached != 0 {
					t.Errorf("%s: predicted %d cached of a prompt the router cannot attribute", shape, d.PredictedCached)
				}
			}
		})
	}
}

// TestSlotsOff: a backend without /slots routes as before, says so once in
// the log, and its status says its residency is learned.
func TestSlotsOff(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	f := newSlotFake("a", "off")
	r, err := New(Config{HealthInterval: 5 * time.Millisecond, SlotsInterval: time.Millisecond}, []engine.Backend{f}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	<-f.reads
	waitChange(t, r, "residency learned", func() bool { return r.Status()[0].Residency == ResidencyLearned })
	for range 3 { // health checks go on; /slots is not asked again
		<-f.checked
	}
	if res := generate(t, r, conv(1, 1)); res.Backend != "a" {
		t.Fatalf("routed to %q", res.Backend)
	}
	if n := len(f.reads); n != 0 {
		t.Errorf("/slots asked %d more times after it was found off", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "does not serve /slots"); n != 1 {
		t.Errorf("the log says %d times that /slots is off, want once:\n%s", n, buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
