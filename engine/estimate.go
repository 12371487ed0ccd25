package engine

// EstimateTokens is kvwin's one estimate of the tokens of n bytes of text
// where no tokenizer counts them (a gateway over Ollama, a count before a
// model is loaded, the benches): about four bytes a token, as English text
// runs in BPE vocabularies, rounded up.
func EstimateTokens(n int) int { return (n + 3) / 4 }

// MessageOverhead is the tokens a chat template adds around a message's
// role and content (start and end markers, the role's line), in the
// estimates that count a whole rendered message.
const MessageOverhead = 4
