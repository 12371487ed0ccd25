package engine_test

import (
	"context"
	"testing"

	"kvwin/engine"
)

// base is a backend with no optional ability.
type base struct{ name string }

func (b *base) Info() engine.Info { return engine.Info{Name: b.name} }
func (b *base) Generate(context.Context, engine.Request, engine.StreamFunc) (engine.Result, error) {
	return engine.Result{}, nil
}

// tokenizing is a backend that tokenizes: one token per byte.
type tokenizing struct{ base }

func (t *tokenizing) Tokenize(_ context.Context, text string, _ bool) ([]int, error) {
	return make([]int, len(text)), nil
}
func (t *tokenizing) Detokenize(context.Context, []int) (string, error) { return "", nil }

// counting wraps a backend and counts messages itself (a word a token).
type counting struct {
	base
	inner engine.Backend
}

func (c *counting) Unwrap() engine.Backend            { return c.inner }
func (c *counting) CountMessage(m engine.Message) int { return 1000 + len(m.Content) }

// plain wraps a backend and has no ability of its own.
type plain struct {
	base
	inner engine.Backend
}

func (p *plain) Unwrap() engine.Backend { return p.inner }

var (
	_ engine.Tokenizer      = (*tokenizing)(nil)
	_ engine.Unwrapper      = (*counting)(nil)
	_ engine.MessageCounter = (*counting)(nil)
	_ engine.Unwrapper      = (*plain)(nil)
)

func TestAs(t *testing.T) {
	tok := &tokenizing{base{"tok"}}
	cnt := &counting{base{"count"}, tok}
	for _, tc := range []struct {
		name string
		b    engine.Backend
		// wantTok and wantCount name the backend expected to answer each
		// ability ("" for absent).
		wantTok, wantCount string
	}{
		{"nil", nil, "", ""},
		{"bare backend", &base{"bare"}, "", ""},
		{"ability on the backend itself", tok, "tok", ""},
		{"one wrapper", &plain{base{"p"}, tok}, "tok", ""},
		{"chain of wrappers", &plain{base{"p1"}, &plain{base{"p2"}, &plain{base{"p3"}, tok}}}, "tok", ""},
		{"wrapper's own ability first, wrapped one below", &plain{base{"p"}, cnt}, "tok", "count"},
		{"wrapper holding nothing now", &plain{base{"p"}, nil}, "", ""},
		{"wrapped backend without the ability", &plain{base{"p"}, &base{"bare"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := engine.As[engine.Tokenizer](tc.b)
			if ok != (tc.wantTok != "") {
				t.Fatalf("As[Tokenizer] ok = %v, want %v", ok, tc.wantTok != "")
			}
			if ok {
				if name := got.(engine.Backend).Info().Name; name != tc.wantTok {
					t.Errorf("As[Tokenizer] found %q, want %q", name, tc.wantTok)
				}
				if ids, err := got.Tokenize(context.Background(), "abc", false); err != nil || len(ids) != 3 {
					t.Errorf("Tokenize through As = %v, %v; want 3 ids", ids, err)
				}
			} else if got != nil {
				t.Errorf("As[Tokenizer] absent returned %v, want the zero value", got)
			}
			mc, ok := engine.As[engine.MessageCounter](tc.b)
			if ok != (tc.wantCount != "") {
				t.Fatalf("As[MessageCounter] ok = %v, want %v", ok, tc.wantCount != "")
			}
			if ok && mc.CountMessage(engine.Message{Content: "xy"}) != 1002 {
				t.Errorf("CountMessage through As = %d, want the wrapper's 1002", mc.CountMessage(engine.Message{Content: "xy"}))
			}
		})
	}
}

// TestAsConcrete finds a concrete type below wrappers, as the dashboard
// finds a remote model's router.
func TestAsConcrete(t *testing.T) {
	tok := &tokenizing{base{"tok"}}
	got, ok := engine.As[*tokenizing](&plain{base{"p"}, &counting{base{"c"}, tok}})
	if !ok || got != tok {
		t.Fatalf("As[*tokenizing] = %p, %v; want %p", got, ok, tok)
	}
	if _, ok := engine.As[*counting](&plain{base{"p"}, tok}); ok {
		t.Fatal("As[*counting] found a type absent from the chain")
	}
}
