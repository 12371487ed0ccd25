package llamaserver

import (
	"context"
	"kvwin/internal/ident"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"kvwin/engine"
)

// TestRenderedRealServer checks, against a real llama-server whose
// template is not ChatML (KVWIN_LLAMASERVER_URL; skipped without), that
// the prompt built from cached prefixes and tails is id for id the whole
// rendering's tokenization, over KVWIN_RENDERED_CONVERSATIONS random
// conversations (default 300) of emoji, code, whitespace runs and text
// that is or looks like control tokens.
func TestRenderedRealServer(t *testing.T) {
	url := os.Getenv("KVWIN_LLAMASERVER_URL")
	if url == "" {
		t.Skip("KVWIN_LLAMASERVER_URL names no llama-server")
	}
	convs := 300
	if n, err := strconv.Atoi(os.Getenv("KVWIN_RENDERED_CONVERSATIONS")); err == nil {
		convs = n
	}
	counter := &countingTransport{base: http.DefaultTransport}
	b, err := New(Config{BaseURL: url, HTTPClient: &http.Client{Transport: counter}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	st, err := b.current(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.chat.chatML {
		t.Skip("the server's template is ChatML: rendered per message, not through /apply-template")
	}
	frags := append(slices.Clone(contentFrags), "<|end_header_id|>", "<start_of_turn>", "<end_of_turn>", "<bos>",
		"\r\n", "    \n", "🤖🤖", "ü", "\u00a0", "if (x) {\n    return y;\n}\n", "```go\n", "```", "\t\t")
	rng := rand.New(rand.NewPCG(26, 2))
	content := func() string {
		s := ""
		for range rng.IntN(9) {
			s += frags[rng.IntN(len(frags))]
		}
		return s
	}
	turns, tails := 0, 0
	for conv := range convs {
		tenant := strconv.Itoa(conv % 4)
		msgs := []engine.Message{{Role: engine.RoleSystem, Content: content()}, {Role: engine.RoleUser, Content: content()}}
		for range 1 + rng.IntN(6) {
			got, err := b.Prompt(ctx, engine.Request{Owner: ident.Owner{Tenant: tenant}, Messages: msgs})
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Prompt string `json:"prompt"`
			}
			if err := b.call(ctx, "POST", "/apply-template", map[string]any{"messages": msgs}, &out); err != nil {
				t.Fatal(err)
			}
			want, err := b.TokenizeSpecial(ctx, out.Prompt, false, true)
			if err != nil {
				t.Fatal(err)
			}
			if bos := st.chat.bos; len(bos) > 0 && !slices.Equal(want[:min(len(want), len(bos))], bos) {
				want = append(slices.Clone(bos), want...)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("conversation %d, %d messages, text %q:\n got %v\nwant %v", conv, len(msgs), out.Prompt, got, want)
			}
			b.prompts.Wait()
			turns++
			msgs, _ = nextTurn(rng, msgs)
		}
	}
	hits, misses := b.prompts.Stats()
	tails = int(hits)
	t.Logf("%d conversations, %d turns, all identical to whole tokenization; %d turns from a cached prefix, %d not", convs, turns, tails, misses)
	for _, n := range []int{2, 242} {
		history := longHistory(n)
		if _, err := b.Prompt(ctx, engine.Request{Owner: ident.Owner{Tenant: "measure"}, Messages: history}); err != nil {
			t.Fatal(err)
		}
		b.prompts.Wait()
		turn := append(history, engine.Message{Role: engine.RoleAssistant, Content: "Sure."}, engine.Message{Role: engine.RoleUser, Content: "And then?"})
		calls, sent := counter.totals()
		if _, err := b.Prompt(ctx, engine.Request{Owner: ident.Owner{Tenant: "measure"}, Messages: turn}); err != nil {
			t.Fatal(err)
		}
		calls2, sent2 := counter.totals()
		t.Logf("%d messages: %d /tokenize calls, %d bytes sent to /tokenize this turn", len(turn), calls2-calls, sent2-sent)
	}
}

// countingTransport counts the /tokenize requests and their body bytes.
type countingTransport struct {
	base        http.RoundTripper
	mu          sync.Mutex
	calls, sent int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/tokenize") {
		c.mu.Lock()
		c.calls++
		c.sent += int(r.ContentLength)
		c.mu.Unlock()
	}
	return c.base.RoundTrip(r)
}

func (c *countingTransport) totals() (calls, sent int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.sent
}
