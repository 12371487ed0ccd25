package recall

import (
	"fmt"
	"reflect"
	"testing"

	"kvwin/engine"
	"kvwin/window"
)

// TestBM25Deterministic: the reference packet is the same every run. The
// turns share the ask's words in different orders and counts, so scores
// summed in map order could differ in their last bits and reorder ties.
func TestBM25Deterministic(t *testing.T) {
	// Many turns with the same words in different orders score the same
	// but for rounding; the others give the words different weights.
	var msgs []engine.Message
	words := []string{"violin", "garden", "lisbon", "oboe", "cider", "kayak", "tulip"}
	for i := 0; i < 300; i++ {
		text := fmt.Sprintf("%s %s %s %s %s %s %s", words[i%7], words[(i+3)%7], words[(i+1)%7], words[(i+5)%7], words[(i+2)%7], words[(i+6)%7], words[(i+4)%7])
		if i%3 == 0 {
			text = fmt.Sprintf("%s filler %d", words[i%7], i%5)
		}
		msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: text},
			engine.Message{Role: engine.RoleAssistant, Content: "ok"})
	}
	msgs = append(msgs, engine.Message{Role: engine.RoleUser, Content: "violin garden lisbon oboe cider kayak tulip?"})
	speaker := func(m engine.Message) string { return m.Role }
	first := bm25Window(msgs, window.ApproxCount, speaker, 512)
	if len(first.Packet) == 0 {
		t.Fatal("empty packet")
	}
	for run := 0; run < 50; run++ {
		if got := bm25Window(msgs, window.ApproxCount, speaker, 512); !reflect.DeepEqual(got, first) {
			t.Fatalf("run %d: packet %v, first run %v", run, got.Packet, first.Packet)
		}
	}
}
