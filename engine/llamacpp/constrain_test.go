package llamacpp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"kvwin/engine"
)

// JSON output completes within max_tokens on the byte-level test model,
// whatever the sampler draws: fixed text is inserted and the close is
// forced once only it fits.
func TestConstrainedOutputCompletesWithinTheBudget(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 1024})
	call := &engine.Output{
		Schema: []byte(`{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object",` +
			`"properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}},` +
			`"required":["name","arguments"],"additionalProperties":false}`),
		Prefix: "<tool_call>\n", Suffix: "\n</tool_call>",
	}
	book := &engine.Output{Schema: []byte(`{"type":"object","properties":{"title":{"type":"string"},"author":{"type":"string"},` +
		`"genre":{"type":"string"}},"required":["title","author","genre"],"additionalProperties":false}`)}
	for _, tc := range []struct {
		name   string
		out    *engine.Output
		budget int
		check  func(t *testing.T, text string)
	}{
		{"two-field call in 64", call, 64, func(t *testing.T, text string) {
			body, ok := strings.CutPrefix(text, "<tool_call>\n")
			body, ok2 := strings.CutSuffix(body, "\n</tool_call>")
			var v struct {
				Name      string
				Arguments map[string]int
			}
			if !ok || !ok2 || json.Unmarshal([]byte(body), &v) != nil || v.Name != "f" || len(v.Arguments) != 2 {
				t.Fatalf("output %q is not a call of f with a and b", text)
			}
		}},
		{"three strings in 96", book, 96, func(t *testing.T, text string) {
			var v map[string]string
			if err := json.Unmarshal([]byte(text), &v); err != nil || len(v) != 3 {
				t.Fatalf("output %q is not the three-string object: %v", text, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := 0
			defer func() {
				if cut == 0 {
					t.Errorf("no seed's output was closed by the limit: the test model at temperature 1.5 should need it")
				}
			}()
			for seed := range uint32(6) {
				req := engine.Request{Messages: []engine.Message{{Role: engine.RoleUser, Content: "Hello!"}},
					MaxTokens: tc.budget, Sampling: engine.DefaultSampling(), Slot: -1}
				req.Sampling.Seed, req.Sampling.Temperature, req.Sampling.Output = seed, 1.5, tc.out
				res, err := e.Generate(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				// Stop when the model finished the document itself, length
				// when the limit forced its close: the text is whole either
				// way, but a cut call is not a complete one.
				if (res.FinishReason != engine.FinishStop && res.FinishReason != engine.FinishLength) || len(res.Tokens) > tc.budget {
					t.Fatalf("seed %d: finish %q after %d tokens (budget %d): %q", seed, res.FinishReason, len(res.Tokens), tc.budget, res.Text)
				}
				if res.FinishReason == engine.FinishLength {
					cut++
				}
				tc.check(t, res.Text)
				t.Logf("seed %d: %d tokens: %q", seed, len(res.Tokens), res.Text)
			}
		})
	}

	// A budget below the shortest valid output is refused before any text.
	req := engine.Request{Messages: []engine.Message{{Role: engine.RoleUser, Content: "Hello!"}}, MaxTokens: 62, Sampling: engine.DefaultSampling(), Slot: -1}
	req.Sampling.Output = call
	if _, err := e.Generate(context.Background(), req, nil); !errors.Is(err, engine.ErrInvalidRequest) || !strings.Contains(err.Error(), "63") {
		t.Errorf("budget 62 for a 63-token minimum: %v, want invalid naming 63", err)
	}
}

// A constrained request whose client leaves stops within a token, though
// its closes are computed off the loop, and its slot serves the next one.
func TestConstrainedCancelStopsWithinAToken(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048})
	ctx, cancel := context.WithCancel(context.Background())
	req := engine.Request{Messages: []engine.Message{{Role: engine.RoleUser, Content: "Hello!"}}, MaxTokens: 1800, Sampling: engine.DefaultSampling(), Slot: -1}
	req.Sampling.Seed = 4
	req.Sampling.Output = &engine.Output{Schema: []byte(`{"type":"string","minLength":1500,"maxLength":1600}`)}
	var atCancel int64 = -1
	events := 0
	_, err := e.Generate(ctx, req, func(ev engine.Event) error {
		if events++; events == 20 {
			atCancel = e.Stats().GeneratedTokens.Load()
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := e.Stats().GeneratedTokens.Load(); atCancel < 0 || n > atCancel+1 {
		t.Fatalf("%d tokens generated, %d when the client left: more than one after", n, atCancel)
	}
	if s := e.Slots()[0]; s.Processing {
		t.Fatalf("slot still processing: %+v", s)
	}
	res := chat(t, e, []engine.Message{{Role: "user", Content: "next"}}, 4)
	if res.Slot != 0 {
		t.Fatalf("next request: %+v", res)
	}
}
