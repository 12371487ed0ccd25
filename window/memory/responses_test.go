package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"kvwin/window/memory/pgtest"
)

// saveChain stores responses r1…rn of key, each continuing the one before.
func saveChain(t *testing.T, s *Store, key Key, prefix string, n int, from string) []string {
	t.Helper()
	var ids []string
	prev := from
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		err := s.SaveResponse(context.Background(), StoredResponse{ID: id, Key: key, Previous: prev,
			Input: []byte(`["in ` + id + `"]`), Messages: []byte(`"` + id + `"`), Body: []byte(`{"id":"` + id + `"}`)})
		if err != nil {
			t.Fatalf("save %s: %v", id, err)
		}
		ids, prev = append(ids, id), id
	}
	return ids
}

func chainText(t *testing.T, s *Store, tenant, id string) (Key, string, error) {
	t.Helper()
	key, msgs, err := s.ResponseChain(context.Background(), tenant, id)
	return key, joined(msgs), err
}

func TestResponseChainsBranchesAndRestart(t *testing.T) {
	eachBackend(t, testResponseChains)
}

func testResponseChains(t *testing.T, at StoreConfig) {
	s := openAt(t, at)
	key := Key{Tenant: "t1", Conversation: "r1"}
	saveChain(t, s, key, "r", 3, "")
	saveChain(t, s, key, "b", 2, "r2") // a branch off r2
	cases := []struct{ id, want string }{
		{"r3", `"r1","r2","r3"`},
		{"b2", `"r1","r2","b1","b2"`},
		{"r1", `"r1"`},
	}
	check := func(when string) {
		for _, c := range cases {
			got, text, err := chainText(t, s, "t1", c.id)
			if err != nil || text != c.want || got != key {
				t.Fatalf("%s: chain of %s = %v %s, %v; want %v %s", when, c.id, got, text, err, key, c.want)
			}
		}
	}
	check("held")
	_ = s.Close()
	s = openAt(t, at)
	check("after a restart")

	r, err := s.Response(context.Background(), "t1", "b1")
	if err != nil || r.Previous != "r2" || string(r.Body) != `{"id":"b1"}` || string(r.Input) != `["in b1"]` || r.Key != key || r.At.IsZero() {
		t.Fatalf("Response(b1) = %+v, %v", r, err)
	}
	if _, err := s.Response(context.Background(), "t2", "b1"); !errors.Is(err, ErrResponseNotFound) {
		t.Fatalf("another tenant's response: %v, want ErrResponseNotFound", err)
	}
	if _, _, err := s.ResponseChain(context.Background(), "t2", "r3"); !errors.Is(err, ErrResponseNotFound) {
		t.Fatalf("another tenant's chain: %v, want ErrResponseNotFound", err)
	}
}

func TestDeletingResponses(t *testing.T) { eachBackend(t, testDeletingResponses) }

func testDeletingResponses(t *testing.T, at StoreConfig) {
	ctx := context.Background()
	s := openAt(t, at)
	key := Key{Tenant: "t1", Conversation: "r1"}
	saveChain(t, s, key, "r", 3, "")
	if _, _, err := s.ResponseChain(ctx, "t1", "r3"); err != nil { // held from now on
		t.Fatal(err)
	}
	if ok, err := s.DeleteResponse(ctx, "t2", "r2"); ok || err != nil {
		t.Fatalf("another tenant deleted r2: %v %v", ok, err)
	}
	if ok, err := s.DeleteResponse(ctx, "t1", "r2"); !ok || err != nil {
		t.Fatalf("DeleteResponse(r2) = %v, %v", ok, err)
	}
	if ok, _ := s.DeleteResponse(ctx, "t1", "r2"); ok {
		t.Fatal("r2 deleted twice")
	}
	if _, _, err := s.ResponseChain(ctx, "t1", "r3"); !errors.Is(err, ErrResponseNotFound) {
		t.Fatalf("chain through a deleted response: %v", err)
	}
	if _, text, err := chainText(t, s, "t1", "r1"); err != nil || text != `"r1"` {
		t.Fatalf("r1 after deleting r2: %s %v", text, err)
	}
	// The conversation's delete (DELETE /kvwin/v1/conversations, the TTL)
	// takes every response with it.
	if ok, err := s.Delete(ctx, key); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	for _, id := range []string{"r1", "r3"} {
		if _, err := s.Response(ctx, "t1", id); !errors.Is(err, ErrResponseNotFound) {
			t.Fatalf("%s after the conversation's delete: %v", id, err)
		}
	}
}

func TestResponsesExpireWithTheirConversation(t *testing.T) {
	now := time.Unix(1000, 0)
	s, err := Open(StoreConfig{Dir: t.TempDir(), TTL: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	saveChain(t, s, Key{Tenant: "t1", Conversation: "old"}, "o", 2, "")
	now = now.Add(50 * time.Minute)
	saveChain(t, s, Key{Tenant: "t1", Conversation: "new"}, "n", 1, "")
	now = now.Add(20 * time.Minute) // old unused for 70 min, new for 20
	if n, err := s.Expire(context.Background()); n != 1 || err != nil {
		t.Fatalf("Expire = %d, %v; want 1", n, err)
	}
	if _, err := s.Response(context.Background(), "t1", "o2"); !errors.Is(err, ErrResponseNotFound) {
		t.Fatalf("expired response: %v", err)
	}
	if _, err := s.Response(context.Background(), "t1", "n1"); err != nil {
		t.Fatalf("the used conversation's response: %v", err)
	}
}

// A version 2 file (turns; no rev column, no responses table) gains both
// and keeps its turns.
func TestMigrationFromVersion2KeepsTurns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
	key := Key{Tenant: "t1", Conversation: "c1"}
	if _, err := s.Ingest(ctx, key, team(5)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE responses`, `ALTER TABLE conversations DROP COLUMN rev`,
		`ALTER TABLE conversations DROP COLUMN ` + responsesDeletedColumn, `PRAGMA user_version = 2`} {
		if _, err := s.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	s = openStore(t, dir)
	got, err := s.Turns(ctx, key)
	if err != nil || len(got) != len(team(5)) {
		t.Fatalf("turns after migrating: %d, %v; want %d", len(got), err, len(team(5)))
	}
	saveChain(t, s, key, "m", 1, "")
	if _, text, err := chainText(t, s, "t1", "m1"); err != nil || text != `"m1"` {
		t.Fatalf("response after migrating: %s %v", text, err)
	}
}

// Two replicas on one shared database: a chain saved through one is
// continued through the other, and a delete through either is seen by
// both.
func TestResponsesAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	at := StoreConfig{URL: pgtest.Schema(t)}
	a, b := openAt(t, at), openAt(t, at)
	key := Key{Tenant: "t1", Conversation: "r1"}
	saveChain(t, a, key, "r", 2, "")
	if _, text, err := chainText(t, b, "t1", "r2"); err != nil || text != `"r1","r2"` {
		t.Fatalf("b reads a's chain: %s %v", text, err)
	}
	saveChain(t, b, key, "s", 1, "r2") // b continues it
	if _, text, err := chainText(t, a, "t1", "s1"); err != nil || text != `"r1","r2","s1"` {
		t.Fatalf("a reads b's continuation: %s %v", text, err)
	}
	if ok, err := a.Delete(ctx, key); !ok || err != nil {
		t.Fatalf("Delete through a = %v, %v", ok, err)
	}
	if _, _, err := b.ResponseChain(ctx, "t1", "s1"); !errors.Is(err, ErrResponseNotFound) {
		t.Fatalf("b after a's delete: %v, want ErrResponseNotFound", err)
	}
}

// A delete through one replica is honoured by another that holds the
// chain in memory, at its next use: a continuation through a deleted
// response is a broken chain, the deleted response itself is gone, a
// delete beside the chain leaves it whole, and the conversation's delete
// takes every response. A continuation of a held chain costs one round
// trip before and after a delete elsewhere: the row it reads says whether
// the chain must be read again.
func TestResponseDeleteThroughAnotherReplica(t *testing.T) {
	ctx := context.Background()
	dsn, proxied, p := pgtest.ProxiedSchema(t)
	a, b := openAt(t, StoreConfig{URL: proxied}), openAt(t, StoreConfig{URL: dsn})
	cases := []struct {
		name   string
		delete string // the response deleted through b; "" the conversation
		want   string // a's chain of r3 afterwards; "" a 404
		broken bool   // the 404 says the chain is broken
	}{
		{"the chain's first", "r1", "", true},
		{"the chain's middle", "r2", "", true},
		{"the response continued", "r3", "", false},
		{"a branch beside it", "b1", `"r1","r2","r3"`, false},
		{"the conversation", "", "", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, pre := Key{Tenant: "t1", Conversation: fmt.Sprintf("c%d", i)}, fmt.Sprintf("c%d-", i)
			saveChain(t, a, key, pre+"r", 3, "")
			saveChain(t, a, key, pre+"b", 1, pre+"r2")
			r3 := pre + "r3"
			chain := func() (string, error) {
				_, text, err := chainText(t, a, "t1", r3)
				return strings.ReplaceAll(text, pre, ""), err
			}
			if text, err := chain(); err != nil || text != `"r1","r2","r3"` {
				t.Fatalf("a's chain before: %s %v", text, err)
			}
			if got := minRoundTrips(p, func() { _, _ = chain() }); got != 1 {
				t.Fatalf("a's held chain costs %d round trips, want 1", got)
			}
			var ok bool
			var err error
			if c.delete != "" {
				ok, err = b.DeleteResponse(ctx, "t1", pre+c.delete)
			} else {
				ok, err = b.Delete(ctx, key)
			}
			if !ok || err != nil {
				t.Fatalf("delete through b = %v, %v", ok, err)
			}
			text, err := chain()
			if c.want == "" {
				if !errors.Is(err, ErrResponseNotFound) || errors.Is(err, ErrChainBroken) != c.broken {
					t.Fatalf("a's chain after = %s, %v; want ErrResponseNotFound (broken chain: %v)", text, err, c.broken)
				}
				return
			}
			if err != nil || text != c.want {
				t.Fatalf("a's chain after = %s, %v; want %s", text, err, c.want)
			}
			if got := minRoundTrips(p, func() { _, _ = chain() }); got != 1 {
				t.Fatalf("after the delete a's chain costs %d round trips, want 1", got)
			}
		})
	}
}

// minRoundTrips is the fewest round trips through p that f made in three
// calls: database/sql may ping a connection idle for over a second before
// lending it, which is no round trip of f's own.
func minRoundTrips(p *pgtest.Proxy, f func()) int64 {
	least := int64(1 << 62)
	for range 3 {
		before := p.RoundTrips()
		f()
		least = min(least, p.RoundTrips()-before)
	}
	return least
}

// A response saved to a held conversation while another request walks the
// same conversation's chain: the two touch one map, and under the race
// detector (make test) an unguarded walk fails here; without it, it can
// kill the process (a concurrent map read and write is fatal).
func TestChainReadWhileSaving(t *testing.T) { eachBackend(t, testChainReadWhileSaving) }

func testChainReadWhileSaving(t *testing.T, at StoreConfig) {
	s := openAt(t, at)
	key := Key{Tenant: "acme", Conversation: "c"}
	ids := saveChain(t, s, key, "r", 3, "")
	done := make(chan error, 1)
	go func() {
		prev := ids[2]
		for i := 0; i < 500; i++ {
			id := fmt.Sprintf("b%d", i)
			err := s.SaveResponse(context.Background(), StoredResponse{ID: id, Key: key, Previous: prev,
				Input: []byte(`[]`), Messages: []byte(`"` + id + `"`), Body: []byte(`{}`)})
			if err != nil {
				done <- fmt.Errorf("save %s: %w", id, err)
				return
			}
			prev = id
		}
		done <- nil
	}()
	for reading := true; reading; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			reading = false
		default:
		}
		if _, got, err := chainText(t, s, "acme", ids[2]); err != nil || got != `"r1","r2","r3"` {
			t.Fatalf("chain of r3 while saving: %q, %v", got, err)
		}
	}
	if _, got, err := chainText(t, s, "acme", "b499"); err != nil || !strings.HasPrefix(got, `"r1","r2","r3","b0",`) || strings.Count(got, ",") != 502 {
		t.Fatalf("chain of b499: %.60q…, %v", got, err)
	}
}

// A chain is read from the one read before it when it continues it, is it,
// or neither (a branch, an older response): each read gives the same
// messages as a walk from the first response would, and a chain returned
// still reads the same after later reads extended the array it was read
// from (a branch continuing the same response among them), and after its
// holder appended to it.
func TestChainReadFromTheLastOne(t *testing.T) { eachBackend(t, testChainReadFromTheLastOne) }

func testChainReadFromTheLastOne(t *testing.T, at StoreConfig) {
	s := openAt(t, at)
	key := Key{Tenant: "acme", Conversation: "c"}
	saveChain(t, s, key, "r", 3, "")
	saveChain(t, s, key, "a", 2, "r3")
	saveChain(t, s, key, "b", 1, "r2")
	saveChain(t, s, key, "c", 1, "r3") // a branch beside a1
	type read struct {
		id, want string
		got      [][]byte
	}
	var reads []read
	for _, step := range []struct{ id, want string }{
		{"r3", `"r1","r2","r3"`},      // walked
		{"a1", `"r1","r2","r3","a1"`}, // continues the last
		{"a2", `"r1","r2","r3","a1","a2"`},
		{"a2", `"r1","r2","r3","a1","a2"`}, // the last again
		{"b1", `"r1","r2","b1"`},           // a branch: walked
		{"a1", `"r1","r2","r3","a1"`},      // an older one: walked
		{"a2", `"r1","r2","r3","a1","a2"`},
		{"r3", `"r1","r2","r3"`}, // walked
		{"c1", `"r1","r2","r3","c1"`},
		{"a1", `"r1","r2","r3","a1"`}, // beside c1, at the same place: walked
	} {
		_, msgs, err := s.ResponseChain(context.Background(), "acme", step.id)
		if got := joined(msgs); err != nil || got != step.want {
			t.Fatalf("chain of %s: %q, %v; want %q", step.id, got, err, step.want)
		}
		if len(reads) > 0 { // the holder of the chain read before appends to it now
			_ = append(reads[len(reads)-1].got, []byte(`"the holder's own"`))
		}
		reads = append(reads, read{step.id, step.want, msgs})
	}
	for i, r := range reads {
		if got := joined(r.got); got != r.want {
			t.Errorf("read %d (%s) now reads %q; want %q as it was returned", i, r.id, got, r.want)
		}
	}
	if _, got, _ := chainText(t, s, "acme", "a2"); got != `"r1","r2","r3","a1","a2"` {
		t.Errorf("chain of a2 after the holders appended: %q", got)
	}
}

func joined(msgs [][]byte) string {
	var parts []string
	for _, m := range msgs {
		parts = append(parts, string(m))
	}
	return strings.Join(parts, ",")
}
