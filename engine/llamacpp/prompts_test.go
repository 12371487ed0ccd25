package llamacpp

import (
	"fmt"
	"kvwin/internal/ident"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/gguf"
)

// Templates that rewrite earlier text when a message is added: the prompt
// cache's prefixes never match them, and the prompt is rendered whole.
const (
	countingTemplate = "{{ messages|length }} messages\n{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
	latestTemplate   = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}{% if loop.last %}{{ '[latest] ' }}{% endif %}{{ message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

// promptCase is a template on a vocabulary: the file name under
// chattemplate/testdata or the template's text, and the vocabulary (empty:
// the test model's bytes; else a path in the Ollama module).
type promptCase struct {
	name, file, template, vocab, renderer string
	// neverReused: the template rewrites all history when a message is
	// added, so no turn that adds messages may reuse a prefix.
	neverReused bool
	chatml      bool // the Jinja renderer writes ChatML natively
}

var promptCases = []promptCase{
	{name: "tiny-chatml", template: gguf.TinyChatTemplate, renderer: "chatml"},
	// ChatML on a vocabulary without its control tokens: the pieces are
	// written natively (jinjaRenderer.chatml), against the template run.
	{name: "tiny-chatml-llama3-vocab", template: gguf.TinyChatTemplate, vocab: "model/testdata/llama3.2", renderer: "jinja", chatml: true},
	{name: "llama3", file: "llama3-instruct", vocab: "model/testdata/llama3.2", renderer: "jinja"},
	{name: "llama3.1", file: "llama3.1-instruct", vocab: "model/testdata/llama3.2", renderer: "jinja"},
	{name: "gemma", file: "gemma-instruct", vocab: "model/testdata/gemma2/tokenizer.model", renderer: "jinja"},
	{name: "qwen2.5-style", file: "qwen2.5-style", renderer: "jinja"},
	{name: "counting", template: countingTemplate, renderer: "jinja", neverReused: true},
	// latest rewrites the last message's part only: a prefix before it
	// may be reused.
	{name: "latest", template: latestTemplate, renderer: "jinja"},
}

func promptCaseEngine(t *testing.T, c promptCase) *Engine {
	t.Helper()
	src := c.template
	if c.file != "" {
		b, err := os.ReadFile(filepath.Join("..", "chattemplate", "testdata", c.file+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		src = string(b)
	}
	cfg := gguf.TinyConfig{Layers: 1, Embedding: 32, Heads: 2, KVHeads: 1, FeedForward: 64, Context: 4096, Seed: 1, Template: src}
	if c.vocab != "" {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ollama/ollama").Output()
		if err != nil {
			t.Fatal(err)
		}
		cfg.VocabPath = filepath.Join(strings.TrimSpace(string(out)), c.vocab)
	}
	p := filepath.Join(t.TempDir(), c.name+".gguf")
	if err := gguf.WriteTiny(p, cfg); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{ModelPath: p, Slots: 1, Ctx: 4096, Threads: testThreads()},
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if e.render.name() != c.renderer {
		t.Fatalf("renderer %q, want %q", e.render.name(), c.renderer)
	}
	if j, ok := e.render.(*jinjaRenderer); ok && j.chatml != c.chatml {
		t.Fatalf("native ChatML pieces %v, want %v", j.chatml, c.chatml)
	}
	return e
}

// uncached is the engine's renderer built again without the token and
// prompt caches, running its Jinja template: the prompt as rendered from
// nothing.
func uncached(t *testing.T, e *Engine) renderer {
	t.Helper()
	r, err := newRenderer(e.model, e.shape.ChatTemplate, map[string]string{"tool_use": e.shape.ChatTemplateToolUse}, nil, nil, "uncached", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if j, ok := r.(*jinjaRenderer); ok {
		j.chatml = false // the template itself, run
	}
	return r
}

// A conversation's turns as a client sends them: a reply and a new ask
// added, or the last ask edited; some text that tokenizes across where
// messages meet.
func conversationTurns(system bool) [][]engine.Message {
	var msgs []engine.Message
	if system {
		msgs = append(msgs, engine.Message{Role: "system", Content: "You are terse.\n"})
	}
	msgs = append(msgs, engine.Message{Role: "user", Content: "Hello, how are you?"})
	turns := [][]engine.Message{append([]engine.Message(nil), msgs...)}
	for i := range 7 {
		if i%3 == 2 {
			msgs[len(msgs)-1].Content = fmt.Sprintf("Edited ask %d. ", i)
		} else {
			msgs = append(msgs, engine.Message{Role: "assistant", Content: fmt.Sprintf(" Reply %d, with  spaces\n", i)},
				engine.Message{Role: "user", Content: fmt.Sprintf("Ask %d: <b>ü</b>?", i)})
		}
		turns = append(turns, append([]engine.Message(nil), msgs...))
	}
	return turns
}

// Every turn's prompt is the same tokens with the prompt cache as rendered
// from nothing, for every template kvwin ships and for templates that
// rewrite history; the prefix-stable ones reuse a prefix on most turns,
// the rewriting ones on none.
func TestPromptCacheGivesTheUncachedPrompt(t *testing.T) {
	for _, c := range promptCases {
		t.Run(c.name, func(t *testing.T) {
			e := promptCaseEngine(t, c)
			plain := uncached(t, e)
			turns, last := 0, 0
			for _, system := range []bool{false, true} {
				for i, msgs := range conversationTurns(system) {
					want, err := plain.render("t1", msgs, nil, 0, 16, nil)
					if err != nil {
						if i == 0 && system {
							break // the template refuses a system message (Gemma)
						}
						t.Fatalf("turn %d: uncached: %v", i, err)
					}
					before, _ := e.kv.prompts.Stats()
					got, err := e.prompt(engine.Request{Owner: ident.Owner{Tenant: "t1"}, Messages: msgs})
					if err != nil {
						t.Fatalf("turn %d: %v", i, err)
					}
					if !equalInts(got, want) {
						t.Fatalf("turn %d (system %v): cached prompt\n%v\nuncached\n%v", i, system, got, want)
					}
					e.kv.prompts.Wait()
					after, _ := e.kv.prompts.Stats()
					if grew := i > 0 && len(msgs) > last; c.neverReused && grew && after > before {
						t.Errorf("turn %d added messages under a history-rewriting template, and reused a prefix", i)
					}
					last = len(msgs)
					turns++
				}
			}
			hits, _ := e.kv.prompts.Stats()
			switch {
			case !c.neverReused && hits < uint64(turns/2):
				t.Errorf("%d prefixes reused in %d turns, want most turns", hits, turns)
			}
		})
	}
}

// The padded sinks ChatML writes come out the same through the cache.
func TestPromptCacheKeepsSinkPadding(t *testing.T) {
	e := promptCaseEngine(t, promptCases[0])
	plain := uncached(t, e)
	for i, msgs := range conversationTurns(true) {
		want, err := plain.render("t1", msgs, nil, 2, 16, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.prompt(engine.Request{Owner: ident.Owner{Tenant: "t1"}, Messages: msgs, PadSinks: 2})
		if err != nil {
			t.Fatal(err)
		}
		if !equalInts(got, want) {
			t.Fatalf("turn %d: padded prompt differs through the cache", i)
		}
		e.kv.prompts.Wait()
	}
}

// One tenant's rendered prefixes are never served to another: the second
// tenant's first request of the same conversation finds nothing, and each
// tenant's own next turn finds its own.
func TestPromptCacheIsPerTenant(t *testing.T) {
	for _, c := range []promptCase{promptCases[0], promptCases[1], promptCases[2]} {
		t.Run(c.name, func(t *testing.T) {
			e := promptCaseEngine(t, c)
			turns := conversationTurns(false)
			gen := func(tenant string, msgs []engine.Message) uint64 {
				t.Helper()
				before, _ := e.kv.prompts.Stats()
				if _, err := e.prompt(engine.Request{Owner: ident.Owner{Tenant: tenant}, Messages: msgs}); err != nil {
					t.Fatal(err)
				}
				e.kv.prompts.Wait()
				after, _ := e.kv.prompts.Stats()
				return after - before
			}
			if n := gen("alice", turns[1]); n != 0 {
				t.Fatalf("alice's first request reused %d prefixes", n)
			}
			if n := gen("bob", turns[1]); n != 0 {
				t.Errorf("bob's request of alice's conversation reused %d of her prefixes", n)
			}
			if n := gen("bob", turns[2]); n != 1 {
				t.Errorf("bob's next turn reused %d prefixes, want his own one", n)
			}
			if n := gen("carol", turns[2]); n != 0 {
				t.Errorf("carol's request reused %d prefixes of others", n)
			}
		})
	}
}

// CountMessages gives CountMessage's count of every message, from the
// prompt cache for the prefix a tenant counted before, and never another
// tenant's.
func TestCountMessagesReusesItsTenantsPrefix(t *testing.T) {
	e := promptCaseEngine(t, promptCases[0])
	turns := conversationTurns(true)
	lookups := func(tenant string, msgs []engine.Message) uint64 {
		t.Helper()
		before, _ := e.kv.prompts.Stats()
		got := e.CountMessages(tenant, msgs)
		e.kv.prompts.Wait()
		after, _ := e.kv.prompts.Stats()
		if len(got) != len(msgs) {
			t.Fatalf("%d counts for %d messages", len(got), len(msgs))
		}
		for i, m := range msgs {
			if want := e.CountMessage(m); got[i] != want {
				t.Fatalf("message %d: %d, CountMessage %d", i, got[i], want)
			}
		}
		return after - before
	}
	if n := lookups("alice", turns[0]); n != 0 {
		t.Errorf("a first count reused %d prefixes", n)
	}
	for i := 1; i < len(turns); i++ {
		if n := lookups("alice", turns[i]); n != 1 {
			t.Errorf("turn %d reused %d prefixes, want 1", i, n)
		}
	}
	if n := lookups("bob", turns[3]); n != 0 {
		t.Errorf("bob reused %d of alice's prefixes", n)
	}
}

// Message tokens are cached per tenant: another tenant's request for the
// same text tokenizes it again (a miss of the token cache for every
// message), so the tokenize phase of Server-Timing says nothing of what
// others sent.
func TestTokenCacheIsPerTenant(t *testing.T) {
	for _, c := range []promptCase{promptCases[0], promptCases[1], promptCases[2]} {
		t.Run(c.name, func(t *testing.T) {
			e := promptCaseEngine(t, c)
			msgs := conversationTurns(true)[2]
			misses := func(tenant string) uint64 {
				t.Helper()
				_, before := e.kv.tokens.Stats()
				if _, err := e.prompt(engine.Request{Owner: ident.Owner{Tenant: tenant}, Messages: msgs}); err != nil {
					t.Fatal(err)
				}
				e.kv.tokens.Wait()
				e.kv.prompts.Wait()
				_, after := e.kv.tokens.Stats()
				return after - before
			}
			if n := misses("alice"); n < uint64(len(msgs)) {
				t.Fatalf("alice's first prompt missed the token cache %d times, want at least %d", n, len(msgs))
			}
			if n := misses("bob"); n < uint64(len(msgs)) {
				t.Errorf("bob's prompt of alice's messages missed %d times, want at least %d: it found her tokens", n, len(msgs))
			}
			if n := misses("alice"); n != 0 {
				t.Errorf("alice's second prompt missed %d times, want none", n)
			}
		})
	}
}
