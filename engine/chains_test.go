package engine

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"testing"
)

// chainStep is a hash chain step that counts its calls.
func chainStep(calls *int) func(uint64, Message) uint64 {
	return func(k uint64, m Message) uint64 {
		*calls++
		h := fnv.New64a()
		fmt.Fprintf(h, "%d\x00%s\x00%s", k, m.Role, m.Content)
		return h.Sum64()
	}
}

func plainKeys(root uint64, msgs []Message) []uint64 {
	calls := 0
	next := chainStep(&calls)
	keys := []uint64{root}
	for _, m := range msgs {
		keys = append(keys, next(keys[len(keys)-1], m))
	}
	return keys
}

func chainMessages(n int, tag string) []Message {
	var out []Message
	for i := 0; i < n; i++ {
		out = append(out, Message{Role: []string{RoleUser, RoleAssistant}[i%2], Content: fmt.Sprintf("%s message %d", tag, i)})
	}
	return out
}

// A list that continues a remembered one is hashed only past it, and every
// key is the plain chain's, whatever the caller does to its list after.
func TestChainsHashOnlyWhatIsNew(t *testing.T) {
	var c Chains[uint64]
	calls := 0
	next := chainStep(&calls)
	msgs := chainMessages(200, "a")
	if got := c.Keys("t1", 7, msgs, next); !slices.Equal(got, plainKeys(7, msgs)) || calls != 200 {
		t.Fatalf("first list: %d steps, keys equal %v", calls, slices.Equal(got, plainKeys(7, msgs)))
	}
	// The next turn: two messages more, in a new slice of the same strings.
	longer := append(slices.Clone(msgs), Message{Role: RoleAssistant, Content: "answer"}, Message{Role: RoleUser, Content: "ask"})
	calls = 0
	if got := c.Keys("t1", 7, longer, next); !slices.Equal(got, plainKeys(7, longer)) || calls != 3 {
		t.Fatalf("continued list: %d steps (want 3: the first message and the two new), keys equal %v", calls, slices.Equal(got, plainKeys(7, longer)))
	}
	// The caller changes its list in place (a recalled call's text): the
	// memo holds its own copy, and the changed message is hashed anew.
	longer[100].Content = "edited"
	calls = 0
	if got := c.Keys("t1", 7, longer, next); !slices.Equal(got, plainKeys(7, longer)) || calls != 1+len(longer)-100 {
		t.Fatalf("list edited at 100: %d steps, keys equal %v", calls, slices.Equal(got, plainKeys(7, longer)))
	}
	// Another owner with the same messages reads nothing of t1's.
	calls = 0
	if got := c.Keys("t2", 7, longer, next); !slices.Equal(got, plainKeys(7, longer)) || calls != len(longer) {
		t.Fatalf("another owner: %d steps, want %d", calls, len(longer))
	}
	// Another root: its own chain.
	if got := c.Keys("t1", 8, longer, next); !slices.Equal(got, plainKeys(8, longer)) {
		t.Fatal("another root reused the first's keys")
	}
	// Short lists are not remembered.
	short := chainMessages(MinChainMessages-1, "s")
	c.Keys("t1", 7, short, next)
	calls = 0
	c.Keys("t1", 7, short, next)
	if calls != len(short) {
		t.Fatalf("short list hashed in %d steps the second time, want all %d", calls, len(short))
	}
}

// Chains holds at most maxChains lists.
func TestChainsAreBounded(t *testing.T) {
	var c Chains[uint64]
	calls := 0
	next := chainStep(&calls)
	for i := 0; i < maxChains+10; i++ {
		c.Keys("t", 1, chainMessages(MinChainMessages, fmt.Sprint(i)), next)
	}
	if len(c.held) != maxChains || len(c.order) != maxChains {
		t.Fatalf("%d lists held (%d in order), want %d", len(c.held), len(c.order), maxChains)
	}
	calls = 0
	c.Keys("t", 1, chainMessages(MinChainMessages, "0"), next) // the oldest, let go
	if calls != MinChainMessages {
		t.Fatalf("the oldest list hashed in %d steps, want all %d", calls, MinChainMessages)
	}
}

// Requests of one owner that branch from each other at once (a retry, an
// edit of an old message) each get their own list's keys, whatever the
// others left remembered.
func TestChainsBranchingAtOnce(t *testing.T) {
	var c Chains[uint64]
	base := chainMessages(3*MinChainMessages, "b")
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := 0
			next := chainStep(&calls)
			for i := 0; i < 200; i++ {
				msgs := slices.Clone(base[:MinChainMessages+(g*7+i)%(2*MinChainMessages)])
				if i%3 == 0 { // a branch: one old message edited
					at := 1 + (g+i)%(len(msgs)-1)
					msgs[at].Content = fmt.Sprintf("edit %d %d", g, i)
				}
				if got := c.Keys("t", 3, msgs, next); !slices.Equal(got, plainKeys(3, msgs)) {
					errs <- fmt.Sprintf("goroutine %d, list %d: keys differ from the plain chain's", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// A list is appended to what it was compared with only if nothing changed
// it meanwhile: here another request's list, branching earlier, replaced it
// between the compare and the remember, and a list made of that request's
// head and the first's tail must still get its own keys.
func TestChainsRememberOnlyWhatWasCompared(t *testing.T) {
	var c Chains[uint64]
	calls := 0
	next := chainStep(&calls)
	a := chainMessages(2*MinChainMessages, "a")
	c.Keys("t", 1, a, next)
	slot := chainSlot[uint64]{owner: "t", first: next(1, a[0])}
	// Request b continues a; it compares (as Keys does) and hashes...
	b := append(slices.Clone(a), Message{Role: RoleUser, Content: "b's ask"})
	compared, version := c.held[slot], c.held[slot].version
	keysB := plainKeys(1, b)
	// ...while request cc, which edits message 10, is remembered.
	cc := slices.Clone(a)
	cc[10].Content = "edited"
	c.Keys("t", 1, cc, next)
	c.remember(slot, b, keysB, compared, version, len(a))
	// cc's head with b's tail: every key its own.
	d := append(slices.Clone(cc), b[len(a)])
	if got := c.Keys("t", 1, d, next); !slices.Equal(got, plainKeys(1, d)) {
		t.Fatal("a list matching a mixed memory got another list's keys")
	}
}
