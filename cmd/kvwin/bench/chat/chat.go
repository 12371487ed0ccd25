// Package chat holds the OpenAI chat pieces the route and load workloads
// share: deterministic filler text and the reading of a stream chunk.
package chat

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
)

// Words is n bytes of words drawn from a small vocabulary by seed: the
// same seed, the same text.
func Words(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	words := []string{"kv", "cache", "prefix", "slot", "turn", "window", "route", "node", "token", "block", "memory", "sink"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// Delta is the text of one OpenAI chat stream chunk (the data of one
// SSE event); ok is false for an error event or a chunk that is not JSON.
func Delta(data string) (text string, ok bool) {
	var chunk struct {
		Choices []struct {
			Delta struct{ Content string } `json:"delta"`
		} `json:"choices"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Error != nil {
		return "", false
	}
	for _, ch := range chunk.Choices {
		text += ch.Delta.Content
	}
	return text, true
}
