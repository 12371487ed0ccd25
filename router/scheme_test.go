package router

import (
	"context"
	"kvwin/internal/ident"
	"slices"
	"strings"
	"testing"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/engine/ollama"
)

// A gateway over Ollama and the Ollama adapter key the same conversation
// with the same blocks, tenant salt included: the registry's view of what
// an Ollama server holds and the adapter's own reuse estimate cannot drift
// apart. A change to either side's rendering, namespace, block size or
// salt fails here.
func TestOllamaGatewayAndAdapterShareBlockKeys(t *testing.T) {
	b, err := ollama.New(ollama.Config{BaseURL: "http://127.0.0.1:1", Model: "qwen3:0.6b", Name: "ollama-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := New(Config{}, []engine.Backend{b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	conversation := []engine.Message{
		{Role: engine.RoleSystem, Content: "You are a careful assistant. Answer briefly, in the user's language."},
		{Role: engine.RoleUser, Content: "What is the tallest mountain in the Alps, and how tall is it? Please give the height in metres."},
		{Role: engine.RoleAssistant, Content: "Mont Blanc, at about 4,806 metres."},
		{Role: engine.RoleUser, Content: "And the second tallest one?"},
	}
	keysOf := func(tenant string) (gateway, adapter []uint64) {
		req := engine.Request{Model: "qwen3:0.6b", Messages: conversation, Owner: ident.Owner{Tenant: tenant}}
		k, err := r.key(context.Background(), req, r.members)
		if err != nil {
			t.Fatal(err)
		}
		own, err := b.PromptKeys(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range k.approx.Keys {
			gateway = append(gateway, uint64(key))
		}
		for _, key := range own.Keys {
			adapter = append(adapter, uint64(key))
		}
		return gateway, adapter
	}
	acmeGateway, acmeAdapter := keysOf("acme")
	if len(acmeGateway) < 3 {
		t.Fatalf("only %d blocks keyed", len(acmeGateway))
	}
	if !slices.Equal(acmeGateway, acmeAdapter) {
		t.Fatalf("gateway keys %x, adapter keys %x", acmeGateway, acmeAdapter)
	}
	otherGateway, otherAdapter := keysOf("globex")
	if !slices.Equal(otherGateway, otherAdapter) {
		t.Fatal("keys differ for tenant globex")
	}
	if otherGateway[0] == acmeGateway[0] {
		t.Fatal("two tenants share a block key: the tenant salt is missing")
	}
}

// A fleet whose every backend renders tokens is keyed by tokens alone: the
// text is neither rendered nor hashed. One backend without a tokenizer
// among them brings the text's keys back, for it.
func TestApproximateKeysOnlyForBackendsWithoutTokens(t *testing.T) {
	type prompting struct {
		*enginetest.Backend
		enginetest.Prompts
	}
	exact := enginetest.New(engine.Info{Name: "exact", Model: "m", ContextSlot: 512, Slots: 1})
	plain := enginetest.New(engine.Info{Name: "plain", Model: "m", ContextSlot: 512, Slots: 1})
	req := engine.Request{Model: "m", Messages: []engine.Message{
		{Role: engine.RoleSystem, Content: strings.Repeat("A long system prompt. ", 20)},
		{Role: engine.RoleUser, Content: "hi"},
	}}
	for _, tc := range []struct {
		name       string
		fleet      []engine.Backend
		wantApprox bool
	}{
		{"every backend exact", []engine.Backend{prompting{exact, enginetest.Prompts{B: exact}}}, false},
		{"one without a tokenizer", []engine.Backend{prompting{exact, enginetest.Prompts{B: exact}}, plain}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Config{}, tc.fleet, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			k, err := r.key(context.Background(), req, r.members)
			if err != nil {
				t.Fatal(err)
			}
			if len(k.exact.Keys) == 0 || k.length != len(k.tokens) {
				t.Fatalf("exact keys %d over %d tokens, length %d: want the tokens keyed", len(k.exact.Keys), len(k.tokens), k.length)
			}
			if got := len(k.approx.Keys) > 0 && k.text != ""; got != tc.wantApprox {
				t.Errorf("approximate keys %d, text %d bytes; want them: %v", len(k.approx.Keys), len(k.text), tc.wantApprox)
			}
		})
	}
}
