package chattemplate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kvwin/engine"
)

// BenchmarkRender50Turns: what rendering costs per request (marked and
// plain renderings, alignment) on a 50-message Llama 3 conversation of
// about 25 KB.
func BenchmarkRender50Turns(b *testing.B) {
	tm, err := Parse(Config{Source: readB(b, "llama3-instruct.jinja"), BOS: "<|begin_of_text|>"})
	if err != nil {
		b.Fatal(err)
	}
	var msgs []engine.Message
	for i := range 50 {
		role := engine.RoleUser
		if i%2 == 1 {
			role = engine.RoleAssistant
		}
		msgs = append(msgs, engine.Message{Role: role, Content: strings.Repeat("the cache keeps the prefix ", 18)})
	}
	b.ResetTimer()
	for range b.N {
		if _, ok, err := tm.Render(msgs, nil, true); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func readB(b *testing.B, name string) string {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		b.Fatal(err)
	}
	return string(data)
}
