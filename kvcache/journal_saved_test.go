package kvcache

import (
	"encoding/json"
	"slices"
	"testing"
)

// Snapshot events: stored in RAM, moved to disk without its tokens again,
// removed; a mirror that follows them, through JSON as a gateway reads
// them, holds what the node's store holds, and a restarted node's
// snapshot event (another epoch) empties what the mirror held in RAM.
func TestJournalSavedEventsAndMirror(t *testing.T) {
	j := newTestJournal(t, JournalConfig{})
	mirror := NewMirror()
	sub := j.Subscribe(Cursor{})
	defer sub.Close()
	apply := func(evs []JournalEvent) {
		t.Helper()
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var back JournalEvent
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if _, err := mirror.Apply(back); err != nil {
				t.Fatalf("apply %s: %v", b, err)
			}
		}
	}
	apply(drain(sub))
	j.SetSaved(SavedTokens{ID: "a", Tenant: "t", Tier: MediumRAM, Bytes: 100, Tokens: seqTokens(0, 10)})
	j.SetSaved(SavedTokens{ID: "b", Tenant: "t", Tier: MediumRAM, Bytes: 100, Tokens: seqTokens(50, 8)})
	j.SetSaved(SavedTokens{ID: "a", Tier: MediumDisk}) // demoted
	j.SetSaved(SavedTokens{ID: "x", Tier: MediumDisk}) // never stored: nothing
	j.RemoveSaved("b")
	j.RemoveSaved("b") // gone already: nothing
	evs := drain(sub)
	if len(evs) != 4 || evs[2].Saved.Tokens != nil || evs[2].Saved.Tier != MediumDisk {
		t.Fatalf("events %+v", evs)
	}
	apply(evs)
	if got := mirror.SavedChanges(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("changed %v", got)
	}
	a, ok := mirror.Saved("a")
	if _, held := mirror.Saved("b"); !ok || held || a.Tier != MediumDisk || a.Tenant != "t" || !slices.Equal(a.Tokens, seqTokens(0, 8)) {
		t.Fatalf("mirror holds a=%+v (%v), b held %v", a, ok, held)
	}

	j.SetRestoreSpeed(RestoreSpeed{RAM: 40000, Disk: 30000})
	j.SetRestoreSpeed(RestoreSpeed{RAM: 40000, Disk: 30000}) // no change: nothing
	if evs := drain(sub); len(evs) != 1 {
		t.Fatalf("restore speed events %+v, want one", evs)
	} else {
		apply(evs)
	}
	if got := mirror.RestoreSpeed(); got.Of(MediumRAM) != 40000 || got.Of(MediumDisk) != 30000 {
		t.Fatalf("mirror's restore speed %+v", got)
	}

	// The node restarts: a new journal, RAM empty, the disk snapshot found again.
	j.SetSaved(SavedTokens{ID: "c", Tenant: "t", Tier: MediumRAM, Tokens: seqTokens(90, 4)})
	apply(drain(sub))
	restarted := newTestJournal(t, JournalConfig{})
	restarted.SetSaved(SavedTokens{ID: "a", Tenant: "t", Tier: MediumDisk, Tokens: seqTokens(0, 8)})
	mirror.SavedChanges()
	resumed := restarted.Subscribe(mirror.Cursor()) // another epoch: a snapshot
	defer resumed.Close()
	apply(drain(resumed))
	if _, held := mirror.Saved("c"); held || !slices.Equal(mirror.SavedChanges(), []string{"a", "c"}) {
		t.Fatalf("after the restart the mirror still holds the RAM snapshot c (%v)", held)
	}
	if mirror.RestoreSpeed() != (RestoreSpeed{}) {
		t.Fatalf("after the restart the mirror keeps the old node's restore speed %+v", mirror.RestoreSpeed())
	}
}
