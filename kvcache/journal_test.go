package kvcache

import (
	"errors"
	"slices"
	"testing"
)

func newTestJournal(t *testing.T, cfg JournalConfig) *Journal {
	t.Helper()
	if cfg.BlockTokens == 0 {
		cfg.BlockTokens = 4
	}
	j, err := NewJournal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func seqTokens(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// drain reads what s has now: its pending events, then its channel until
// empty.
func drain(s *Subscription) []JournalEvent {
	out := s.Pending()
	for {
		select {
		case ev, ok := <-s.C():
			if !ok {
				return out
			}
			out = append(out, ev)
		default:
			return out
		}
	}
}

func TestJournalEventsPerSlot(t *testing.T) {
	j := newTestJournal(t, JournalConfig{})
	sub := j.Subscribe(Cursor{})
	defer sub.Close()
	j.SetSlot(0, "a", seqTokens(0, 10))                              // 2 full blocks
	j.SetSlot(0, "a", append(seqTokens(0, 8), seqTokens(100, 5)...)) // keeps 2, adds 1
	j.SetSlot(0, "a", seqTokens(0, 4))                               // drops from block 1
	j.SetSlot(0, "b", seqTokens(0, 4))                               // another tenant: all of it again
	j.SetSlot(0, "b", seqTokens(0, 4))                               // no change: nothing
	j.SetSlot(0, "", nil)                                            // cleared
	j.SetLoad(Load{Running: 1, Waiting: 2})
	j.SetLoad(Load{Running: 1, Waiting: 2}) // no change: nothing
	got := drain(sub)
	type ev struct {
		typ    string
		from   int
		tenant string
		tokens int
	}
	want := []ev{{EventSnapshot, 0, "", 0}, {EventStored, 0, "a", 8}, {EventStored, 2, "a", 4}, {EventRemoved, 1, "", 0},
		{EventRemoved, 0, "", 0}, {EventStored, 0, "b", 4}, {EventRemoved, 0, "", 0}, {EventLoad, 0, "", 0}}
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.typ || g.FromBlock != w.from || g.Tenant != w.tenant || len(g.Tokens) != w.tokens || g.Seq != uint64(i) || g.Epoch != j.Epoch() {
			t.Errorf("event %d = %+v, want %+v with seq %d", i, g, w, i)
		}
	}
	if l := got[len(got)-1].Load; l == nil || *l != (Load{Running: 1, Waiting: 2}) {
		t.Errorf("load event %+v", l)
	}
}

func TestJournalMirrorFollows(t *testing.T) {
	j := newTestJournal(t, JournalConfig{})
	j.SetSlot(1, "a", seqTokens(0, 12)) // before the subscriber: in its snapshot
	sub := j.Subscribe(Cursor{})
	defer sub.Close()
	j.SetSlot(1, "a", append(seqTokens(0, 4), seqTokens(50, 9)...))
	j.SetSlot(2, "b", seqTokens(7, 16))
	j.SetSlot(3, "c", seqTokens(9, 8))
	j.SetSlot(3, "", nil)
	m := NewMirror()
	for _, ev := range drain(sub) {
		if _, err := m.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int]SlotTokens{
		1: {Slot: 1, Tenant: "a", Tokens: append(seqTokens(0, 4), seqTokens(50, 8)...)},
		2: {Slot: 2, Tenant: "b", Tokens: seqTokens(7, 16)},
		3: {Slot: 3},
	}
	for s, w := range want {
		if g := m.Slot(s); g.Tenant != w.Tenant || !slices.Equal(g.Tokens, w.Tokens) {
			t.Errorf("slot %d = %+v, want %+v", s, g, w)
		}
	}
	if c := m.Cursor(); c.Epoch != j.Epoch() || c.After != 6 {
		t.Errorf("cursor %+v, want after 6 of %s", c, j.Epoch())
	}
}

func TestJournalResume(t *testing.T) {
	j := newTestJournal(t, JournalConfig{History: 4})
	for i := range 3 {
		j.SetSlot(i, "a", seqTokens(i, 4)) // seq 1..3
	}
	other := newTestJournal(t, JournalConfig{})
	cases := []struct {
		name     string
		cursor   Cursor
		wantSeqs []uint64
		snapshot bool
	}{
		{"resume within the history", Cursor{Epoch: j.Epoch(), After: 1}, []uint64{2, 3}, false},
		{"resume at the end", Cursor{Epoch: j.Epoch(), After: 3}, nil, false},
		{"no cursor", Cursor{}, []uint64{3}, true},
		{"another epoch (the node restarted)", Cursor{Epoch: other.Epoch(), After: 1}, []uint64{3}, true},
		{"ahead of the journal", Cursor{Epoch: j.Epoch(), After: 9}, []uint64{3}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := j.Subscribe(c.cursor)
			defer sub.Close()
			got := drain(sub)
			var seqs []uint64
			for _, ev := range got {
				seqs = append(seqs, ev.Seq)
			}
			if !slices.Equal(seqs, c.wantSeqs) || (len(got) > 0 && (got[0].Type == EventSnapshot) != c.snapshot) {
				t.Errorf("got %+v, want seqs %v (snapshot %v)", got, c.wantSeqs, c.snapshot)
			}
			if c.snapshot && len(got[0].Slots) != 3 {
				t.Errorf("snapshot holds %d slots, want 3", len(got[0].Slots))
			}
		})
	}
	// Past the history (4 events): seq 1 is gone, resuming after it needs
	// a snapshot; after 2 is still a replay.
	j.SetSlot(0, "a", nil) // seq 4
	j.SetSlot(1, "a", nil) // seq 5
	if got := drain(j.Subscribe(Cursor{Epoch: j.Epoch(), After: 0})); len(got) != 1 || got[0].Type != EventSnapshot || got[0].Seq != 5 {
		t.Errorf("resume from a seq the history lost: %+v, want a snapshot at 5", got)
	}
	if got := drain(j.Subscribe(Cursor{Epoch: j.Epoch(), After: 1})); len(got) != 4 || got[0].Seq != 2 {
		t.Errorf("resume at the oldest kept: %+v, want seqs 2..5", got)
	}
}

func TestMirrorRefusesGap(t *testing.T) {
	j := newTestJournal(t, JournalConfig{})
	sub := j.Subscribe(Cursor{})
	j.SetSlot(0, "a", seqTokens(0, 4))
	j.SetSlot(0, "a", seqTokens(0, 8))
	evs := drain(sub)
	m := NewMirror()
	if _, err := m.Apply(evs[1]); !errors.Is(err, ErrJournalGap) {
		t.Fatalf("an event before any snapshot: %v, want ErrJournalGap", err)
	}
	if _, err := m.Apply(evs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(evs[2]); !errors.Is(err, ErrJournalGap) {
		t.Fatalf("seq 2 after 0: %v, want ErrJournalGap", err)
	}
	if len(m.Slot(0).Tokens) != 0 || m.Cursor().After != 0 {
		t.Fatalf("a refused event changed the mirror: %+v %+v", m.Slot(0), m.Cursor())
	}
	// Resync: a fresh subscription from the mirror's cursor replays 1..2.
	for _, ev := range drain(j.Subscribe(m.Cursor())) {
		if _, err := m.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(m.Slot(0).Tokens, seqTokens(0, 8)) {
		t.Errorf("after resync slot 0 = %v", m.Slot(0).Tokens)
	}
}

func TestJournalDropsSlowSubscriber(t *testing.T) {
	j := newTestJournal(t, JournalConfig{Buffer: 2})
	slow := j.Subscribe(Cursor{})
	fast := j.Subscribe(Cursor{})
	slow.Pending()
	fast.Pending()
	var fastGot []JournalEvent
	for i := range 5 {
		j.SetSlot(i, "a", seqTokens(i, 4)) // never blocks, whoever reads
		fastGot = append(fastGot, drain(fast)...)
	}
	if len(fastGot) != 5 || fast.Err() != nil {
		t.Fatalf("a subscriber keeping up got %d events (err %v), want 5", len(fastGot), fast.Err())
	}
	got := drain(slow) // what it had room for, then the closed channel
	if len(got) != 2 || !errors.Is(slow.Err(), ErrSubscriberDropped) {
		t.Fatalf("slow subscriber: %d events, err %v; want 2 then dropped", len(got), slow.Err())
	}
	// It resumes after its last event: a replay of the rest.
	m := NewMirror()
	resumed := drain(j.Subscribe(Cursor{Epoch: j.Epoch(), After: got[1].Seq}))
	if len(resumed) != 3 || resumed[0].Seq != 3 {
		t.Fatalf("resumed with %+v, want seqs 3..5", resumed)
	}
	for _, ev := range drain(j.Subscribe(Cursor{})) {
		m.Apply(ev)
	}
	for i := range 5 {
		if !slices.Equal(m.Slot(i).Tokens, seqTokens(i, 4)) {
			t.Errorf("slot %d = %v after resync", i, m.Slot(i).Tokens)
		}
	}
	slow.Close() // closing a dropped subscription is safe
	fast.Close()
	fast.Close()
}

func TestJournalConfig(t *testing.T) {
	for _, cfg := range []JournalConfig{{BlockTokens: -1}, {History: -1}, {Buffer: -2}, {BlockTokens: 5000}} {
		if _, err := NewJournal(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewJournal(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
