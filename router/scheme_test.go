package router

import (
	"context"
	"kvwin/internal/ident"
	"slices"
	"testing"

	"kvwin/engine"
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
