package memory

import (
	"fmt"
	"testing"

	"kvwin/window/memory/pgtest"
)

// eachBackend runs f once per database the store runs on, each time with a
// place of its own: a SQLite file in a fresh directory, and a fresh schema
// of the PostgreSQL test server (pgtest: skipped without one outside CI).
func eachBackend(t *testing.T, f func(t *testing.T, at StoreConfig)) {
	t.Run("sqlite", func(t *testing.T) { f(t, StoreConfig{Dir: t.TempDir()}) })
	t.Run("postgres", func(t *testing.T) { f(t, StoreConfig{URL: pgtest.Schema(t)}) })
}

// openAt opens the store at (a place eachBackend gave), closed when t
// ends.
func openAt(t testing.TB, at StoreConfig) *Store {
	t.Helper()
	s, err := Open(at)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Open: degraded: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// team returns a small conversation: where people live and what pet they
// keep, some of it updated later, between routine turns. Positions start at
// 3 (a window's sinks come first).
func team(filler int) []Turn {
	people := []string{"Omar", "Priya", "Lena", "Hugo", "Mei", "Ravi"}
	cities := []string{"Lisbon", "Osaka", "Bergen", "Tucson", "Hanoi", "Quito"}
	pets := []string{"cat", "dog", "parrot", "tortoise", "husky", "beagle"}
	var out []Turn
	add := func(role, text string) { out = append(out, Turn{Pos: len(out) + 3, Role: role, Text: text}) }
	for i, p := range people {
		add("user", fmt.Sprintf("%s moved to %s last spring.", p, cities[i]))
		add("assistant", "Noted.")
		add("user", fmt.Sprintf("%s has a %s at home.", p, pets[i]))
		add("assistant", "Got it.")
	}
	for i := 0; i < filler; i++ {
		add("user", fmt.Sprintf("Can you forward ticket %d to %s?", i, people[i%len(people)]))
		add("assistant", "Done.")
	}
	add("user", "Ravi relocated again, this time to Bergen.")
	add("assistant", "Noted.")
	add("user", "Mei now also looks after a parrot.")
	add("assistant", "Noted.")
	add("user", "Omar relocated again, this time to Quito.")
	add("assistant", "Noted.")
	add("user", "Priya relocated again, this time to Hanoi.")
	add("assistant", "Noted.")
	add("user", "Hugo now also looks after a husky.")
	add("assistant", "Noted.")
	out, _ = Linked(sinkChain, out)
	return out
}

// sinkChain is the chain of the three messages before team's first turn.
var sinkChain = func() uint64 {
	var c uint64
	for _, text := range []string{"You are a helpful assistant.", "Hi.", "Hello!"} {
		c = Link(c, "user", text)
	}
	return c
}()

// chainOf returns the Query.Chain of a history holding turns (linked from
// positions 0..) and nothing else of interest: Chain[i+1] is the chain of
// turn i, Chain[0..3] are the sinks'.
func chainOf(turns []Turn) []uint64 {
	n := 0
	for _, t := range turns {
		n = max(n, t.Pos+1)
	}
	out := make([]uint64, n+1)
	out[3] = sinkChain
	for _, t := range turns {
		out[t.Pos+1] = t.Chain()
	}
	return out
}

// textAt returns the text of the turn at pos.
func textAt(turns []Turn, pos int) string {
	for _, t := range turns {
		if t.Pos == pos {
			return t.Text
		}
	}
	return ""
}
