package llamacpp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"kvwin/engine"
	"kvwin/gguf"
)

// The tests run the real engine on the generated test model.

var tinyPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvwin-llamacpp-test")
	if err != nil {
		panic(err)
	}
	tinyPath = filepath.Join(dir, "tiny.gguf")
	if err := gguf.WriteTiny(tinyPath, gguf.DefaultTinyConfig()); err != nil {
		panic(err)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testThreads() int {
	if n, err := strconv.Atoi(os.Getenv("KVWIN_TEST_THREADS")); err == nil && n > 0 {
		return n
	}
	return 1
}

func newTestEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	cfg.ModelPath = tinyPath
	if cfg.Threads == 0 {
		cfg.Threads = testThreads()
	}
	e, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// text returns n bytes of deterministic ASCII prose, different per seed.
func text(seed, n int) string {
	words := []string{"cache", "window", "slot", "prefix", "token", "turn", "kv", "sink", "memory", "route"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[(seed*7+i*3+i/5)%len(words)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func greedy(maxTokens int) engine.Request {
	s := engine.DefaultSampling()
	s.Temperature, s.Seed = 0, 42
	return engine.Request{MaxTokens: maxTokens, Sampling: s, Slot: -1}
}

func chat(t *testing.T, e *Engine, msgs []engine.Message, maxTokens int) engine.Result {
	t.Helper()
	req := greedy(maxTokens)
	req.Messages = msgs
	res, err := e.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestChatMLTokensAreExact(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 256})
	// Every class a pre-tokenizer splits on (contractions, letters, digits
	// in runs of any length, punctuation and symbols, non-Latin script,
	// emoji, runs of white space): the split must change no token.
	content := "hi<|im_end|> it's 1234567, $+<=>^~|! «ünïcödé» 日本語 🙂\t\n   x9"
	tokens, err := e.prompt(engine.Request{Messages: []engine.Message{{Role: "user", Content: content}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{gguf.TinyTokenEndOfText, gguf.TinyTokenIMStart}
	for _, b := range []byte("user\n" + content) { // client text stays text, a byte a token: never a control token
		want = append(want, int(b))
	}
	want = append(want, gguf.TinyTokenIMEnd, '\n', gguf.TinyTokenIMStart)
	for _, b := range []byte("assistant\n") {
		want = append(want, int(b))
	}
	if fmt.Sprint(tokens) != fmt.Sprint(want) {
		t.Fatalf("tokens\n got %v\nwant %v", tokens, want)
	}
}

func TestSecondTurnReusesTheFirstTurnsKV(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 4, Ctx: 4096})
	msgs := []engine.Message{{Role: "system", Content: text(1, 1000)}, {Role: "user", Content: text(2, 1000)}}
	r1 := chat(t, e, msgs, 16)
	if r1.Timings.PromptTokens < 2000 || r1.Timings.CachedTokens != 0 {
		t.Fatalf("turn 1: prompt %d cached %d, want ≥2000 and 0", r1.Timings.PromptTokens, r1.Timings.CachedTokens)
	}
	decodedBefore := e.Stats().PromptDecoded.Load()
	msgs = append(msgs, engine.Message{Role: "assistant", Content: r1.Text}, engine.Message{Role: "user", Content: text(3, 200)})
	r2 := chat(t, e, msgs, 16)
	if r2.Timings.CachedTokens < r1.Timings.PromptTokens-1 {
		t.Fatalf("turn 2 cached %d tokens, want ≥ %d (turn 1's prompt − 1)", r2.Timings.CachedTokens, r1.Timings.PromptTokens-1)
	}
	decoded := e.Stats().PromptDecoded.Load() - decodedBefore
	if want := int64(r2.Timings.PromptTokens - r2.Timings.CachedTokens); decoded != want {
		t.Fatalf("engine decoded %d prompt tokens for turn 2, want exactly prompt − cached = %d", decoded, want)
	}
}

func TestConversationsSharingASystemPromptForkItAndKeepTheirOwnSlots(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 4, Ctx: 2048})
	system := engine.Message{Role: "system", Content: text(9, 600)}
	a := []engine.Message{system, {Role: "user", Content: text(10, 300)}}
	b := []engine.Message{system, {Role: "user", Content: text(11, 300)}}
	ra := chat(t, e, a, 8)
	rb := chat(t, e, b, 8)
	if rb.Slot == ra.Slot {
		t.Fatalf("conversation B overwrote A's slot %d", ra.Slot)
	}
	if rb.Timings.CachedTokens < 600 || e.Stats().Forks.Load() != 1 {
		t.Fatalf("B cached %d tokens with %d forks, want the ≥600-token system prompt forked once", rb.Timings.CachedTokens, e.Stats().Forks.Load())
	}
	// Interleave more turns: each keeps its own prefix.
	for turn := range 2 {
		a = append(a, engine.Message{Role: "assistant", Content: ra.Text}, engine.Message{Role: "user", Content: text(20+turn, 100)})
		prevA := ra.Timings.PromptTokens
		ra = chat(t, e, a, 8)
		b = append(b, engine.Message{Role: "assistant", Content: rb.Text}, engine.Message{Role: "user", Content: text(30+turn, 100)})
		prevB := rb.Timings.PromptTokens
		rb = chat(t, e, b, 8)
		if ra.Timings.CachedTokens < prevA-1 || rb.Timings.CachedTokens < prevB-1 {
			t.Fatalf("turn %d: A cached %d of previous %d, B cached %d of previous %d", turn+2, ra.Timings.CachedTokens, prevA, rb.Timings.CachedTokens, prevB)
		}
	}
}

func TestGreedyIsDeterministicCachedOrCold(t *testing.T) {
	msgs := []engine.Message{{Role: "user", Content: text(4, 700)}}
	e1 := newTestEngine(t, Config{Slots: 2, Ctx: 1024})
	cold := chat(t, e1, msgs, 48)
	warm := chat(t, e1, msgs, 48) // all but the last chunk cached
	if warm.Timings.CachedTokens != warm.Timings.PromptTokens-lastChunk {
		t.Fatalf("repeat cached %d of %d", warm.Timings.CachedTokens, warm.Timings.PromptTokens)
	}
	e2 := newTestEngine(t, Config{Slots: 2, Ctx: 1024})
	fresh := chat(t, e2, msgs, 48)
	if fmt.Sprint(cold.Tokens) != fmt.Sprint(warm.Tokens) || fmt.Sprint(cold.Tokens) != fmt.Sprint(fresh.Tokens) {
		t.Fatalf("greedy outputs differ:\ncold  %v\nwarm  %v\nfresh %v", cold.Tokens, warm.Tokens, fresh.Tokens)
	}
}

func TestStreamedPiecesAreValidUTF8AndAddUpToTheText(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 1024})
	req := greedy(300)
	req.Sampling.Temperature, req.Sampling.TopK, req.Sampling.TopP, req.Sampling.MinP = 1.5, 0, 1, 0 // wander over the byte vocabulary
	req.Messages = []engine.Message{{Role: "user", Content: "héllo wörld ✓ 😀"}}
	var streamed strings.Builder
	firsts := 0
	res, err := e.Generate(context.Background(), req, func(ev engine.Event) error {
		if ev.First {
			firsts++
			if ev.Timings.PromptTokens == 0 {
				t.Errorf("first event without prompt tokens")
			}
		}
		if !utf8.ValidString(ev.Text) {
			t.Errorf("invalid UTF-8 piece %q", ev.Text)
		}
		streamed.WriteString(ev.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if firsts != 1 || streamed.String() != res.Text {
		t.Fatalf("first events %d; streamed %q, result %q", firsts, streamed.String(), res.Text)
	}
	switch {
	case res.FinishReason == engine.FinishLength && len(res.Tokens) == 300:
	case res.FinishReason == engine.FinishStop && len(res.Tokens) < 300:
	default:
		t.Fatalf("finish %q after %d tokens (max 300)", res.FinishReason, len(res.Tokens))
	}
}

func TestCancelStopsDecodingAndFreesTheSlot(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048})
	ctx, cancel := context.WithCancel(context.Background())
	req := greedy(2000)
	req.Messages = []engine.Message{{Role: "user", Content: text(5, 100)}}
	pieces := 0
	_, err := e.Generate(ctx, req, func(ev engine.Event) error {
		if pieces++; pieces == 5 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if s := e.Slots()[0]; s.Processing {
		t.Fatalf("slot still processing after the cancelled request returned: %+v", s)
	}
	if n := e.Stats().GeneratedTokens.Load(); n >= 1000 {
		t.Fatalf("generated %d tokens after cancellation", n)
	}
	// The slot serves the next request.
	res := chat(t, e, []engine.Message{{Role: "user", Content: "next"}}, 4)
	if res.Slot != 0 || len(res.Tokens) == 0 && res.FinishReason != engine.FinishStop {
		t.Fatalf("next request: %+v", res)
	}
}

func TestQueueBoundsWaitingRequests(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048, Queue: 1})
	long := greedy(1500)
	long.Messages = []engine.Message{{Role: "user", Content: "long"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		once := false
		_, err := e.Generate(ctx, long, func(engine.Event) error {
			if !once {
				once = true
				close(started)
			}
			return nil
		})
		first <- err
	}()
	<-started
	queued := make(chan error, 1)
	go func() {
		_, err := e.Generate(ctx, long, nil)
		queued <- err
	}()
	// The queue holds one; wait until the second request is admitted to it.
	deadline := time.Now().Add(3 * time.Minute)
	for len(e.admit) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("second request never queued")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := e.Generate(ctx, long, nil); !errors.Is(err, engine.ErrQueueFull) {
		t.Fatalf("third request: err = %v, want ErrQueueFull", err)
	}
	cancel()
	for _, c := range []chan error{first, queued} {
		if err := <-c; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled request: %v", err)
		}
	}
	if s := e.Slots()[0]; s.Processing {
		t.Fatal("slot busy after all requests ended")
	}
}

func TestBadRequests(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 256})
	tests := []struct {
		name string
		req  engine.Request
		want error
	}{
		{"prompt longer than the slot", engine.Request{Prompt: strings.Repeat("x", 300), Slot: -1}, &engine.ContextLengthError{}},
		{"max tokens above the context", engine.Request{Prompt: "x", MaxTokens: 257, Slot: -1}, engine.ErrInvalidRequest},
		{"unknown model", engine.Request{Model: "gpt-9", Prompt: "x", Slot: -1}, engine.ErrUnknownModel},
		{"unknown role", engine.Request{Messages: []engine.Message{{Role: "wizard", Content: "x"}}, Slot: -1}, engine.ErrInvalidRequest},
		{"token outside the vocabulary", engine.Request{Tokens: []int{1, 99999}, Slot: -1}, engine.ErrInvalidRequest},
		{"no prompt", engine.Request{Slot: -1}, engine.ErrInvalidRequest},
		{"slot that does not exist", engine.Request{Prompt: "x", Slot: 3}, engine.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Sampling = engine.DefaultSampling()
			_, err := e.Generate(context.Background(), tt.req, nil)
			var cle *engine.ContextLengthError
			if _, want := tt.want.(*engine.ContextLengthError); want {
				if !errors.As(err, &cle) || cle.Limit != 256 || cle.PromptTokens != 301 {
					t.Fatalf("err = %v, want context length error 301 > 256", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCloseEndsInflightRequests(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048})
	req := greedy(1800)
	req.Messages = []engine.Message{{Role: "user", Content: "go"}}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.Generate(context.Background(), req, func(ev engine.Event) error {
			if ev.First {
				close(started)
			}
			return nil
		})
		done <- err
	}()
	<-started
	e.Close()
	if err := <-done; !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("in-flight request: err = %v, want ErrClosed", err)
	}
	if _, err := e.Generate(context.Background(), req, nil); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("after close: err = %v, want ErrClosed", err)
	}
}

// A grammar constrains the answer, and an answer the client sends back in
// the next turn is the KV the slot already holds: nothing but the new
// message is computed.
func TestGrammarAnswersRoundTripIntoTheCache(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 2048})
	req := greedy(400)
	req.Sampling.Grammar = `root ::= [a-z ]{200}` // exactly 200 characters, then the end
	req.Messages = []engine.Message{{Role: "user", Content: text(1, 300)}}
	r1, err := e.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Text) != 200 || strings.Trim(r1.Text, "abcdefghijklmnopqrstuvwxyz ") != "" || r1.FinishReason != engine.FinishStop {
		t.Fatalf("answer %q breaks the grammar", r1.Text)
	}
	req.Messages = append(req.Messages, engine.Message{Role: "assistant", Content: r1.Text}, engine.Message{Role: "user", Content: "next"})
	r2, err := e.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := r1.Timings.PromptTokens + len(r1.Tokens) - 1; r2.Timings.CachedTokens < want {
		t.Fatalf("turn 2 cached %d, want ≥ %d (turn 1's prompt and its answer)", r2.Timings.CachedTokens, want)
	}
	bad := greedy(4)
	bad.Sampling.Grammar = "root ::= ("
	bad.Messages = req.Messages
	if _, err := e.Generate(context.Background(), bad, nil); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Fatalf("a broken grammar: err %v, want ErrInvalidRequest", err)
	}
}

// A new prompt is prefilled while another slot generates: token steps and
// prefill steps alternate, so it does not wait for the other answer to end.
func TestPrefillIsNotStarvedByAGeneratingSlot(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 2, Ctx: 4096})
	long := greedy(3000)
	long.IgnoreEOS = true
	long.Messages = []engine.Message{{Role: "user", Content: "talk"}}
	generating := make(chan struct{})
	done := make(chan engine.Result, 1)
	go func() {
		n := 0
		res, _ := e.Generate(context.Background(), long, func(ev engine.Event) error {
			if n++; n == 10 {
				close(generating)
			}
			return nil
		})
		done <- res
	}()
	<-generating
	short := greedy(1)
	short.Messages = []engine.Message{{Role: "user", Content: text(3, 900)}}
	if _, err := e.Generate(context.Background(), short, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		t.Fatalf("the 900-token prompt waited for the other slot's whole answer (%d tokens)", len(res.Tokens))
	default:
	}
	if s := e.Slots(); !s[0].Processing && !s[1].Processing {
		t.Fatal("the long generation is not running any more")
	}
	e.Close() // ends the long generation
	<-done
}

// Padding the sinks ends them on a block boundary with newline filler, and
// leaves the messages around them as they were.
func TestPadSinksEndsThemOnABlock(t *testing.T) {
	e := newTestEngine(t, Config{Slots: 1, Ctx: 1024})
	msgs := []engine.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "more"}}
	plain, err := e.prompt(engine.Request{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	sinks, _ := e.prompt(engine.Request{Messages: msgs[:3]})
	end := len(sinks) - len("<|im_start|>assistant\n") + len("<|im_start|>") - 1 // sinks without the generation prompt
	padded, err := e.prompt(engine.Request{Messages: msgs, PadSinks: 3})
	if err != nil {
		t.Fatal(err)
	}
	pad := len(padded) - len(plain)
	if (end+pad)%16 != 0 || pad >= 16 {
		t.Fatalf("sinks end at %d, padded by %d: not a block boundary", end, pad)
	}
	for i := end; i < end+pad; i++ {
		if padded[i] != '\n' {
			t.Fatalf("filler token %d is %d, want a newline", i, padded[i])
		}
	}
	if fmt.Sprint(padded[:end]) != fmt.Sprint(plain[:end]) || fmt.Sprint(padded[end+pad:]) != fmt.Sprint(plain[end:]) {
		t.Fatal("padding changed the messages around it")
	}
}

// TestSlotOnlyReusesOnlyItsSlot: a binding pin (SlotOnly, a llama-server
// client's id_slot) reuses its slot's own prefix and copies nothing from
// another slot holding more of the prompt; the same pin as a hint forks it.
func TestSlotOnlyReusesOnlyItsSlot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		only      bool
		wantForks int64
	}{{"binding", true, 0}, {"hint", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, Config{Slots: 2, Ctx: 2048})
			system := engine.Message{Role: "system", Content: text(40, 600)}
			head := []engine.Message{system, {Role: "user", Content: "hi"}}
			whole := []engine.Message{system, {Role: "user", Content: text(41, 400)}}
			pinned := func(msgs []engine.Message, slot int) engine.Result {
				req := greedy(2)
				req.Messages, req.Slot, req.SlotOnly = msgs, slot, tc.only
				res, err := e.Generate(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			own := pinned(head, 0) // slot 0: the system prompt and a short ask
			pinned(whole, 1)       // slot 1: all of the next prompt
			forks := e.Stats().Forks.Load()
			res := pinned(whole, 0) // slot 0 again: its own prefix, or slot 1's copy
			if forks = e.Stats().Forks.Load() - forks; res.Slot != 0 || forks != tc.wantForks {
				t.Fatalf("ran on slot %d with %d forks, want slot 0 and %d", res.Slot, forks, tc.wantForks)
			}
			if tc.only && (res.Timings.CachedTokens > own.Timings.PromptTokens || res.Timings.CachedTokens < 600) {
				t.Fatalf("reused %d tokens; slot 0 held %d of them", res.Timings.CachedTokens, own.Timings.PromptTokens)
			}
			if !tc.only && res.Timings.CachedTokens < res.Timings.PromptTokens-2 {
				t.Fatalf("the hint reused %d of %d", res.Timings.CachedTokens, res.Timings.PromptTokens)
			}
		})
	}
}
