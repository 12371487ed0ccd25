package toolcall

import (
	"fmt"
	"strings"
	"testing"

	"kvwin/engine"
)

// BenchmarkAnswersRecall is Recall over an agent's history: 200 calls of
// about 1 KB of arguments each, all remembered.
func BenchmarkAnswersRecall(b *testing.B) {
	a := NewAnswers(0)
	var msgs []engine.Message
	for i := range 200 {
		args := fmt.Sprintf(`{"path":"/src/file%d.go","content":%q,"line":%d}`, i, strings.Repeat("code; ", 160), i)
		a.Remember("t", "<tool_call>\n{\"name\":\"write\",\"arguments\":"+args+"}\n</tool_call>")
		m, _ := Message(engine.RoleAssistant, "", call("write", args), "")
		msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: "go on"}, m)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, n := a.Recall("t", msgs); n != 200 {
			b.Fatalf("%d recalled", n)
		}
	}
}
