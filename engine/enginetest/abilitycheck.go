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
	for _, c := range abilityChecks {
		if c.has(b) {
			t.Run(c.name, func(t *testing.T) { c.check(t, ctx, b, opts) })
		}
	}
}

// sampleText is the text the tokenizer checks tokenize.
const sampleText = "the cache holds a prefix"

// abilityChecks are testAbilities' checks, in order: each runs as a subtest
// named for its interface when the backend implements it.
var abilityChecks = []struct {
	name  string
	has   func(engine.Backend) bool
	check func(t *testing.T, ctx context.Context, b engine.Backend, opts Options)
}{
	{"Tokenizer", implements[engine.Tokenizer], checkTokenizer},
	{"SpecialTokenizer", implements[engine.SpecialTokenizer], checkSpecialTokenizer},
	{"MessageCounter", implements[engine.MessageCounter], checkMessageCounter},
	{"Prompter", implements[engine.Prompter], checkPrompter},
	{"TextRenderer", implements[engine.TextRenderer], checkTextRenderer},
	{"SlotReporter", implements[engine.SlotReporter], checkSlotReporter},
	{"SlotFetcher", implements[engine.SlotFetcher], checkSlotFetcher},
	{"HealthChecker", implements[engine.HealthChecker], checkHealthChecker},
	{"ConversationForgetter", implements[engine.ConversationForgetter], checkConversationForgetter},
	{"Embedder", implements[engine.Embedder], checkEmbedder},
	{"ModelDescriber", implements[engine.ModelDescriber], checkModelDescriber},
	{"ChatTemplater", implements[engine.ChatTemplater], checkChatTemplater},
}

// implements reports whether b implements I.
func implements[I any](b engine.Backend) bool {
	_, ok := b.(I)
	return ok
}

// checkTokenizer checks b's engine.Tokenizer.
func checkTokenizer(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	tk := b.(engine.Tokenizer)
	plain, err := tk.Tokenize(ctx, sampleText, false)
	skipUnsupported(t, err)
	if err != nil || len(plain) == 0 {
		t.Fatalf("Tokenize(%q) = %v, %v", sampleText, plain, err)
	}
	special, err := tk.Tokenize(ctx, sampleText, true)
	if err != nil || len(special) < len(plain) {
		t.Fatalf("Tokenize(%q, special) = %v, %v; want at least the %d plain tokens", sampleText, special, err, len(plain))
	}
	back, err := tk.Detokenize(ctx, plain)
	if err != nil || back != sampleText {
		t.Fatalf("Detokenize(Tokenize(%q)) = %q, %v", sampleText, back, err)
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
}

// checkSpecialTokenizer checks b's engine.SpecialTokenizer.
func checkSpecialTokenizer(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	st := b.(engine.SpecialTokenizer)
	bare, err := st.TokenizeSpecial(ctx, sampleText, false, false)
	skipUnsupported(t, err)
	if err != nil || len(bare) == 0 {
		t.Fatalf("TokenizeSpecial(%q, false, false) = %v, %v", sampleText, bare, err)
	}
	withBOS, err := st.TokenizeSpecial(ctx, sampleText, true, false)
	if err != nil || len(withBOS) < len(bare) || !slices.Equal(withBOS[len(withBOS)-len(bare):], bare) {
		t.Fatalf("TokenizeSpecial(add) = %v, %v; want the bare tokens %v at its end", withBOS, err, bare)
	}
	if tk, ok := b.(engine.Tokenizer); ok {
		plain, err := tk.Tokenize(ctx, sampleText, false)
		if err == nil && !slices.Equal(plain, bare) {
			t.Errorf("Tokenize(special=false) = %v, TokenizeSpecial(false, false) = %v: want the same", plain, bare)
		}
	}
}

// checkMessageCounter checks b's engine.MessageCounter.
func checkMessageCounter(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	mc := b.(engine.MessageCounter)
	short := mc.CountMessage(engine.Message{Role: engine.RoleUser, Content: "hi"})
	long := mc.CountMessage(engine.Message{Role: engine.RoleUser, Content: "hi " + sampleText + " " + sampleText})
	if short <= 0 || long <= short {
		t.Fatalf("CountMessage: %d for a short message, %d for a longer one", short, long)
	}
}

// checkPrompter checks b's engine.Prompter.
func checkPrompter(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	p := b.(engine.Prompter)
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
}

// checkTextRenderer checks b's engine.TextRenderer.
func checkTextRenderer(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	tr := b.(engine.TextRenderer)
	got, err := tr.PromptText(opts.Request)
	if err != nil || got == "" {
		t.Fatalf("PromptText = %q, %v", got, err)
	}
	for _, m := range opts.Request.Messages {
		if !strings.Contains(got, m.Content) {
			t.Errorf("PromptText %q lacks the message %q", got, m.Content)
		}
	}
}

// checkSlotReporter checks b's engine.SlotReporter.
func checkSlotReporter(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	sr := b.(engine.SlotReporter)
	checkSlots(t, b, sr.Slots())
}

// checkSlotFetcher checks b's engine.SlotFetcher.
func checkSlotFetcher(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	sf := b.(engine.SlotFetcher)
	slots, err := sf.FetchSlots(ctx)
	skipUnsupported(t, err)
	if err != nil {
		t.Fatalf("FetchSlots: %v", err)
	}
	checkSlots(t, b, slots)
}

// checkHealthChecker checks b's engine.HealthChecker.
func checkHealthChecker(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	h := b.(engine.HealthChecker)
	if err := h.Health(ctx); err != nil {
		t.Fatalf("Health of a serving backend: %v", err)
	}
}

// checkConversationForgetter checks b's engine.ConversationForgetter.
func checkConversationForgetter(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	f := b.(engine.ConversationForgetter)
	n, err := f.ForgetConversation(ctx, "enginetest", "never-seen")
	if err != nil || n < 0 {
		t.Fatalf("ForgetConversation of an unknown conversation = %d, %v", n, err)
	}
}

// checkEmbedder checks b's engine.Embedder.
func checkEmbedder(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	e := b.(engine.Embedder)
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
}

// checkModelDescriber checks b's engine.ModelDescriber.
func checkModelDescriber(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	d := b.(engine.ModelDescriber)
	card, err := d.Describe()
	if err != nil || card.Format == "" || card.Size <= 0 {
		t.Fatalf("Describe = %+v, %v: want a format and a size", card, err)
	}
}

// checkChatTemplater checks b's engine.ChatTemplater.
func checkChatTemplater(t *testing.T, ctx context.Context, b engine.Backend, opts Options) {
	ct := b.(engine.ChatTemplater)
	if ct.ChatTemplate() != ct.ChatTemplate() {
		t.Fatal("ChatTemplate changes between calls")
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
