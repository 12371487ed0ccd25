package llamacpp

import (
	"testing"

	"kvwin/engine"
)

// The test model writes text: a greeting's greedy reply is printable ASCII,
// starts with text rather than end-of-generation, and runs to max_tokens
// (the model never ends a turn by itself).
func TestTinyModelRepliesWithPrintableText(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 512})
	for _, greeting := range []string{"Hello!", "Hi, how are you?"} {
		res := chat(t, e, []engine.Message{{Role: engine.RoleUser, Content: greeting}}, 48)
		t.Logf("%q -> %q", greeting, res.Text)
		if len(res.Tokens) != 48 || res.FinishReason != engine.FinishLength {
			t.Errorf("%q: %d tokens, finish %q; want 48 and length", greeting, len(res.Tokens), res.FinishReason)
		}
		if !printableASCII(res.Text) || len(res.Text) != 48 {
			t.Errorf("%q: reply %q is not 48 bytes of printable ASCII", greeting, res.Text)
		}
	}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\n' && (c < ' ' || c > '~') {
			return false
		}
	}
	return s != ""
}
