package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"testing"

	"kvwin/engine"
	"kvwin/engine/llamaserver"
	"kvwin/kvcache"
)

// journalFake is a fake backend that publishes a slot journal.
type journalFake struct {
	*fakeBackend
	j *kvcache.Journal
}

func (f journalFake) SlotJournal() *kvcache.Journal { return f.j }

var _ engine.SlotJournaler = journalFake{}

func newJournalServer(t *testing.T) (*httptest.Server, *Server, *kvcache.Journal) {
	t.Helper()
	j, err := kvcache.NewJournal(kvcache.JournalConfig{BlockTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(keyedConfig(nil), journalFake{newFake(), j}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, s, j
}

func TestEventsRefused(t *testing.T) {
	ts, _, _ := newJournalServer(t)
	plain, err := New(keyedConfig(nil), newFake(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tsPlain := httptest.NewServer(plain.Handler())
	t.Cleanup(tsPlain.Close)
	for _, tt := range []struct {
		name   string
		ts     *httptest.Server
		path   string
		key    string
		status int
	}{
		{"no key", ts, "/kvwin/v1/events", "", 401},
		{"a tenant's key", ts, "/kvwin/v1/events", aliceKey, 403},
		{"a bad sequence number", ts, "/kvwin/v1/events?epoch=x&after=-1", adminKey, 400},
		{"a backend without a journal", tsPlain, "/kvwin/v1/events", adminKey, 501},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := send(t, tt.ts, "GET", tt.path, "", jsonWith(tt.key))
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.status)
			}
			var e struct {
				Error struct{ Message, Type string } `json:"error"`
			}
			if json.Unmarshal(body, &e) != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("not an OpenAI-shaped error: %s", body)
			}
		})
	}
}

// follow follows ts's journal through the llama-server adapter from c
// until it has n events, and returns them.
func follow(t *testing.T, ts *httptest.Server, c kvcache.Cursor, n int) []kvcache.JournalEvent {
	t.Helper()
	b, err := llamaserver.New(llamaserver.Config{BaseURL: ts.URL, APIKey: adminKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got []kvcache.JournalEvent
	stop := errors.New("enough")
	err = b.FollowResidency(context.Background(), c, func(ev kvcache.JournalEvent) error {
		got = append(got, ev)
		if len(got) == n {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("follow: %v after %d events", err, len(got))
	}
	return got
}

func TestEventsStreamAndResume(t *testing.T) {
	ts, s, j := newJournalServer(t)
	j.SetSlot(0, "alice", []int{1, 2, 3, 4, 5, 6, 7, 8, 9})
	got := follow(t, ts, kvcache.Cursor{}, 1)
	snap := got[0]
	if snap.Type != kvcache.EventSnapshot || snap.Seq != 1 || len(snap.Slots) != 1 || !slices.Equal(snap.Slots[0].Tokens, []int{1, 2, 3, 4, 5, 6, 7, 8}) || snap.BlockTokens != 4 {
		t.Fatalf("first line %+v, want a snapshot at 1 of slot 0's two blocks", snap)
	}
	// Missed while away: replayed from the cursor, in order.
	j.SetSlot(1, "bob", []int{9, 9, 9, 9})
	j.SetSlot(0, "alice", []int{1, 2, 3, 4})
	j.SetSlot(2, "alice", []int{5, 5, 5, 5})
	resumed := follow(t, ts, kvcache.Cursor{Epoch: snap.Epoch, After: 1}, 3)
	var seqs []uint64
	for _, ev := range resumed {
		seqs = append(seqs, ev.Seq)
	}
	if !slices.Equal(seqs, []uint64{2, 3, 4}) || resumed[0].Type != kvcache.EventStored || resumed[1].Type != kvcache.EventRemoved {
		t.Fatalf("resumed after 1: %+v, want stored 2, removed 3, stored 4", resumed)
	}
	// Another epoch (a restarted node): a snapshot of everything instead.
	got = follow(t, ts, kvcache.Cursor{Epoch: "gone", After: 2}, 1)
	if got[0].Type != kvcache.EventSnapshot || len(got[0].Slots) != 3 {
		t.Fatalf("resume from another epoch: %+v, want a snapshot of 3 slots", got[0])
	}
	// The server shutting down ends its streams.
	b, err := llamaserver.New(llamaserver.Config{BaseURL: ts.URL, APIKey: adminKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ended := make(chan error)
	go func() {
		ended <- b.FollowResidency(context.Background(), kvcache.Cursor{}, func(kvcache.JournalEvent) error {
			s.EndStreams()
			return nil
		})
	}()
	if err := <-ended; err == nil {
		t.Fatal("a stream the server ended returned no error")
	}
}
