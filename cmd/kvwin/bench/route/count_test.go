package route

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"kvwin/engine/llamaserver/llamaservertest"
)

// The bench's proxy sums timings.prompt_n of every /completion answer,
// streamed or whole, to exactly what the server computed.
func TestCountingProxySumsWhatTheServerComputed(t *testing.T) {
	for _, rules := range []llamaservertest.Rules{llamaservertest.Rules2026, llamaservertest.Rules2025} {
		srv := llamaservertest.Start(llamaservertest.Config{Slots: 2, Rules: rules})
		t.Cleanup(srv.Close)
		p, err := startCountingProxy(context.Background(), srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		prompt := llamaservertest.Encode("a prompt of some length, reused the second time", true, false)
		for i, stream := range []bool{true, true, false, false} {
			body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": 5 + i, "stream": stream, "id_slot": 0, "cache_prompt": true})
			resp, err := http.Post(p.url+"/completion", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		// Tokenizing passes through uncounted.
		resp, err := http.Post(p.url+"/tokenize", "application/json", bytes.NewReader([]byte(`{"content":"x"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := srv.Counts()
		if got := p.computed.Load(); got != int64(want.Computed) || p.answers.Load() != 4 || want.Reused == 0 {
			t.Fatalf("rules %d: proxy counted %d computed in %d answers; the server computed %d (reused %d) in %d", rules, got, p.answers.Load(), want.Computed, want.Reused, want.Requests)
		}
	}
}
