package enginetest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"kvwin/engine"
)

// testAbilities checks each optional interface b implements.
func testAbilities(t *testing.T, b engine.Backend, opts Options) {
	ctx := context.Background()
	// A remote backend learns its slots and context at its first request.
	if _, err := generate(t, ctx, b, opts.Request, nil); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	const text = "the cache holds a prefix"
	if tk, ok := b.(engine.Tokenizer); ok {
		t.Run("Tokenizer", func(t *testing.T) {
			plain, err := tk.Tokenize(ctx, text, false)
			skipUnsupported(t, err)
			if err != nil || len(plain) == 0 {
				t.Fatalf("Tokenize(%q) = %v, %v", text, plain, err)
			}
			special, err := tk.Tokenize(ctx, text, true)
			if err != nil || len(special) < len(plain) {
				t.Fatalf("Tokenize(%q, special) = %v, %v; want at least the %d plain tokens", text, special, err, len(plain))
			}
			back, err := tk.Detokenize(ctx, plain)
			if err != nil || back != text {
				t.Fatalf("Detokenize(Tokenize(%q)) = %q, %v", text, back, err)
			}
			// A prompt of token ids is used as it is.
			req := opts.Request
			req.Messages, req.Prompt, req.Tokens = nil, "", special
			res, err := generate(t, ctx, b, req, nil)
			if err != nil {
				t.Fatalf("Generate of %d token ids: %v", len(special), err)
			}
			if res.Timings.PromptTokens != len(special) {
				t.Errorf("a prompt of %d token ids counted %d prompt tokens", len(special), res.Timings.PromptTokens)
			}
		})
	}
	if st, ok := b.(engine.SpecialTokenizer); ok {
		t.Run("SpecialTokenizer", func(t *testing.T) {
			bare, err := st.TokenizeSpecial(ctx, text, false, false)
			skipUnsupported(t, err)
			if err != nil || len(bare) == 0 {
				t.Fatalf("TokenizeSpecial(%q, false, false) = %v, %v", text, bare, err)
			}
			withBOS, err := st.TokenizeSpecial(ctx, text, true, false)
			if err != nil || len(withBOS) < len(bare) || !slices.Equal(withBOS[len(withBOS)-len(bare):], bare) {
				t.Fatalf("TokenizeSpecial(add) = %v, %v; want the bare tokens %v at its end", withBOS, err, bare)
			}
			if tk, ok := b.(engine.Tokenizer); ok {
				plain, err := tk.Tokenize(ctx, text, false)
				if err == nil && !slices.Equal(plain, bare) {
					t.Errorf("Tokenize(special=false) = %v, TokenizeSpecial(false, false) = %v: want the same", plain, bare)
				}
			}
		})
	}
	if mc, ok := b.(engine.MessageCounter); ok {
		t.Run("MessageCounter", func(t *testing.T) {
			short := mc.CountMessage(engine.Message{Role: engine.RoleUser, Content: "hi"})
			long := mc.CountMessage(engine.Message{Role: engine.RoleUser, Content: "hi " + text + " " + text})
			if short <= 0 || long <= short {
				t.Fatalf("CountMessage: %d for a short message, %d for a longer one", short, long)
			}
		})
	}
	if p, ok := b.(engine.Prompter); ok {
		t.Run("Prompter", func(t *testing.T) {
			ids, err := p.Prompt(ctx, opts.Request)
			skipUnsupported(t, err)
			if err != nil {
				t.Fatalf("Prompt: %v", err)
			}
			res, err := generate(t, ctx, b, opts.Request, nil)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if len(ids) != res.Timings.PromptTokens {
				t.Fatalf("Prompt gave %d tokens, Generate counted %d for the same request", len(ids), res.Timings.PromptTokens)
			}
			if _, err := p.Prompt(ctx, engine.Request{}); !errors.Is(err, engine.ErrInvalidRequest) {
				t.Errorf("Prompt of no prompt: %v, want engine.ErrInvalidRequest", err)
			}
		})
	}
	if tr, ok := b.(engine.TextRenderer); ok {
		t.Run("TextRenderer", func(t *testing.T) {
			got, err := tr.PromptText(opts.Request)
			if err != nil || got == "" {
				t.Fatalf("PromptText = %q, %v", got, err)
			}
			for _, m := range opts.Request.Messages {
				if !strings.Contains(got, m.Content) {
					t.Errorf("PromptText %q lacks the message %q", got, m.Content)
				}
			}
		})
	}
	if sr, ok := b.(engine.SlotReporter); ok {
		t.Run("SlotReporter", func(t *testing.T) {
			checkSlots(t, b, sr.Slots())
		})
	}
	if sf, ok := b.(engine.SlotFetcher); ok {
		t.Run("SlotFetcher", func(t *testing.T) {
			slots, err := sf.FetchSlots(ctx)
			skipUnsupported(t, err)
			if err != nil {
				t.Fatalf("FetchSlots: %v", err)
			}
			checkSlots(t, b, slots)
		})
	}
	if h, ok := b.(engine.HealthChecker); ok {
		t.Run("HealthChecker", func(t *testing.T) {
			if err := h.Health(ctx); err != nil {
				t.Fatalf("Health of a serving backend: %v", err)
			}
		})
	}
	if f, ok := b.(engine.ConversationForgetter); ok {
		t.Run("ConversationForgetter", func(t *testing.T) {
			n, err := f.ForgetConversation(ctx, "enginetest", "never-seen")
			if err != nil || n < 0 {
				t.Fatalf("ForgetConversation of an unknown conversation = %d, %v", n, err)
			}
		})
	}
	if e, ok := b.(engine.Embedder); ok {
		t.Run("Embedder", func(t *testing.T) {
			inputs := []string{"the cache", "a window of tokens"}
			out, err := e.Embed(ctx, engine.EmbedRequest{Model: opts.Request.Model, Inputs: inputs, Tenant: opts.Request.Tenant})
			skipUnsupported(t, err)
			if err != nil {
				t.Fatalf("Embed: %v", err)
			}
			if len(out.Vectors) != len(inputs) || out.PromptTokens <= 0 {
				t.Fatalf("Embed: %d vectors for %d inputs, %d prompt tokens", len(out.Vectors), len(inputs), out.PromptTokens)
			}
			for i, v := range out.Vectors {
				var norm float64
				for _, x := range v {
					norm += float64(x) * float64(x)
				}
				if len(v) != len(out.Vectors[0]) || len(v) == 0 || math.Abs(math.Sqrt(norm)-1) > 1e-3 {
					t.Errorf("vector %d: width %d (first %d), norm %.4f: want one width, unit length", i, len(v), len(out.Vectors[0]), math.Sqrt(norm))
				}
			}
		})
	}
	if d, ok := b.(engine.ModelDescriber); ok {
		t.Run("ModelDescriber", func(t *testing.T) {
			card, err := d.Describe()
			if err != nil || card.Format == "" || card.Size <= 0 {
				t.Fatalf("Describe = %+v, %v: want a format and a size", card, err)
			}
		})
	}
	if ct, ok := b.(engine.ChatTemplater); ok {
		t.Run("ChatTemplater", func(t *testing.T) {
			if ct.ChatTemplate() != ct.ChatTemplate() {
				t.Fatal("ChatTemplate changes between calls")
			}
		})
	}
}

// skipUnsupported skips a subtest whose ability answered
// engine.ErrNotSupported: the backend has the method but not the ability
// now (a router none of whose backends has it).
func skipUnsupported(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, engine.ErrNotSupported) {
		t.Skipf("not supported now: %v", err)
	}
}

// checkSlots checks a slot list against Info, read after it. An empty
// list is a backend that cannot list them now.
func checkSlots(t *testing.T, b engine.Backend, slots []engine.SlotState) {
	t.Helper()
	info := b.Info()
	if len(slots) == 0 {
		t.Skip("no slots listed")
	}
	// Fewer slots than Info says is a slot missing; more is an Info that
	// lags (a router counts a remote backend's slots only once that
	// backend has read its server's properties).
	if len(slots) < info.Slots {
		t.Errorf("%d slots listed, Info says %d", len(slots), info.Slots)
	}
	seen := map[int]bool{}
	for _, s := range slots {
		if seen[s.ID] || s.ID < 0 || s.Tokens < 0 || (s.Context > 0 && s.Tokens > s.Context) {
			t.Errorf("slot %+v: want distinct ids ≥ 0 and 0 ≤ tokens ≤ context", s)
		}
		seen[s.ID] = true
	}
}
