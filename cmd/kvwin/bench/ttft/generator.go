package ttft

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// GeneratorConfig shapes the built-in conversation. Message lengths are in
// tokens and uniformly distributed over [Min, Max]; text is BytesPerToken
// bytes per token of pseudo-random words, so with the test model's
// byte-level vocabulary a message of n tokens is exactly n bytes.
type GeneratorConfig struct {
	Seed         uint64
	Turns        int
	SystemTokens int // the system prompt; 0 for none
	UserMin      int
	UserMax      int
	AssistantMin int
	AssistantMax int
	// BytesPerToken converts token lengths to text lengths (1 for the test
	// model; about 4 for English on a real model's vocabulary).
	BytesPerToken float64
}

// DefaultGeneratorConfig is the default workload. Its history grows by
// about 55 tokens a turn (34 of text, 21 of template), so its 120 turns end
// at about 6,800 tokens: 3.3 times the default 2,048-token budget, which
// sliding, sink and memory must outgrow several times over, and within an
// 8,192-token context, so full still fits. Short turns keep the whole
// five-policy run within minutes on two cores.
func DefaultGeneratorConfig() GeneratorConfig {
	return GeneratorConfig{
		Seed: 1, Turns: 120, SystemTokens: 192,
		UserMin: 6, UserMax: 22, AssistantMin: 12, AssistantMax: 28,
		BytesPerToken: 1,
	}
}

func (c GeneratorConfig) validate() error {
	switch {
	case c.Turns < 1:
		return fmt.Errorf("ttft: generator turns %d: want at least 1", c.Turns)
	case c.SystemTokens < 0:
		return fmt.Errorf("ttft: generator system tokens %d: must not be negative", c.SystemTokens)
	case c.UserMin < 1 || c.UserMax < c.UserMin:
		return fmt.Errorf("ttft: generator user tokens [%d, %d]: want 1 ≤ min ≤ max", c.UserMin, c.UserMax)
	case c.AssistantMin < 1 || c.AssistantMax < c.AssistantMin:
		return fmt.Errorf("ttft: generator assistant tokens [%d, %d]: want 1 ≤ min ≤ max", c.AssistantMin, c.AssistantMax)
	case !(c.BytesPerToken > 0) || math.IsInf(c.BytesPerToken, 0):
		return fmt.Errorf("ttft: generator bytes per token %v: must be positive and finite", c.BytesPerToken)
	}
	return nil
}

// words is the generator's vocabulary: enough distinct words that BM25
// retrieval (the memory policy's packets) sees varied turns, short enough
// that messages of a few tokens still hold whole words.
var words = strings.Fields(`alpha beta cache slot prefix window sink token memory route
turn block key chain hash layer model batch queue shard node fleet budget packet
ledger evict keep pin step plan cost time first last river stone cloud paper lamp
green amber north south quiet rapid linen copper maple orbit pixel quartz harbor
meadow signal vector kernel thread socket cobalt velvet tundra canyon lantern`)

// Generate returns the conversation cfg describes. The same cfg gives the
// same conversation, byte for byte, on every platform and Go release: the
// PCG generator's output is specified, and lengths and words are drawn from
// it by plain modular reduction rather than through library helpers that
// may change.
func Generate(cfg GeneratorConfig) (Conversation, error) {
	if err := cfg.validate(); err != nil {
		return Conversation{}, err
	}
	g := textGen{rng: rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15), bpt: cfg.BytesPerToken}
	c := Conversation{Turns: make([]Turn, cfg.Turns)}
	if cfg.SystemTokens > 0 {
		c.System = g.text(cfg.SystemTokens)
	}
	for i := range c.Turns {
		c.Turns[i] = Turn{
			User:      g.text(g.between(cfg.UserMin, cfg.UserMax)),
			Assistant: g.text(g.between(cfg.AssistantMin, cfg.AssistantMax)),
		}
	}
	return c, nil
}

// textGen draws lengths and words from one PCG stream.
type textGen struct {
	rng *rand.PCG
	bpt float64
}

// between returns a length uniform on [lo, hi] (the modulo bias of a 64-bit
// draw over spans this small is negligible).
func (g textGen) between(lo, hi int) int {
	return lo + int(g.rng.Uint64()%uint64(hi-lo+1))
}

// text returns words totalling exactly ceil(tokens·bpt) bytes (at least
// one), cut inside the last word if need be, never ending in a space.
func (g textGen) text(tokens int) string {
	n := max(1, int(math.Ceil(float64(tokens)*g.bpt)))
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.rng.Uint64()%uint64(len(words))])
	}
	s := []byte(b.String()[:n])
	if s[n-1] == ' ' {
		s[n-1] = '.'
	}
	return string(s)
}
