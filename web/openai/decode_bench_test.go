package openai

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkDecodeFast times reading a chat completion body of 2,000 short
// messages (bench overhead's history: a system prompt, then user and
// assistant messages of about 18 bytes) with the route's fast decoder:
// the read phase of a long conversation's turn. b.SetBytes reports the
// body's bytes a second.
func BenchmarkDecodeFast(b *testing.B) {
	msgs := []map[string]string{{"role": "system", "content": "You are a careful assistant."}}
	for i := range 1000 {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("kv cache slot %04d", i)},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("prefix window %04d", i)})
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 1, "stream": false})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var r chatRequest
		if !r.DecodeFast(body) {
			b.Fatal("the body was not taken")
		}
	}
}
