package ollama

import (
	"context"
	"net/http"
	"testing"
	"time"

	"kvwin/engine"
)

// TestServerIgnoringNumPredict: an Ollama that streams past num_predict
// is cut at max tokens, counted here, and its connection closed.
func TestServerIgnoringNumPredict(t *testing.T) {
	gone := make(chan int, 1)
	f := startFake(t, &fakeOllama{chat: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		n := 0
		defer func() { gone <- n }()
		for ; n < 100000; n++ {
			if _, err := w.Write([]byte(chunk("message", "ab") + "\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if r.Context().Err() != nil {
				return
			}
		}
	}})
	b := newBackend(t, f, Config{})
	var rec recorder
	res, err := b.Generate(context.Background(), engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, MaxTokens: 16, Slot: -1}, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != repeat("ab", 16) || res.FinishReason != engine.FinishLength || res.Timings.GeneratedTokens != 16 {
		t.Errorf("result %q, finish %q, %d tokens; want 16 × ab, length, 16", res.Text, res.FinishReason, res.Timings.GeneratedTokens)
	}
	text := ""
	for _, ev := range rec.events {
		text += ev.Text
	}
	if text != res.Text {
		t.Errorf("streamed %q, result %q", text, res.Text)
	}
	select {
	case n := <-gone:
		if n >= 100000 {
			t.Errorf("the server wrote all %d objects", n)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the server's request did not end: the connection was not closed")
	}
}

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}
