package ttft

import (
	"reflect"
	"strings"
	"testing"
)

func TestGenerateIsDeterministic(t *testing.T) {
	cfg := DefaultGeneratorConfig()
	a, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same config generated two different conversations")
	}
	cfg.Seed++
	c, _ := Generate(cfg)
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 1 and 2 generated the same conversation")
	}
	// Pinned: the workload must not drift between releases, or numbers of
	// different runs stop being comparable. Change these only on purpose.
	if got, want := a.Turns[0].User, "block rapid meadow"; got != want {
		t.Fatalf("turn 1 user message %q, want %q", got, want)
	}
}

func TestGenerateLengthsFollowTheConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  GeneratorConfig
	}{
		{"defaults", DefaultGeneratorConfig()},
		{"fixed lengths", GeneratorConfig{Seed: 3, Turns: 40, SystemTokens: 0, UserMin: 5, UserMax: 5, AssistantMin: 9, AssistantMax: 9, BytesPerToken: 1}},
		{"four bytes a token", GeneratorConfig{Seed: 4, Turns: 30, SystemTokens: 10, UserMin: 2, UserMax: 6, AssistantMin: 3, AssistantMax: 7, BytesPerToken: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Generate(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			bpt := int(tt.cfg.BytesPerToken)
			if len(c.Turns) != tt.cfg.Turns || len(c.System) != tt.cfg.SystemTokens*bpt {
				t.Fatalf("%d turns, system %d bytes; want %d turns, %d bytes", len(c.Turns), len(c.System), tt.cfg.Turns, tt.cfg.SystemTokens*bpt)
			}
			seen := map[int]bool{}
			for i, turn := range c.Turns {
				for _, m := range []struct {
					text   string
					lo, hi int
				}{{turn.User, tt.cfg.UserMin, tt.cfg.UserMax}, {turn.Assistant, tt.cfg.AssistantMin, tt.cfg.AssistantMax}} {
					if n := len(m.text); n < m.lo*bpt || n > m.hi*bpt {
						t.Fatalf("turn %d: %q is %d bytes, want [%d, %d]", i+1, m.text, n, m.lo*bpt, m.hi*bpt)
					}
					if strings.TrimSpace(m.text) != m.text || m.text == "" {
						t.Fatalf("turn %d: %q has outer spaces or is empty", i+1, m.text)
					}
				}
				seen[len(turn.User)] = true
			}
			if want := tt.cfg.UserMax - tt.cfg.UserMin + 1; want > 1 && len(seen) < want/2 {
				t.Fatalf("user lengths take %d values of %d: not spread over the range", len(seen), want)
			}
		})
	}
}

// The default workload must outgrow the default budget at least three
// times over by its last turn, and still fit the context the bench gives
// full (8,192 tokens), with room for the reply.
func TestDefaultWorkloadReachesThreeBudgets(t *testing.T) {
	c, err := Generate(DefaultGeneratorConfig())
	if err != nil {
		t.Fatal(err)
	}
	count, _ := ChatMLCounter(1)
	const budget = 2048
	last := count(c.Messages(len(c.Turns), ""))
	if last < 3*budget || last+64 > 8192 {
		t.Fatalf("history at turn %d is %d tokens, want within [%d, %d]", len(c.Turns), last, 3*budget, 8192-64)
	}
	first := 0
	for n := 1; n <= len(c.Turns); n++ {
		if count(c.Messages(n, "")) > budget {
			first = n
			break
		}
	}
	// The plateau ratio's early tenth must end well before the late one.
	if first == 0 || first > len(c.Turns)/2 {
		t.Fatalf("history first exceeds the budget at turn %d of %d", first, len(c.Turns))
	}
	t.Logf("history: %d tokens at turn %d (%.2f× the budget); exceeds the budget at turn %d", last, len(c.Turns), float64(last)/budget, first)
}

func TestGenerateRejectsBadConfigs(t *testing.T) {
	for name, mutate := range map[string]func(*GeneratorConfig){
		"no turns":           func(c *GeneratorConfig) { c.Turns = 0 },
		"min above max":      func(c *GeneratorConfig) { c.UserMin, c.UserMax = 9, 3 },
		"empty replies":      func(c *GeneratorConfig) { c.AssistantMin = 0 },
		"negative system":    func(c *GeneratorConfig) { c.SystemTokens = -1 },
		"zero bytes a token": func(c *GeneratorConfig) { c.BytesPerToken = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultGeneratorConfig()
			mutate(&cfg)
			if _, err := Generate(cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
