package window

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"kvwin/engine"
)

// FuzzCut: for any conversation, budget and policy, Cut either refuses the
// conversation or returns a cut that keeps the invariants of Cut (cut.go),
// fits the budget (every policy but full, which refuses instead), and is a
// pure function of its input. CI runs it for 30 s (.ci/fuzz).
//
// The input is a byte string: byte 0 picks the policy, bytes 1–2 the budget,
// then each pair of bytes is one message (role, size in tokens).
func FuzzCut(f *testing.F) {
	f.Add([]byte{2, 1, 144, 0, 40, 1, 20, 2, 20, 1, 20, 2, 20, 1, 20})
	f.Add([]byte{3, 0, 200, 0, 10, 1, 30, 2, 30, 1, 30, 2, 30, 1, 30, 2, 30, 1, 30})
	f.Add([]byte{1, 0, 50, 1, 10, 2, 10, 1, 10, 2, 10, 1, 10})
	f.Add([]byte{0, 0, 100, 1, 200})
	f.Add([]byte{3, 0, 160, 0, 10, 1, 30, 2, 30, 6, 12, 2, 30, 1, 30, 2, 30, 6, 12, 2, 30, 1, 30, 2, 30, 6, 12, 2, 30, 6, 12, 2, 30})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 5 {
			return
		}
		policy := Policies()[int(b[0])%len(Policies())]
		budget := int(b[1])<<8 | int(b[2])
		roles := []string{engine.RoleSystem, engine.RoleUser, engine.RoleAssistant, engine.RoleTool, "wizard"}
		var msgs []engine.Message
		for i := 3; i+1 < len(b); i += 2 {
			// The size is the content's bytes; byLen counts a token a byte.
			// Some end in a question mark: a question in the question zone
			// steps early.
			content := strings.Repeat("x", int(b[i+1]))
			if b[i]/byte(len(roles))%2 == 1 && content != "" {
				content = content[1:] + "?"
			}
			msgs = append(msgs, engine.Message{Role: roles[int(b[i])%len(roles)], Content: content})
		}
		p, err := NewPolicy(policy, Settings{Budget: budget})
		if err != nil {
			return // a budget Settings refuses
		}
		cut, err := p.Cut(msgs, byLen)
		if err != nil {
			return
		}
		again, err := p.Cut(slices.Clone(msgs), byLen)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(cut) {
			t.Fatalf("not pure: %+v then %+v (%v)", cut, again, err)
		}
		n := len(msgs)
		switch {
		case cut.Messages != n:
			t.Fatalf("cut of %d messages says %d", n, cut.Messages)
		case cut.Sinks < 0 || cut.Sinks > cut.Start || cut.Start > n-1:
			t.Fatalf("want 0 ≤ sinks %d ≤ start %d ≤ %d: %+v", cut.Sinks, cut.Start, n-1, cut)
		case cut.SinkPad < 0 || cut.KeptTokens < 0 || cut.PacketRoom < 0:
			t.Fatalf("negative count: %+v", cut)
		case policy != PolicyFull && cut.KeptTokens > budget:
			t.Fatalf("%s keeps %d tokens in a budget of %d: %+v", policy, cut.KeptTokens, budget, cut)
		}
		if !slices.IsSorted(cut.Asks) {
			t.Fatalf("asks not ascending: %v", cut.Asks)
		}
		for _, a := range cut.Asks {
			if a < cut.Start || a >= n || msgs[a].Role != engine.RoleUser {
				t.Fatalf("ask %d is not a kept user message (start %d, %d messages)", a, cut.Start, n)
			}
		}
		sameAsLinear(t, policy, Settings{Budget: budget}, msgs)
		// The last byte picks where an earlier turn's history ended, and
		// under which packets.
		at := len(msgs) - int(b[len(b)-1])%4
		s := Settings{Budget: budget}
		if b[len(b)-1]&4 != 0 {
			s.Packets = PacketsLedger
		}
		sameResumed(t, policy, s, msgs, at)
	})
}

// sameResumed fails t unless the replay of msgs under policy with s cuts
// the same gone on from either state an earlier replay of msgs[:at] marked
// (resume) as from the start.
func sameResumed(t *testing.T, policy string, s Settings, msgs []engine.Message, at int) {
	t.Helper()
	if policy != PolicySink && policy != PolicyMemory || at < 1 || at > len(msgs) {
		return
	}
	s = s.Defaults()
	if s.Validate() != nil {
		return
	}
	tokens, err := validate(nil, policy, msgs, byLen, s.Budget, 0)
	if err != nil {
		return
	}
	reserve, switchAt := 0, -1
	if policy == PolicyMemory {
		reserve, switchAt = s.packetTokens(), s.Switch
	}
	long := s.longMessage()
	earlier := newConversation(conversation{}, msgs[:at], tokens[:at], long, minExcerpt)
	var r resume
	_, _ = replayFrom(policy, earlier, s, reserve, switchAt, 0, true, &r)
	c := newConversation(conversation{}, msgs, tokens, long, minExcerpt)
	want, werr := replay(policy, c, s, reserve, switchAt, 0, true)
	for i := range r.Marks {
		if !r.Marked {
			break
		}
		from := r.Marks[i]
		got, gerr := replayFrom(policy, c, s, reserve, switchAt, 0, true, &resume{From: &from})
		if fmt.Sprint(got, gerr) != fmt.Sprint(want, werr) {
			t.Fatalf("%s, %+v: gone on from the state after %d of %d messages (%+v), the replay cut\n%+v (%v)\nfrom the start:\n%+v (%v)", policy, s, from.n, len(msgs), from, got, gerr, want, werr)
		}
	}
}

// sameAsLinear fails t unless the replay of msgs under policy (sink or
// memory; others pass) with s cuts as one that reads every message in
// turn: its jumps skip only messages after which nothing happens. It
// reports whether it compared (msgs valid, the policy one that replays).
func sameAsLinear(t *testing.T, policy string, s Settings, msgs []engine.Message) bool {
	t.Helper()
	if policy != PolicySink && policy != PolicyMemory {
		return false
	}
	s = s.Defaults()
	tokens, err := validate(nil, policy, msgs, byLen, s.Budget, 0)
	if err != nil {
		return false
	}
	c := newConversation(conversation{}, msgs, tokens, s.longMessage(), minExcerpt)
	reserve, switchAt := 0, -1
	if policy == PolicyMemory {
		reserve, switchAt = s.packetTokens(), s.Switch
	}
	got, gerr := replay(policy, c, s, reserve, switchAt, 0, true)
	want, werr := replay(policy, c, s, reserve, switchAt, 0, false)
	if fmt.Sprint(got, gerr) != fmt.Sprint(want, werr) {
		t.Fatalf("%s, %+v: the replay's jumps cut\n%+v (%v)\nreading every message:\n%+v (%v)", policy, s, got, gerr, want, werr)
	}
	return true
}
