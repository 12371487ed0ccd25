package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/engine"
)

// TestGenerateStreamsAndMapsTimings: Ollama's streamed objects become
// events (the first with kvwin's estimates, since Ollama reports its
// counts only at the end) and its final metrics the result's timings.
func TestGenerateStreamsAndMapsTimings(t *testing.T) {
	hi := []engine.Message{{Role: "user", Content: "Hi"}} // rendered in 19 bytes
	tests := []struct {
		name   string
		fake   *fakeOllama // nil: the default fake
		req    engine.Request
		events []eventCopy
		text   string
		reason string
		gen    int
	}{
		{
			name:   "chat",
			req:    engine.Request{Messages: hi, MaxTokens: 8, Slot: -1},
			events: []eventCopy{{First: true, Text: "Hel", Prompt: 19, Estimated: true}, {Text: "lo"}},
			text:   "Hello", reason: engine.FinishStop, gen: 2,
		},
		{
			name:   "raw generate",
			fake:   &fakeOllama{answer: []string{"a", "", "b"}},
			req:    engine.Request{Prompt: "abc", MaxTokens: 8, Slot: -1}, // rendered in 4 bytes
			events: []eventCopy{{First: true, Text: "a", Prompt: 4, Estimated: true}, {Text: "b"}},
			text:   "ab", reason: engine.FinishStop, gen: 3,
		},
		{
			name: "stopped by num_predict",
			fake: &fakeOllama{chat: func(w http.ResponseWriter, r *http.Request) {
				writeNDJSON(w, chunk("message", "x"), final("message", "length", 100, 308731467, 2, 5792074))
			}},
			req:    engine.Request{Messages: hi, MaxTokens: 2, Slot: -1},
			events: []eventCopy{{First: true, Text: "x", Prompt: 19, Estimated: true}},
			text:   "x", reason: engine.FinishLength, gen: 2,
		},
		{
			// Nothing generated: the final object is the first event, and
			// it already has Ollama's figures.
			name:   "empty answer",
			fake:   &fakeOllama{answer: []string{}},
			req:    engine.Request{Messages: hi, MaxTokens: 8, Slot: -1},
			events: []eventCopy{{First: true, Prompt: 100, Estimated: true, PromptEval: 308731467}},
			text:   "", reason: engine.FinishStop, gen: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.fake == nil {
				tt.fake = &fakeOllama{}
			}
			f := startFake(t, tt.fake)
			b := newBackend(t, f, Config{})
			var rec recorder
			var firstToken time.Duration
			res, err := b.Generate(context.Background(), tt.req, func(ev engine.Event) error {
				if ev.First {
					firstToken = ev.Timings.FirstToken
				}
				if ev.Slot != -1 {
					t.Errorf("event slot %d, want -1", ev.Slot)
				}
				return rec.add(ev)
			})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if !reflect.DeepEqual(rec.events, tt.events) {
				t.Errorf("events\n got %+v\nwant %+v", rec.events, tt.events)
			}
			if firstToken <= 0 {
				t.Errorf("first event's FirstToken %v, want > 0", firstToken)
			}
			want := engine.Timings{
				PromptTokens: 100, CachedEstimated: true, PromptEval: 308731467, FirstToken: firstToken,
				GeneratedTokens: tt.gen, Decode: 5792074,
			}
			if res.Timings != want {
				t.Errorf("timings\n got %+v\nwant %+v", res.Timings, want)
			}
			if res.Text != tt.text || res.FinishReason != tt.reason || res.Slot != -1 || res.Tokens != nil {
				t.Errorf("result text %q reason %q slot %d tokens %v, want %q %q -1 nil",
					res.Text, res.FinishReason, res.Slot, res.Tokens, tt.text, tt.reason)
			}
		})
	}
}

// byteLevelCount is a prompt_eval_count for the fake as a byte-level
// vocabulary with ChatML would give it: each message's role and content,
// 4 template tokens around it, and the generation prompt.
func byteLevelCount(body []byte) int {
	var req struct {
		Messages []engine.Message `json:"messages"`
	}
	json.Unmarshal(body, &req)
	n := 1 + 11 // BOS, "<|im_start|>assistant\n"
	for _, m := range req.Messages {
		n += len(m.Role) + len(m.Content) + 4
	}
	return n
}

// TestCachedEstimate: what the backend estimates Ollama reused, over
// sequences of requests: a continued conversation is almost all cached, a
// new one nothing; the memory holds as many conversations as the server
// has slots; a num_ctx that grows (Ollama reloads the model) clears it.
// Every estimate is marked, and never the whole prompt.
func TestCachedEstimate(t *testing.T) {
	sysA := engine.Message{Role: "system", Content: strings.Repeat("You are assistant A. ", 100)} // 2,100 bytes
	sysB := engine.Message{Role: "system", Content: strings.Repeat("You are assistant B. ", 100)}
	ask := engine.Message{Role: "user", Content: "Tell me about the weather."}
	turn1A := []engine.Message{sysA, ask}
	turn2A := append(append([]engine.Message(nil), turn1A...),
		engine.Message{Role: "assistant", Content: "Hello"}, engine.Message{Role: "user", Content: "And tomorrow?"})
	turn1B := []engine.Message{sysB, ask}
	huge := append(append([]engine.Message(nil), turn1A...),
		engine.Message{Role: "assistant", Content: "Hello"}, engine.Message{Role: "user", Content: strings.Repeat("x", 3000)})

	type step struct {
		msgs   []engine.Message
		hit    bool // cached ≥ 90% of the prompt; else 0
		firstN bool // the first event already estimated a hit
	}
	tests := []struct {
		name  string
		slots int
		steps []step
	}{
		{name: "a conversation continued", slots: 1, steps: []step{{msgs: turn1A}, {msgs: turn2A, hit: true, firstN: true}}},
		{name: "the same prompt twice", slots: 1, steps: []step{{msgs: turn1A}, {msgs: turn1A, hit: true, firstN: true}}},
		{name: "another conversation", slots: 1, steps: []step{{msgs: turn1A}, {msgs: turn1B}}},
		{name: "one slot: B replaced A", slots: 1, steps: []step{{msgs: turn1A}, {msgs: turn1B}, {msgs: turn2A}}},
		{name: "two slots: A and B both held", slots: 2, steps: []step{{msgs: turn1A}, {msgs: turn1B}, {msgs: turn2A, hit: true, firstN: true}}},
		{name: "num_ctx grows: the model reloads", slots: 1, steps: []step{{msgs: turn1A}, {msgs: huge}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeOllama{answer: []string{"Hel", "lo"}, promptEval: byteLevelCount})
			b := newBackend(t, f, Config{Slots: tt.slots})
			for i, s := range tt.steps {
				var first engine.Timings
				res, err := b.Generate(context.Background(), engine.Request{Messages: s.msgs, MaxTokens: 16, Slot: -1},
					func(ev engine.Event) error {
						if ev.First {
							first = ev.Timings
						}
						return nil
					})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				tm := res.Timings
				if !tm.CachedEstimated || !first.CachedEstimated {
					t.Errorf("step %d: CachedEstimated %v (first event %v), want true", i, tm.CachedEstimated, first.CachedEstimated)
				}
				if tm.PromptTokens != byteLevelCount(mustJSON(s.msgs)) {
					t.Errorf("step %d: prompt tokens %d, want Ollama's %d", i, tm.PromptTokens, byteLevelCount(mustJSON(s.msgs)))
				}
				if tm.CachedTokens >= tm.PromptTokens || first.CachedTokens >= first.PromptTokens && first.PromptTokens > 0 {
					t.Errorf("step %d: cached %d of %d (first event %d of %d): never the whole prompt",
						i, tm.CachedTokens, tm.PromptTokens, first.CachedTokens, first.PromptTokens)
				}
				switch share := float64(tm.CachedTokens) / float64(tm.PromptTokens); {
				case s.hit && share < 0.9:
					t.Errorf("step %d: cached %d of %d (%.2f), want at least 90%%", i, tm.CachedTokens, tm.PromptTokens, share)
				case !s.hit && tm.CachedTokens != 0:
					t.Errorf("step %d: cached %d of %d, want 0", i, tm.CachedTokens, tm.PromptTokens)
				}
				if s.firstN != (first.CachedTokens > 0) {
					t.Errorf("step %d: first event estimated %d cached, want a hit %v", i, first.CachedTokens, s.firstN)
				}
			}
		})
	}
}

// mustJSON is msgs as the messages of a chat request body.
func mustJSON(msgs []engine.Message) []byte {
	data, _ := json.Marshal(map[string]any{"messages": msgs})
	return data
}

// TestInfo: before the model is read, Info says what the configuration
// says; after, the model's context (or the pinned one, or the fallback with
// a warning).
func TestInfo(t *testing.T) {
	tests := []struct {
		name    string
		show    string
		cfg     Config
		context int
		warn    bool
	}{
		{name: "llama", show: showLlama, context: 8192},
		{name: "pinned below the model", show: showLlama, cfg: Config{ContextLength: 4096, Slots: 4}, context: 4096},
		{name: "another architecture", show: `{"model_info":{"general.architecture":"qwen2","qwen2.context_length":32768}}`, context: 32768},
		{name: "no context length", show: `{"model_info":{"general.architecture":"mystery"}}`, context: FallbackContext, warn: true},
		{name: "no model info", show: `{}`, context: FallbackContext, warn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, &fakeOllama{show: answerWith(http.StatusOK, "application/json", tt.show)})
			var logs bytes.Buffer
			cfg := tt.cfg
			cfg.BaseURL, cfg.Model, cfg.Name = f.srv.URL, "m", "box-1"
			b, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			slots := max(1, cfg.Slots)
			if got, want := b.Info(), (engine.Info{Name: "box-1", Model: "m", Slots: slots}); got != want {
				t.Errorf("before: Info %+v, want %+v", got, want)
			}
			if _, err := b.LoadModelInfo(context.Background()); err != nil {
				t.Fatalf("LoadModelInfo: %v", err)
			}
			if got, want := b.Info(), (engine.Info{Name: "box-1", Model: "m", Slots: slots, ContextSlot: tt.context}); got != want {
				t.Errorf("after: Info %+v, want %+v", got, want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tt.warn {
				t.Errorf("warning logged %v, want %v: %s", warned, tt.warn, logs.String())
			}
			var req struct{ Model string }
			json.Unmarshal([]byte(f.requests("/api/show")[0].body), &req)
			if req.Model != "m" {
				t.Errorf("/api/show asked for %q, want m", req.Model)
			}
		})
	}
}

// TestAnAbandonedAnswerIsDrained: when the caller leaves mid-answer (its
// StreamFunc fails, or its context ends), Generate returns at once with
// the caller's error, and the rest of the answer is read to its end
// (drain.go: Ollama v0.9.6 leaks a request slot when a client closes its
// connection mid-answer): the client is still there when the server writes
// the answer's last lines, after Generate returned. Close does not cut a
// drain.
func TestAnAbandonedAnswerIsDrained(t *testing.T) {
	stop := errors.New("client went away")
	// drainFake answers "a", waits for gate, answers "b" and reports on
	// there whether the client was still there, then ends the answer.
	drainFake := func(gate <-chan struct{}, there chan<- bool) *fakeOllama {
		return &fakeOllama{chat: func(w http.ResponseWriter, r *http.Request) {
			writeNDJSON(w, chunk("message", "a"))
			<-gate
			io.WriteString(w, chunk("message", "b")+"\n")
			w.(http.Flusher).Flush()
			// The client reads on until the final line: its connection
			// cannot have closed yet, unless it was cut when it left.
			there <- r.Context().Err() == nil
			io.WriteString(w, final("message", "stop", 100, 1e6, 2, 1e6)+"\n")
		}}
	}
	req := engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}, Slot: -1}
	for _, tc := range []struct {
		name   string
		leave  func(cancel context.CancelFunc) engine.StreamFunc
		wantIs error
		close  bool
	}{
		{"stream error", func(context.CancelFunc) engine.StreamFunc { return func(engine.Event) error { return stop } }, stop, false},
		{"context ended", func(cancel context.CancelFunc) engine.StreamFunc {
			return func(engine.Event) error { cancel(); return nil }
		}, context.Canceled, false},
		// A gateway's reload closes its backends: cutting the drain then
		// is what leaks.
		{"closed meanwhile", func(context.CancelFunc) engine.StreamFunc { return func(engine.Event) error { return stop } }, stop, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate, there := make(chan struct{}), make(chan bool, 1)
			b := newBackend(t, startFake(t, drainFake(gate, there)), Config{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := b.Generate(ctx, req, tc.leave(cancel))
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("error %v, want %v", err, tc.wantIs)
			}
			if tc.close {
				b.Close()
			}
			close(gate) // Generate returned while the server still held the answer
			if !<-there {
				t.Error("the client had gone before the answer ended: the abandoned answer was cut, not drained")
			}
			b.drains.Wait()
		})
	}
}

// TestConcurrentGenerations: the backend is safe for concurrent use (run
// with -race).
func TestConcurrentGenerations(t *testing.T) {
	f := startFake(t, &fakeOllama{promptEval: byteLevelCount})
	b := newBackend(t, f, Config{Slots: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			msgs := []engine.Message{{Role: "system", Content: strings.Repeat("s", 1000*(i%3+1))}, {Role: "user", Content: "Hi"}}
			res, err := b.Generate(context.Background(), engine.Request{Messages: msgs, MaxTokens: 4, Slot: -1}, nil)
			if err == nil && res.Text != "Hello" {
				err = errors.New("wrong text " + res.Text)
			}
			errs <- err
			_ = b.Info()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(f.requests("/api/show")); n < 1 {
		t.Errorf("/api/show read %d times", n)
	}
}

// TestClosed: a closed backend refuses work.
func TestClosed(t *testing.T) {
	f := startFake(t, &fakeOllama{})
	b := newBackend(t, f, Config{})
	b.Close()
	b.Close()
	_, err := b.Generate(context.Background(), engine.Request{Messages: []engine.Message{{Role: "user", Content: "Hi"}}}, nil)
	if !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("error %v, want engine.ErrClosed", err)
	}
}
