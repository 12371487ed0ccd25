package window

import (
	"context"
	"fmt"
	"testing"

	benchchat "kvwin/cmd/kvwin/bench/chat"
	"kvwin/engine"
	"kvwin/internal/ident"
	"kvwin/window/memory"
)

// BenchmarkBuildChain times Window.Build on the turns of a conversation
// shaped like bench overhead --chain's (a short question a turn, a
// one-token answer, the same instructions; every word from a vocabulary
// of twelve, so every ask matches thousands of turns) under the memory
// window with a real store: turns 1–100, where nothing is evicted yet,
// (a new conversation every 100 turns), and turns from 1,900 on, each on
// the conversation grown by one turn. Compare the two sub-benchmarks' ns/op
// in one run. The counter is the
// test model's (a token a byte).
func BenchmarkBuildChain(b *testing.B) {
	for _, from := range []int{1, 1900} {
		b.Run(fmt.Sprintf("turn%d", from), func(b *testing.B) {
			ctx := context.Background()
			st, err := memory.Open(memory.StoreConfig{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			w, err := New(Config{Settings: Settings{Budget: 8192 - 1024}}, st)
			if err != nil {
				b.Fatal(err)
			}
			count := func(m engine.Message) int { return len(m.Content) + 8 }
			instructions := engine.Message{Role: engine.RoleSystem, Content: "You are a careful assistant. " + benchchat.Words(0, 160)}
			var msgs []engine.Message
			build := func(conv string, t int) {
				if t == 1 {
					msgs = append(msgs[:0], instructions)
				}
				msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: fmt.Sprintf("question %d? ", t) + benchchat.Words(uint64(t), 18)})
				if _, err := w.Build(ctx, Request{Owner: ident.Owner{Tenant: "bench", Conversation: conv}, Messages: msgs,
					Count: count, CountKey: "bytes"}); err != nil {
					b.Fatal(err)
				}
				msgs = append(msgs, engine.Message{Role: engine.RoleAssistant, Content: "k"})
			}
			for t := 1; t < from; t++ {
				build("chain", t)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if from == 1 { // turns 1–100 of a conversation a round
					build(fmt.Sprint("chain-", i/100), 1+i%100)
				} else {
					build("chain", from+i)
				}
			}
		})
	}
}
