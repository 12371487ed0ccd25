package router

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"kvwin/engine"
)

// orderScorer ranks by a fixed order of names and records what it was
// asked and told. A name not in the fleet is offered as a Candidate of
// its own making.
type orderScorer struct {
	order []string

	mu     sync.Mutex
	ranked []Prompt
	firsts []uint64 // turns whose first token Watch saw
	ended  []uint64
}

var (
	_ Scorer  = (*orderScorer)(nil)
	_ Tracker = (*orderScorer)(nil)
)

func (s *orderScorer) Rank(cands []Candidate, p Prompt) []Candidate {
	s.mu.Lock()
	s.ranked = append(s.ranked, p)
	s.mu.Unlock()
	var out []Candidate
	for _, name := range s.order {
		i := slices.IndexFunc(cands, func(c Candidate) bool { return c.Name == name })
		if i < 0 {
			out = append(out, Candidate{Name: name})
			continue
		}
		out = append(out, cands[i])
	}
	return out
}

func (s *orderScorer) Watch(p Prompt, stream engine.StreamFunc) engine.StreamFunc {
	return func(ev engine.Event) error {
		if ev.First {
			s.mu.Lock()
			s.firsts = append(s.firsts, p.ID)
			s.mu.Unlock()
		}
		if stream == nil {
			return nil
		}
		return stream(ev)
	}
}

func (s *orderScorer) Ended(p Prompt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, p.ID)
}

// A Config.Scorer's order is the order the turn is tried in; a candidate
// it leaves out is never tried, one it made up is dropped; as a Tracker
// it sees the turn's first token and its end; Decision names its Policy.
func TestAnExternalScorersOrderIsWalked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		order  []string
		fail   string // this backend fails before answering
		chosen string // "": the turn fails
		tried  []string
	}{
		{"its first", []string{"b", "a"}, "", "b", []string{"b"}},
		{"a failure goes on down its order", []string{"a", "b"}, "a", "b", []string{"a", "b"}},
		{"one it made up is dropped", []string{"x", "a"}, "", "a", []string{"a"}},
		{"one it left out is never tried", []string{"a"}, "a", "", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakes := map[string]*fake{"a": newFake("a"), "b": newFake("b")}
			if tc.fail != "" {
				fakes[tc.fail].fail = fmt.Errorf("%w: refused", engine.ErrUnavailable)
			}
			sc := &orderScorer{order: tc.order}
			var decs []Decision
			r := newRouter(t, Config{Policy: "mine", Scorer: sc, Observe: func(d Decision) { decs = append(decs, d) }}, fakes["a"], fakes["b"])
			res, err := r.Generate(t.Context(), engine.Request{Messages: conv(1, 1), Slot: -1}, nil)
			if tc.chosen == "" {
				if !errors.Is(err, engine.ErrUnavailable) {
					t.Fatalf("err %v, want unavailable", err)
				}
			} else if err != nil || res.Backend != tc.chosen {
				t.Fatalf("served by %q, err %v; want %s", res.Backend, err, tc.chosen)
			}
			var tried []string
			for _, name := range tc.order {
				if f, ok := fakes[name]; ok && f.count() > 0 {
					tried = append(tried, name)
				}
			}
			if !slices.Equal(tried, tc.tried) || fakes["a"].count()+fakes["b"].count() != len(tc.tried) {
				t.Errorf("tried %v (a %d, b %d times), want %v", tried, fakes["a"].count(), fakes["b"].count(), tc.tried)
			}
			if len(sc.ranked) != 1 || sc.ranked[0].Length == 0 || len(sc.ranked[0].Keys) == 0 || sc.ranked[0].BlockTokens == 0 {
				t.Fatalf("ranked %+v, want one prompt with its length and keys", sc.ranked)
			}
			id := sc.ranked[0].ID
			if !slices.Equal(sc.ended, []uint64{id}) {
				t.Errorf("ended %v, want [%d]", sc.ended, id)
			}
			if answered := tc.chosen != ""; answered != slices.Contains(sc.firsts, id) {
				t.Errorf("first tokens seen for %v, answered %v", sc.firsts, answered)
			}
			if len(decs) != 1 || decs[0].Policy != "mine" || decs[0].Chosen != tc.chosen {
				t.Errorf("decisions %+v, want one of policy mine chosen %q", decs, tc.chosen)
			}
		})
	}
}
