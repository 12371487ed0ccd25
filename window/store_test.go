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
