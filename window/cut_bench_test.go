package window

import (
	"fmt"
	"testing"

	benchchat "kvwin/cmd/kvwin/bench/chat"
	"kvwin/engine"
)

// BenchmarkCut times the memory policy's cut of a history of short
// messages (bench overhead's: a system prompt, then short user and
// assistant messages, a question last) at 240, 2,000 and 4,000 messages,
// their contents already checked (as Window.Build passes a history a
// turn longer than the last). The counter is the test model's (a token a
// byte). Compare the sub-benchmarks' ns/op in one run: the replay jumps
// between steps, so a cut should cost about the history's arrays, not a
// search per message.
func BenchmarkCut(b *testing.B) {
	for _, n := range []int{240, 2000, 4000} {
		msgs := []engine.Message{{Role: engine.RoleSystem, Content: "You are a careful assistant. " + benchchat.Words(0, 160)}}
		for i := 0; len(msgs) < n; i++ {
			msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: benchchat.Words(uint64(2*i), 18)}, engine.Message{Role: engine.RoleAssistant, Content: benchchat.Words(uint64(2*i+1), 18)})
		}
		msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: "question 7?"})
		count := func(m engine.Message) int { return len(m.Content) + 8 }
		p, err := newCutter(PolicyMemory, Settings{Budget: 8192 - 1024})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprint("cut", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := p.cutWithin(msgs, count, 0, len(msgs), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
