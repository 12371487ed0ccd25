package llamaserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kvwin/engine"
)

// runaway is a /completion that ignores n_predict: it streams chunks
// (each text, one token id) until the client goes, then reports how many it
// wrote on gone.
func runaway(chunks int, text string, gone chan<- int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		n := 0
		defer func() { gone <- n }()
		for ; n < chunks; n++ {
			line := fmt.Sprintf(`data: {"content":%q,"tokens":[%d],"stop":false,"id_slot":0,"tokens_predicted":%d,"tokens_evaluated":3,"timings":{"cache_n":0,"prompt_n":3}}`+"\n\n", text, 100+n%50, n+1)
			if _, err := w.Write([]byte(line)); err != nil {
				return
			}
			fl.Flush()
			if r.Context().Err() != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`data: {"content":"","stop":true,"stop_type":"eos","tokens_predicted":` + fmt.Sprint(chunks) + `,"tokens_evaluated":3,"timings":{"cache_n":0,"prompt_n":3,"predicted_n":` + fmt.Sprint(chunks) + "}}\n\n"))
	}
}

// TestServerIgnoringMaxTokens: a server that generates past n_predict is
// cut off at max tokens counted by the gateway, or at the answer's byte
// limit, and its connection is closed (it stops being read).
func TestServerIgnoringMaxTokens(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		maxTokens  int
		text       string
		wantTokens int
	}{
		{"max tokens", Config{}, 16, "ab", 16},
		{"answer bytes", Config{MaxAnswerBytes: 100}, 1000, "0123456789", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gone := make(chan int, 1)
			f := startFake(t, &fakeServer{completion: runaway(100000, tt.text, gone)})
			b := f.backend(t, tt.cfg)
			var events, text int
			res, err := b.Generate(context.Background(), engine.Request{Tokens: []int{1, 2, 3}, MaxTokens: tt.maxTokens, Slot: -1}, func(ev engine.Event) error {
				events++
				text += len(ev.Text)
				return nil
			})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if len(res.Tokens) != tt.wantTokens || res.Timings.GeneratedTokens != tt.wantTokens || res.FinishReason != engine.FinishLength {
				t.Errorf("%d tokens (%d counted), finish %q; want %d, length", len(res.Tokens), res.Timings.GeneratedTokens, res.FinishReason, tt.wantTokens)
			}
			if want := tt.wantTokens * len(tt.text); text != want || len(res.Text) != want {
				t.Errorf("%d bytes streamed, %d in the result; want %d", text, len(res.Text), want)
			}
			select {
			case n := <-gone:
				if n >= 100000 {
					t.Errorf("the server wrote all %d chunks: the gateway read them all", n)
				}
			case <-time.After(3 * time.Minute):
				t.Fatal("the server's request did not end: the connection was not closed")
			}
		})
	}
}

// TestServerHonouringMaxTokensIsNotCut: a server that stops at n_predict
// keeps its own final object (timings, finish reason).
func TestServerHonouringMaxTokensIsNotCut(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	res, err := b.Generate(context.Background(), engine.Request{Tokens: make([]int, 248), MaxTokens: 4, Slot: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 4 || res.FinishReason != recorded.FinishReason || res.Timings.Decode != recorded.Timings.Decode {
		t.Errorf("result %+v, want the recorded one", res)
	}
}

// hugeChunk is a /completion whose chunk (the first, or after one small
// one) is size bytes of text on one line, written from one small buffer;
// wrote counts the bytes the server got written.
func hugeChunk(size int, after bool, wrote *atomic.Int64, gone chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer close(gone)
		w.Header().Set("Content-Type", "text/event-stream")
		if after {
			_, _ = w.Write([]byte(`data: {"content":"a","tokens":[1],"stop":false,"tokens_evaluated":3,"timings":{"cache_n":0,"prompt_n":3}}` + "\n\n"))
		}
		_, _ = w.Write([]byte(`data: {"content":"`))
		buf := bytes.Repeat([]byte("x"), 64<<10)
		for n := 0; n < size; n += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
			wrote.Add(int64(len(buf)))
		}
		_, _ = w.Write([]byte(`","stop":true}` + "\n\n"))
	}
}

// TestHugeChunk: a 60 MB chunk is not read into memory: the answer fails
// (before any event, as an unavailable server a router fails over from),
// the gateway reads about its chunk limit of it and closes the connection.
func TestHugeChunk(t *testing.T) {
	const size, limit = 60 << 20, 1 << 20
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("after a first chunk=%v", after), func(t *testing.T) {
			var wrote atomic.Int64
			gone := make(chan struct{})
			f := startFake(t, &fakeServer{completion: hugeChunk(size, after, &wrote, gone)})
			b := f.backend(t, Config{MaxChunkBytes: limit})
			if _, err := b.Prompt(context.Background(), engine.Request{Tokens: []int{1}}); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var before, after2 runtime.MemStats
			runtime.ReadMemStats(&before)
			events := 0
			_, err := b.Generate(context.Background(), engine.Request{Tokens: []int{1, 2, 3}, MaxTokens: 16, Slot: -1}, func(engine.Event) error { events++; return nil })
			runtime.ReadMemStats(&after2)
			if err == nil || !strings.Contains(err.Error(), "longer than the limit") {
				t.Fatalf("err = %v, want the chunk refused", err)
			}
			if errors.Is(err, engine.ErrUnavailable) != (events == 0) {
				t.Errorf("err = %v after %d events: unavailable exactly when nothing was relayed", err, events)
			}
			if alloc := after2.TotalAlloc - before.TotalAlloc; alloc > 16*limit {
				t.Errorf("reading the answer allocated %d bytes, want under %d (the chunk is %d)", alloc, 16*limit, size)
			}
			select {
			case <-gone:
			case <-time.After(3 * time.Minute):
				t.Fatal("the server's request did not end: the connection was not closed")
			}
			if n := wrote.Load(); n >= size {
				t.Errorf("the server wrote all %d bytes", n)
			}
		})
	}
}
