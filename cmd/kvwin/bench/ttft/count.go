package ttft

import (
	"fmt"
	"math"
)

// Counter returns the tokens a prompt of msgs takes, chat template
// included. It must be deterministic: its count is the x axis on which
// policies are compared.
type Counter func(msgs []Message) int

// ChatMLCounter counts a prompt as a ChatML template renders it (the test
// model's template):
//
//	[BOS] per message: <|im_start|> role "\n" content <|im_end|> "\n"
//	      then:        <|im_start|> "assistant\n"
//
// Control tokens (BOS, <|im_start|>, <|im_end|>) count one token each and
// the text between them ceil(bytes / bytesPerToken). With bytesPerToken 1
// this is exact for the test model's byte-level vocabulary; for a real
// model it is an estimate (about 4 bytes per token for English text), but
// the same estimate for every policy, which is what the x axis needs.
//
// The harness counts history tokens on the client rather than reading the
// server's X-Kvwin-Prompt-Tokens because under sliding, sink and memory the
// server sends a cut window: only the client knows the whole history, and
// only a client-side count is comparable across policies.
func ChatMLCounter(bytesPerToken float64) (Counter, error) {
	if !(bytesPerToken > 0) || math.IsInf(bytesPerToken, 0) {
		return nil, fmt.Errorf("ttft: bytes per token %v: must be positive and finite", bytesPerToken)
	}
	const generationPrompt = len(roleAssistant) + 1 // "assistant\n"
	return func(msgs []Message) int {
		controls := 1 + 2*len(msgs) + 1 // BOS, a pair per message, the reply's <|im_start|>
		text := generationPrompt
		for _, m := range msgs {
			text += len(m.Role) + 1 + len(m.Content) + 1
		}
		return controls + int(math.Ceil(float64(text)/bytesPerToken))
	}, nil
}
