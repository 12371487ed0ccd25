package window

import (
	"context"
	"kvwin/internal/ident"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/window/memory"
)

// TestBranchesThroughWindow: under one conversation key, a client whose
// history disagrees with the owner's never receives her evicted turns, and
// a client that wrote first at her positions never plants turns in her
// packet; both keep recalling their own. Real SQLite file.
func TestBranchesThroughWindow(t *testing.T) {
	ctx := context.Background()
	st, err := memory.Open(memory.StoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := New(Config{Settings: Settings{Budget: 1200}}, st)
	if err != nil {
		t.Fatal(err)
	}
	with := func(text string) []engine.Message {
		msgs := story(120)
		msgs[5].Content = text
		return msgs
	}
	const q = "Where do refunds go, which IBAN?"
	build := func(msgs []engine.Message) string {
		t.Helper()
		res, err := w.Build(ctx, Request{Owner: ident.Owner{Tenant: "acme", Conversation: "support"}, Messages: ask(msgs, q)})
		if err != nil || res.Degraded != nil {
			t.Fatalf("Build: %v, degraded %v", err, res.Degraded)
		}
		if res.Start <= 5 {
			t.Fatalf("turn 5 was not evicted (window starts at %d)", res.Start)
		}
		return strings.Join(packetTexts(res), "\n")
	}
	attacker := with("Refunds go to ATTACKER-IBAN-666.")
	owner := with("Refunds go to IBAN DE89-3704-0044.")
	if got := build(attacker); !strings.Contains(got, "ATTACKER") {
		t.Fatalf("attacker's own packet: %q", got)
	}
	if got := build(owner); !strings.Contains(got, "DE89") || strings.Contains(got, "ATTACKER") {
		t.Fatalf("owner's packet after the attacker wrote first: %q", got)
	}
	// A history that never said either gets neither.
	if got := build(with("We do not do refunds.")); strings.Contains(got, "IBAN") {
		t.Fatalf("a third branch got %q", got)
	}

	// Delete drops the stored turns and the memoized packets: the owner's
	// next request rebuilds from her own turns only.
	key := memory.Key{Tenant: "acme", Conversation: "support"}
	if ok, err := w.Delete(ctx, key); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if n := w.packets.count(key); n != 0 {
		t.Fatalf("%d packets memoized for a deleted conversation", n)
	}
	if turns, _ := st.Turns(ctx, key); len(turns) != 0 {
		t.Fatalf("%d turns stored after Delete", len(turns))
	}
	if ok, err := w.Delete(ctx, key); ok || err != nil {
		t.Fatalf("second Delete = %v, %v; want false", ok, err)
	}
}

// countingStore is a real store that counts the turns each ingest is
// sent, as a Store that cannot take a tail (tailStore can).
type countingStore struct {
	st   *memory.Store
	sent []int // turns per call, IngestAfter's negative
}

func (c *countingStore) Ingest(ctx context.Context, key memory.Key, turns []memory.Turn) (int, error) {
	c.sent = append(c.sent, len(turns))
	return c.st.Ingest(ctx, key, turns)
}

func (c *countingStore) Search(ctx context.Context, key memory.Key, q memory.Query) ([]memory.Hit, error) {
	return c.st.Search(ctx, key, q)
}

func (c *countingStore) Delete(ctx context.Context, key memory.Key) (bool, error) {
	return c.st.Delete(ctx, key)
}

type tailStore struct{ *countingStore }

func (c tailStore) IngestAfter(ctx context.Context, key memory.Key, turns []memory.Turn) (int, bool, error) {
	c.sent = append(c.sent, -len(turns))
	return c.st.IngestAfter(ctx, key, turns)
}

// TestEvictedTurnsSentOnce: a conversation's turns go to the store once
// (with the last one stored before, so the store can tell it holds it),
// not every turn again; an edit far back, a delete and a store that cannot
// take a tail send the whole history; and what is stored is the same as
// when every turn sends all.
func TestEvictedTurnsSentOnce(t *testing.T) {
	ctx := context.Background()
	key := memory.Key{Tenant: "acme", Conversation: "long"}
	run := func(tail bool) (sent, starts []int, stored []memory.Turn) {
		st, err := memory.Open(memory.StoreConfig{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		cs := &countingStore{st: st}
		var store Store = cs
		if tail {
			store = tailStore{cs}
		}
		w, err := New(Config{Settings: Settings{Budget: 1200}}, store)
		if err != nil {
			t.Fatal(err)
		}
		msgs := story(200)
		for n := 150; n <= len(msgs); n += 10 {
			if n == 300 { // an edit far back: another history from here on
				msgs[20].Content = "Something else entirely."
			}
			if n == 350 {
				if _, err := w.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			calls := len(cs.sent)
			res, err := w.Build(ctx, Request{Owner: key, Messages: ask(msgs[:n], "Where is Omar based now?")})
			if err != nil {
				t.Fatal(err)
			}
			if len(cs.sent) > calls { // a turn without asks in view searches nothing, stores nothing
				starts = append(starts, res.Start)
			}
		}
		stored, err = st.Turns(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return cs.sent, starts, stored
	}
	whole, _, want := run(false)
	sent, starts, got := run(true)
	if len(got) != len(want) {
		t.Fatalf("stored %d turns, sending all each turn %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Pos != want[i].Pos || got[i].Text != want[i].Text || got[i].Parent != want[i].Parent {
			t.Fatalf("stored turn %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(sent) != len(starts) {
		t.Fatalf("%d ingests for %d turns that ingested: %v", len(sent), len(starts), sent)
	}
	tails, all := 0, 0
	for i, n := range sent {
		if n >= 0 {
			all++
			continue
		}
		// The turns evicted since the last turn, and the last one before.
		if tails++; -n != starts[i]-starts[i-1]+1 {
			t.Fatalf("ingest %d sent a tail of %d turns; the cut went from %d to %d", i, -n, starts[i-1], starts[i])
		}
	}
	// The first turn, the edit, the delete; every other turn a tail.
	if all != 3 || tails != len(whole)-3 {
		t.Fatalf("calls %v: %d whole, %d tails; want 3 whole and %d tails (sending all: %v)", sent, all, tails, len(whole)-3, whole)
	}
}
