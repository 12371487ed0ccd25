package memory

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

// settleCorpora are the package's test conversations: the team's moves and
// pets, the club's instruments and sports with updates worded every way the
// supersession tests word them, and the benchmarks' chatter and assistant
// answers.
func settleCorpora() map[string][]Turn {
	updates := []string{
		"Small change: Omar has switched and now plays the harp instead.", "These days it's the harp for Omar.",
		"Bumped into Omar at the station. He plays the cello now, apparently.", "Update: Omar has moved on to the clarinet.",
		"I spoke to Sofia yesterday: she's switched to the harp.", "Omar's instrument went from the banjo to the harp last month.",
		"Kenji swapped the cello for the banjo.", "Omar switched to judo this spring.", "Priya gave up rowing; it's fencing these days.",
		"Omar's sister plays the harp now.", "Omar might switch to the harp one day.", "Lena plays the trombone in the evening band.",
		"Ravi trains for curling twice a week.", "Ravi isn't doing curling anymore, he's into sailing.",
	}
	club := club()
	for i, u := range updates {
		at := 20 + i*6
		club = slices.Insert(club, at, u, "Noted.")
	}
	return map[string][]Turn{
		"team":      team(40),
		"club":      chatTurns(club...),
		"chatter":   bigConversation(1500),
		"assistant": assistantConversation(200),
	}
}

// TestSettleExtendsAsRebuilt: whatever the batches turns are added in, in
// order or not, finish's state after extending is the state a rebuild from
// every statement gives, and extensions do happen (a conversation that adds
// a turn and asks does not pay for its whole history).
func TestSettleExtendsAsRebuilt(t *testing.T) {
	for name, turns := range settleCorpora() {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				extended := settleCompare(t, turns, seed)
				t.Logf("%d finishes extended the analysis", extended)
				if extended == 0 {
					t.Errorf("no finish extended the analysis")
				}
			})
		}
	}
}

// FuzzSettle is TestSettleExtendsAsRebuilt over random batchings.
func FuzzSettle(f *testing.F) {
	corpora := settleCorpora()
	names := []string{"team", "club", "chatter", "assistant"}
	f.Add(int64(7), uint8(1))
	f.Fuzz(func(t *testing.T, seed int64, corpus uint8) {
		turns := corpora[names[int(corpus)%len(names)]]
		settleCompare(t, turns[:min(len(turns), 400)], seed)
	})
}

// settleCompare adds turns to two analyses in the same random batches
// (mostly in order, now and then an earlier turn held back and added
// later), finishing after each: one as finish does, one always rebuilt;
// it fails t where their states differ and returns the number of
// extensions.
func settleCompare(t *testing.T, turns []Turn, seed int64) int {
	r := rand.New(rand.NewSource(seed))
	got, want := newFacts(), newFacts()
	var held []Turn
	for i := 0; i < len(turns); {
		n := 1 + r.Intn(4)
		if r.Intn(3) == 0 {
			n = 1 + r.Intn(40)
		}
		batch := slices.Clone(turns[i:min(i+n, len(turns))])
		i += len(batch)
		switch r.Intn(30) {
		case 0: // hold one back
			held = append(held, batch[0])
			batch = batch[1:]
		case 1: // add those held back, out of order
			batch, held = append(batch, held...), nil
		}
		if i >= len(turns) {
			batch, held = append(batch, held...), nil
		}
		got.add(batch)
		want.add(batch)
		got.finish()
		want.settle.rebuild = true // as new names would
		want.finish()
		if diff := settleDiff(got, want); diff != "" {
			t.Fatalf("after %d turns: extended state differs from rebuilt: %s", i, diff)
		}
	}
	if want.settle.extended != 0 {
		t.Fatalf("the rebuilt analysis extended %d times", want.settle.extended)
	}
	return got.settle.extended
}

// settleDiff names the first part of finish's state where a and b differ.
func settleDiff(a, b *facts) string {
	sorted := func(m map[string][]int) map[string][]int {
		out := map[string][]int{}
		for k, v := range m {
			out[k] = slices.Sorted(slices.Values(v))
		}
		return out
	}
	for _, c := range []struct {
		name string
		a, b any
	}{
		{"cluster", a.cluster, b.cluster},
		{"general", a.general, b.general},
		{"attribute", a.attribute, b.attribute},
		{"byTurn", a.byTurn, b.byTurn},
		{"bySubject", a.bySubject, b.bySubject},
		{"history", a.history, b.history},
		{"values", a.values, b.values},
		{"stated", a.stated, b.stated},
		{"clustersOf", sorted(a.clustersOf), sorted(b.clustersOf)},
		{"work", a.settle.work, b.settle.work},
		{"firstN", a.settle.firstN, b.settle.firstN},
	} {
		if !reflect.DeepEqual(c.a, c.b) {
			return c.name
		}
	}
	return ""
}
