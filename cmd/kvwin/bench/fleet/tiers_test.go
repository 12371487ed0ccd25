package fleet

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"kvwin/kvcache"
)

// tierConv is a conversation of two turns whose first prompt is tokens
// from first on: 400 tokens of prompt, 20 of answer, then 40 more of
// prompt after think.
func tierConv(first int, start, think time.Duration) *conversation {
	return &conversation{stream: seq(first, 520), promptEnd: []int{400, 460}, answerEnd: []int{420, 480},
		think: []time.Duration{think, 0}, start: start}
}

// runTurns runs convs on cfg and returns each turn by (conversation, turn).
func runTurns(t *testing.T, cfg Config, convs ...*conversation) map[[2]int]*turnRecord {
	t.Helper()
	out, err := run(context.Background(), cfg, convs)
	if err != nil {
		t.Fatal(err)
	}
	turns := map[[2]int]*turnRecord{}
	for _, r := range out.turns {
		if r.err != nil {
			t.Fatal(r.err)
		}
		turns[[2]int{r.ci, r.index}] = r
	}
	return turns
}

// One node of one slot: a's slot is taken by b while a thinks. With
// tiers, a's KV is saved to RAM when b takes the slot, and a's next turn
// restores it and computes only its new tokens (460 − 419); without, it
// computes its whole prompt again.
func TestAReturningConversationRestoresFromRAMNotRecompute(t *testing.T) {
	for _, tiers := range []Tiers{DefaultTiers(), {}} {
		cfg := Config{Nodes: 1, Slots: 1, Context: 4096, Kind: KindKvwin, Policy: "prefix", Model: DefaultNodeModel(), Tiers: tiers}
		turns := runTurns(t, cfg, tierConv(1, 0, 30*time.Second), tierConv(100_000, 10*time.Second, time.Hour))
		a1 := turns[[2]int{0, 1}]
		switch {
		case tiers.On() && (a1.restored != 419 || a1.restoredFrom != kvcache.MediumRAM || a1.computed != 460-419):
			t.Errorf("with tiers: a's return restored %d tokens from %v and computed %d; want 419 from RAM, %d computed", a1.restored, a1.restoredFrom, a1.computed, 460-419)
		case !tiers.On() && (a1.restored != 0 || a1.computed != 460):
			t.Errorf("without tiers: a's return restored %d and computed %d; want nothing restored, 460 computed", a1.restored, a1.computed)
		}
		// The restore is read whole at the RAM tier's speed, in the
		// turn's time to first token (simulated time).
		if tiers.On() {
			m := cfg.Model
			restore := time.Duration(float64(419*m.KVBytesPerToken) / m.RestoreBytes[kvcache.MediumRAM] * float64(time.Second))
			if want := restore + m.prefill(460-419, 419); a1.first-a1.arrived != want {
				t.Errorf("a's return: first token after %v, want %v (restore %v + prefill)", a1.first-a1.arrived, want, restore)
			}
		}
	}
}

// Two nodes of one slot, three conversations: some take another's slot
// while its user thinks. The router sends an evicted conversation back to
// the node holding its snapshot (a restore) rather than to the other node,
// which would recompute it; every returning turn reuses all it had.
func TestTheRouterSendsAReturnToTheNodeHoldingItsSnapshot(t *testing.T) {
	cfg := Config{Nodes: 2, Slots: 1, Context: 4096, Kind: KindKvwin, Policy: "prefix", Model: DefaultNodeModel(), Tiers: DefaultTiers()}
	turns := runTurns(t, cfg, tierConv(1, 0, 30*time.Second), tierConv(100_000, time.Second, 30*time.Second),
		tierConv(200_000, 10*time.Second, time.Hour))
	restored := 0
	for ci := range 3 {
		first, next := turns[[2]int{ci, 0}], turns[[2]int{ci, 1}]
		if next.cached < 419 {
			t.Errorf("conversation %d: its return on %s reused %d tokens (first turn on %s), want 419", ci, next.backend, next.cached, first.backend)
		}
		if next.restored > 0 {
			restored++
			if next.backend != first.backend {
				t.Errorf("conversation %d restored on %s, its snapshot was saved on %s", ci, next.backend, first.backend)
			}
		}
	}
	if restored == 0 {
		t.Error("no return restored a snapshot; three conversations on two slots, one was evicted")
	}
}

// The store's rules: a new snapshot goes to RAM; RAM over the tenant's
// share (half of it, one tenant) demotes the least recently used to disk;
// disk over its budget evicts its least recently used; a snapshot marked
// used (saved again) is kept over older ones; and the journal says each.
func TestRAMOverflowDemotesToDiskAndDiskOverflowEvicts(t *testing.T) {
	// Snapshots of 300 tokens: two in RAM, two on disk.
	st, sub := smallStore(t)
	for c := range 3 {
		st.save(c, "t", seq(1000*c+1, 300))
	}
	want := map[string]kvcache.Medium{"0/300": kvcache.MediumDisk, "1/300": kvcache.MediumRAM, "2/300": kvcache.MediumRAM}
	check := func(step string) {
		t.Helper()
		if len(st.files) != len(want) {
			t.Errorf("%s: %d snapshots, want %d", step, len(st.files), len(want))
		}
		for id, m := range want {
			if f := st.files[id]; f == nil || f.medium != m {
				t.Errorf("%s: snapshot %s: %+v, want in %v", step, id, f, m)
			}
		}
	}
	check("three saved")
	st.save(1, "t", seq(1001, 300)) // conversation 1's again: marked used
	st.save(3, "t", seq(3001, 300)) // demotes 2 (not 1), disk holds 0 and 2
	want = map[string]kvcache.Medium{"0/300": kvcache.MediumDisk, "2/300": kvcache.MediumDisk, "1/300": kvcache.MediumRAM, "3/300": kvcache.MediumRAM}
	check("four saved")
	st.save(4, "t", seq(4001, 300)) // demotes 1; disk evicts 0
	want = map[string]kvcache.Medium{"2/300": kvcache.MediumDisk, "1/300": kvcache.MediumDisk, "3/300": kvcache.MediumRAM, "4/300": kvcache.MediumRAM}
	check("five saved")
	if st.ramBytes != 600 || st.diskBytes != 600 {
		t.Errorf("tiers hold %d and %d bytes, want 600 and 600", st.ramBytes, st.diskBytes)
	}
	var got []string
	for len(sub.C()) > 0 {
		ev := <-sub.C()
		got = append(got, ev.Type+" "+ev.Saved.ID+" "+ev.Saved.Tier.String())
	}
	wantEvents := []string{"snapshot_stored 0/300 ram", "snapshot_stored 1/300 ram", "snapshot_stored 2/300 ram", "snapshot_stored 0/300 disk",
		"snapshot_stored 3/300 ram", "snapshot_stored 2/300 disk", "snapshot_stored 4/300 ram", "snapshot_stored 1/300 disk", "snapshot_removed 0/300 ram"}
	if strings.Join(got, "; ") != strings.Join(wantEvents, "; ") {
		t.Errorf("journal:\n got %s\nwant %s", strings.Join(got, "; "), strings.Join(wantEvents, "; "))
	}
}

// smallStore is a store of 1 byte a token, RAM 1,200 (600 for the one
// tenant) and disk 600, and a subscription to its journal from its start.
func smallStore(t *testing.T) (*snapshotStore, *kvcache.Subscription) {
	t.Helper()
	j, err := kvcache.NewJournal(kvcache.JournalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sub := j.Subscribe(kvcache.Cursor{})
	sub.Pending()
	return newSnapshotStore(Tiers{RAMBytes: 1200, DiskBytes: 600}, 1, j), sub
}

// A conversation saved again after it went on drops its older snapshot,
// from either tier, as the node's store does; another conversation's
// snapshot of the same tokens stays.
func TestASaveDropsTheSnapshotsItExtends(t *testing.T) {
	st, sub := smallStore(t)
	st.save(0, "t", seq(1, 300))
	st.save(1, "t", seq(1, 300))    // another conversation's same tokens
	st.save(2, "t", seq(2001, 300)) // demotes 0/300 to disk
	st.save(0, "t", seq(1, 400))    // extends 0/300: dropped from disk; 1 and 2 demoted
	want := map[string]kvcache.Medium{"0/400": kvcache.MediumRAM, "1/300": kvcache.MediumDisk, "2/300": kvcache.MediumDisk}
	if len(st.files) != len(want) {
		t.Errorf("%d snapshots, want %d", len(st.files), len(want))
	}
	for id, m := range want {
		if f := st.files[id]; f == nil || f.medium != m {
			t.Errorf("snapshot %s: %+v, want in %v", id, f, m)
		}
	}
	if st.ramBytes != 400 || st.diskBytes != 600 {
		t.Errorf("tiers hold %d and %d bytes, want 400 and 600", st.ramBytes, st.diskBytes)
	}
	var removed []string
	for len(sub.C()) > 0 {
		if ev := <-sub.C(); ev.Type == kvcache.EventSavedRemoved {
			removed = append(removed, ev.Saved.ID)
		}
	}
	if !slices.Equal(removed, []string{"0/300"}) {
		t.Errorf("the journal removed %v, want [0/300]", removed)
	}
}

// Without a RAM tier the snapshots go to disk and the returns restore
// from there, as the report counts them: a's, and b's an hour on (a took
// its slot back).
func TestRestoresFromDiskAreCounted(t *testing.T) {
	cfg := Config{Nodes: 1, Slots: 1, Context: 4096, Kind: KindKvwin, Policy: "prefix", Model: DefaultNodeModel(), Tiers: Tiers{DiskBytes: DefaultDiskTier}}
	turns := runTurns(t, cfg, tierConv(1, 0, 30*time.Second), tierConv(100_000, 10*time.Second, time.Hour))
	if a1 := turns[[2]int{0, 1}]; a1.restored != 419 || a1.restoredFrom != kvcache.MediumDisk {
		t.Errorf("a's return restored %d tokens from %v, want 419 from disk", a1.restored, a1.restoredFrom)
	}
	all := []*turnRecord{turns[[2]int{0, 0}], turns[[2]int{1, 0}], turns[[2]int{0, 1}], turns[[2]int{1, 1}]} // as they arrived
	r := summarize(all, cfg, 0.2)
	if r.RestoresDisk != 2 || r.RestoresRAM != 0 || r.RestoredTokensDisk != 2*419 || r.Tiers != "ram0+disk16384" {
		t.Errorf("row: %+v; want two restores of 419 tokens from disk, tiers ram0+disk16384", r)
	}
	// Each return computes what the oracle's does: its new tokens and the
	// previous answer's end token, which no backend computed into KV.
	if len(r.Excess) != 0 {
		t.Errorf("excess by cause %v, want none", r.Excess)
	}
}

// Without tiers the excess is told apart too: on one llama-server slot, b's
// first turn takes a's slot while a thinks, so a's return finds its KV
// lost and computes it again on its node; b's return, after a's, likewise.
func TestExcessWithoutTiers(t *testing.T) {
	cfg := Config{Nodes: 1, Slots: 1, Context: 4096, Kind: KindLlamaServer, Policy: "prefix", Model: DefaultNodeModel()}
	turns := runTurns(t, cfg, tierConv(1, 0, 30*time.Second), tierConv(100_000, 10*time.Second, time.Hour))
	all := []*turnRecord{turns[[2]int{0, 0}], turns[[2]int{1, 0}], turns[[2]int{0, 1}], turns[[2]int{1, 1}]} // as they arrived
	r := summarize(all, cfg, 0.2)
	// Each return computes its whole prompt (460 tokens) where the oracle
	// computes the 41 past its previous prompt and answer (the answer's
	// end token, never computed into KV, among them): 419 more each.
	if want := map[string]int{"return, its KV in lost, sent back to its node": 2 * 419}; !maps.Equal(r.Excess, want) {
		t.Errorf("excess by cause %v, want %v", r.Excess, want)
	}
}

// Restores per tier per policy appear in the table, the CSV and the JSON
// with tiers; without, the CSV has exactly its columns of before.
func TestReportCountsRestoresPerTierPerPolicy(t *testing.T) {
	o := smallOptions(KindKvwin, "prefix", "dynamo")
	o.Workload.Conversations = 120
	o.Tiers, o.WithoutTiers = DefaultTiers(), true
	rows, err := Bench(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: two policies with tiers and without", len(rows))
	}
	for _, r := range rows {
		switch {
		case r.Tiers == "ram4096+disk16384" && r.RestoresRAM == 0:
			t.Errorf("%s with tiers restored nothing from RAM: %+v", r.Policy, r)
		case r.Tiers == "" && r.RestoresRAM+r.RestoresDisk > 0:
			t.Errorf("%s without tiers restored: %+v", r.Policy, r)
		}
	}
	var table, csv, js bytes.Buffer
	PrintTable(&table, rows)
	if err := WriteCSV(&csv, rows); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, rows); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"table": table.String(), "csv": csv.String(), "json": js.String()} {
		if !strings.Contains(s, "ram4096+disk16384") || !strings.Contains(strings.ReplaceAll(s, " ", "_"), "rest") {
			t.Errorf("%s shows no tiers or restores:\n%s", name, s)
		}
	}
	csv.Reset()
	if err := WriteCSV(&csv, rows[2:]); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(csv.String(), "\n"); head != strings.Join(csvHeader, ",") {
		t.Errorf("CSV of rows without tiers: header %q", head)
	}
}

// The router holds what the nodes' journals publish, tier by tier, as a
// gateway does (router.Status): after the store above's saves and
// demotions, a node's two snapshots in RAM and one on disk.
func TestTheRouterSeesEachNodesSnapshotsByTier(t *testing.T) {
	m := DefaultNodeModel()
	m.KVBytesPerToken = 1
	cfg := Config{Nodes: 1, Slots: 1, Context: 4096, Kind: KindKvwin, Policy: "prefix", Model: m, Tiers: Tiers{RAMBytes: 2000, DiskBytes: 1000}}
	s, err := newSim(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.router.Close()
	// 419 bytes each: RAM (1,000 for the one tenant) holds two.
	for c := range 3 {
		s.nodes[0].store.save(c, "default", seq(1000*c+1, 419))
	}
	s.flush()
	st := s.router.Status()
	if got := st[0].Saved; got["ram"] != 2 || got["disk"] != 1 {
		t.Errorf("router sees the node's snapshots as %v, want 2 in RAM and 1 on disk", got)
	}
}
