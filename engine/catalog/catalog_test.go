package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
)

// quiet discards the catalog's logs.
var quiet = slog.New(slog.DiscardHandler)

// fake is a backend without optional abilities that records what it was
// asked and whether it was closed.
type fake struct {
	name   string
	mu     sync.Mutex
	models []string // req.Model of each Generate and Embed
	closed bool
}

func (f *fake) Info() engine.Info { return engine.Info{Name: f.name} }
func (f *fake) Generate(_ context.Context, req engine.Request, _ engine.StreamFunc) (engine.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.models = append(f.models, req.Model)
	return engine.Result{Text: f.name}, nil
}
func (f *fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}
func (f *fake) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// tokenizing tokenizes (one id per byte, offset by 100), reads and
// reports its slots and knows its template: an embedded engine's kind.
type tokenizing struct{ fake }

func (t *tokenizing) Tokenize(_ context.Context, text string, _ bool) ([]int, error) {
	ids := make([]int, len(text))
	for i := range ids {
		ids[i] = 100 + int(text[i])
	}
	return ids, nil
}
func (t *tokenizing) Detokenize(context.Context, []int) (string, error) { return "", nil }
func (t *tokenizing) Slots() []engine.SlotState                         { return []engine.SlotState{{ID: 7}} }
func (t *tokenizing) ChatTemplate() string                              { return "tmpl-" + t.name }

// reading reads its slots and embeds: a llama-server's kind.
type reading struct{ fake }

func (r *reading) ReadSlots(context.Context) ([]engine.SlotContent, error) {
	return []engine.SlotContent{{ID: 3, Count: 42}}, nil
}
func (r *reading) Embed(_ context.Context, req engine.EmbedRequest) (engine.Embeddings, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.models = append(r.models, req.Model)
	return engine.Embeddings{Vectors: [][]float32{{1}}}, nil
}

var (
	_ Engine                       = (*fake)(nil)
	_ engine.Tokenizer             = (*tokenizing)(nil)
	_ engine.SlotReporter          = (*tokenizing)(nil)
	_ engine.ChatTemplater         = (*tokenizing)(nil)
	_ engine.SlotReader            = (*reading)(nil)
	_ engine.Embedder              = (*reading)(nil)
	_ engine.Tokenizer             = (*rich)(nil)
	_ engine.SlotReader            = (*rich)(nil)
	_ engine.ConversationForgetter = (*rich)(nil)
)

// rich has both kinds' abilities and forgets conversations.
type rich struct {
	tokenizing
	r reading
}

func (r *rich) ReadSlots(ctx context.Context) ([]engine.SlotContent, error) {
	return r.r.ReadSlots(ctx)
}
func (r *rich) ForgetConversation(context.Context, string, string) (int, error) {
	return 5, nil
}

// holdErr is what an ability's ask answers when engine.Hold fails: not
// found, or the load's failure.
func holdErr(err error) (string, bool) {
	if errors.Is(err, engine.ErrNotSupported) {
		return "", false
	}
	return "load failed", true
}

// abilities are what a test asks an entry for, each held (engine.Hold) and
// answering from the backend found (so a test sees that the call reaches
// it).
var abilities = []struct {
	name string
	ask  func(b engine.Backend) (string, bool)
}{
	{"Tokenizer", func(b engine.Backend) (string, bool) {
		t, release, err := engine.Hold[engine.Tokenizer](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		defer release()
		ids, err := t.Tokenize(context.Background(), "A", false)
		if err != nil || len(ids) != 1 {
			return "error", true
		}
		return strconv.Itoa(ids[0]), true
	}},
	{"SlotReader", func(b engine.Backend) (string, bool) {
		r, release, err := engine.Hold[engine.SlotReader](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		defer release()
		s, err := r.ReadSlots(context.Background())
		if err != nil || len(s) != 1 {
			return "error", true
		}
		return strconv.Itoa(s[0].Count), true
	}},
	{"SlotReporter", func(b engine.Backend) (string, bool) {
		r, release, err := engine.Hold[engine.SlotReporter](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		defer release()
		return strconv.Itoa(r.Slots()[0].ID), true
	}},
	{"ChatTemplater", func(b engine.Backend) (string, bool) {
		t, release, err := engine.Hold[engine.ChatTemplater](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		defer release()
		return t.ChatTemplate(), true
	}},
	{"ConversationForgetter", func(b engine.Backend) (string, bool) {
		f, release, err := engine.Hold[engine.ConversationForgetter](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		defer release()
		n, err := f.ForgetConversation(context.Background(), "t", "c")
		if err != nil {
			return "error", true
		}
		return strconv.Itoa(n), true
	}},
	{"Embedder", func(b engine.Backend) (string, bool) {
		e, release, err := engine.Hold[engine.Embedder](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		defer release()
		emb, err := e.Embed(context.Background(), engine.EmbedRequest{Model: "m", Inputs: []string{"x"}})
		if errors.Is(err, engine.ErrNotSupported) {
			return "not supported", true
		}
		if err != nil {
			return "error", true
		}
		return strconv.Itoa(len(emb.Vectors)), true
	}},
	{"Prompter", func(b engine.Backend) (string, bool) {
		_, release, err := engine.Hold[engine.Prompter](context.Background(), b)
		if err != nil {
			return holdErr(err)
		}
		release()
		return "", true
	}},
}

// TestEntryExposesAbilities: an entry, embedded or remote, held with
// engine.Hold, has exactly the abilities of the backend it holds, and a
// call through it reaches that backend; an embedded one is loaded to be
// held.
func TestEntryExposesAbilities(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend Engine
		remote  bool
		openErr error
		want    map[string]string // ability → what its call answers; absent: not found
	}{
		{"embedded tokenizer", &tokenizing{fake{name: "e"}}, false, nil,
			map[string]string{"Tokenizer": "165", "SlotReporter": "7", "ChatTemplater": "tmpl-e"}},
		{"remote slot reader and embedder", &reading{fake{name: "r"}}, true, nil,
			map[string]string{"SlotReader": "42", "Embedder": "1"}},
		{"remote with every kind", &rich{tokenizing: tokenizing{fake{name: "x"}}}, true, nil,
			map[string]string{"Tokenizer": "165", "SlotReporter": "7", "ChatTemplater": "tmpl-x", "SlotReader": "42", "ConversationForgetter": "5", "Embedder": "not supported"}},
		{"embedded without abilities", &fake{name: "bare"}, false, nil, map[string]string{}},
		// Holding a model that cannot load is the load's failure, whatever
		// the ability.
		{"embedded failing to load", &tokenizing{fake{name: "f"}}, false, errors.New("no such file"),
			map[string]string{"Tokenizer": "load failed", "SlotReader": "load failed", "SlotReporter": "load failed",
				"ChatTemplater": "load failed", "ConversationForgetter": "load failed", "Embedder": "load failed", "Prompter": "load failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opens := 0
			m := Model{Name: "m", Info: engine.Info{Model: "m"}}
			if tc.remote {
				m.Remote = tc.backend
			}
			c, err := New(Config{Log: quiet, Models: []Model{m}, Open: func(Model) (Engine, error) {
				opens++
				if tc.openErr != nil {
					return nil, tc.openErr
				}
				return tc.backend, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.Select("m")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range abilities {
				got, ok := a.ask(b)
				want, wantOK := tc.want[a.name]
				if ok != wantOK || got != want {
					t.Errorf("%s through the entry: %q, found %v; want %q, found %v", a.name, got, ok, want, wantOK)
				}
			}
			if tc.remote && opens != 0 {
				t.Errorf("a remote backend was opened %d times", opens)
			}
			if !tc.remote && tc.openErr == nil && opens != 1 {
				t.Errorf("the embedded backend was opened %d times, want once (loaded on the first ability asked, kept)", opens)
			}
		})
	}
}

// TestRemoteServedUnderBackendsName: a remote entry's requests reach its
// backend without the entry's name, and its embeddings too.
func TestRemoteServedUnderBackendsName(t *testing.T) {
	r := &reading{fake{name: "r"}}
	c, err := New(Config{Log: quiet, Models: []Model{{Name: "alias", Remote: r}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(context.Background(), engine.Request{Model: "alias:latest", Prompt: "p"}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := c.Select("alias")
	emb, ok := engine.As[engine.Embedder](b)
	if !ok {
		t.Fatal("no Embedder found through the entry")
	}
	if _, err := emb.Embed(context.Background(), engine.EmbedRequest{Model: "alias"}); err != nil {
		t.Fatal(err)
	}
	if len(r.models) != 2 || r.models[0] != "" || r.models[1] != "" {
		t.Fatalf("the backend was asked for models %q, want two \"\"", r.models)
	}
	if _, err := c.Select("other"); !errors.Is(err, engine.ErrUnknownModel) {
		t.Fatalf("Select(other) = %v, want ErrUnknownModel", err)
	}
}

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestLoadUnload: models load on first use; under MaxLoaded the least
// recently used idle one is unloaded to make room; a TTL unloads an idle
// one; Close unloads the rest. The counters and states say so.
func TestLoadUnload(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	engines := map[string][]*fake{}
	reg := prometheus.NewRegistry()
	c, err := New(Config{Log: quiet,
		Models: []Model{{Name: "a", TTL: time.Minute}, {Name: "b"}, {Name: "c"}}, MaxLoaded: 2, Now: clk.now, Metrics: reg,
		Open: func(m Model) (Engine, error) {
			f := &fake{name: m.Name}
			engines[m.Name] = append(engines[m.Name], f)
			return f, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(model string) {
		t.Helper()
		res, err := c.Generate(context.Background(), engine.Request{Model: model, Prompt: "p"}, nil)
		if err != nil || res.Text != model {
			t.Fatalf("Generate(%s) = %q, %v", model, res.Text, err)
		}
		clk.add(time.Second)
	}
	states := func() string {
		s := ""
		for _, m := range c.Models() {
			s += m.Name + "=" + m.State + " "
		}
		return s
	}
	if got := states(); got != "a=idle b=idle c=idle " {
		t.Fatalf("before use: %s", got)
	}
	gen("a")
	gen("b")
	gen("a") // b is now the least recently used
	gen("c")
	if got := states(); got != "a=loaded b=idle c=loaded " {
		t.Fatalf("after a b a c under max 2: %s", got)
	}
	if !engines["b"][0].isClosed() || engines["a"][0].isClosed() {
		t.Fatal("b, the least recently used, should be the one closed")
	}
	c.expire() // a used 2s ago, TTL a minute
	if got := states(); got != "a=loaded b=idle c=loaded " {
		t.Fatalf("before a's TTL: %s", got)
	}
	clk.add(time.Minute)
	c.expire()
	if got := states(); got != "a=idle b=idle c=loaded " || !engines["a"][0].isClosed() {
		t.Fatalf("after a's TTL: %s (a closed: %v)", got, engines["a"][0].isClosed())
	}
	gen("a") // loads it anew
	if len(engines["a"]) != 2 {
		t.Fatalf("a opened %d times, want 2", len(engines["a"]))
	}
	c.Close()
	if got := states(); got != "a=idle b=idle c=idle " || !engines["a"][1].isClosed() || !engines["c"][0].isClosed() {
		t.Fatalf("after Close: %s", got)
	}
	got := counters(t, reg)
	for series, want := range map[string]float64{
		"kvwin_model_loads_total a": 2, "kvwin_model_loads_total b": 1, "kvwin_model_loads_total c": 1,
		"kvwin_model_unloads_total a": 2, "kvwin_model_unloads_total b": 1, "kvwin_model_unloads_total c": 1,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	if len(got) != 6 {
		t.Errorf("registered series: %v; want 6", got)
	}
}

// counters reads every counter reg holds, by "name model".
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			model := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					model = l.GetValue()
				}
			}
			out[f.GetName()+" "+model] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestInFlightNotUnloaded: a model with a generation running is not
// unloaded to make room; the other waits until its context ends, and a
// failed load is reported and retried.
func TestInFlightNotUnloaded(t *testing.T) {
	started, finish := make(chan struct{}), make(chan struct{})
	fail := true
	c, err := New(Config{Log: quiet,
		Models: []Model{{Name: "a"}, {Name: "b"}}, MaxLoaded: 1,
		Open: func(m Model) (Engine, error) {
			if m.Name == "a" {
				return &blocking{fake: fake{name: "a"}, started: started, finish: finish}, nil
			}
			if fail {
				fail = false
				return nil, errors.New("disk on fire")
			}
			return &fake{name: m.Name}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := c.Generate(context.Background(), engine.Request{Model: "a"}, nil)
		done <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // b must wait for room: a is busy; an ended context ends the wait
	if _, err := c.Generate(ctx, engine.Request{Model: "b"}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("b while a runs under max 1: %v, want a wait ended by its context", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(context.Background(), engine.Request{Model: "b"}, nil); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("b's failing load: %v, want ErrUnavailable", err)
	}
	if st := c.Models()[1]; st.State != Failed || st.LastError != "disk on fire" {
		t.Fatalf("b after its failed load: %+v", st)
	}
	if _, err := c.Generate(context.Background(), engine.Request{Model: "b"}, nil); err != nil {
		t.Fatalf("b's retried load: %v", err)
	}
	if st := c.Models(); st[0].State != Idle || st[1].State != Loaded {
		t.Fatalf("after b loaded: %+v", st)
	}
}

// blocking is a fake whose Generate runs until finish is closed.
type blocking struct {
	fake
	started, finish chan struct{}
}

func (b *blocking) Generate(ctx context.Context, req engine.Request, fn engine.StreamFunc) (engine.Result, error) {
	close(b.started)
	<-b.finish
	return b.fake.Generate(ctx, req, fn)
}

// readied is a remote backend that says whether it is ready.
type readied struct {
	fake
	err error
}

func (r *readied) Ready() error { return r.err }

var _ engine.Readier = (*readied)(nil)

// TestReady: a catalog is ready while one model can be served: an
// embedded one always (a failed load is retried), a remote one while its
// backend says so (found below the entry's wrapper).
func TestReady(t *testing.T) {
	down := fmt.Errorf("%w: no healthy backend", engine.ErrUnavailable)
	for _, tc := range []struct {
		name   string
		models []Model
		ready  bool
	}{
		{"one embedded", []Model{{Name: "e"}}, true},
		{"remote ready", []Model{{Name: "r", Remote: &readied{}}}, true},
		{"remote down", []Model{{Name: "r", Remote: &readied{err: down}}}, false},
		{"every remote down", []Model{{Name: "r1", Remote: &readied{err: down}}, {Name: "r2", Remote: &readied{err: down}}}, false},
		{"one remote down, one up", []Model{{Name: "r1", Remote: &readied{err: down}}, {Name: "r2", Remote: &readied{}}}, true},
		{"remote down, embedded", []Model{{Name: "r", Remote: &readied{err: down}}, {Name: "e"}}, true},
		{"remote without a readiness", []Model{{Name: "r", Remote: &fake{}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Log: quiet, Models: tc.models, Open: func(Model) (Engine, error) { return &fake{}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Ready()
			if (err == nil) != tc.ready {
				t.Fatalf("Ready() = %v, want ready %v", err, tc.ready)
			}
			if err != nil && (!errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), tc.models[0].Name+":")) {
				t.Fatalf("Ready() = %v: want ErrUnavailable naming the models", err)
			}
		})
	}
}

// TestFindingNeverLoadsHoldingKeeps: engine.As through an entry whose
// model is not loaded finds nothing and loads nothing; engine.Hold loads
// it and keeps it loaded until release, so another model waiting for the
// room (MaxLoaded 1) gets it only then; once loaded, As finds its
// abilities without holding it.
func TestFindingNeverLoadsHoldingKeeps(t *testing.T) {
	opens := map[string]int{}
	c, err := New(Config{Log: quiet, Models: []Model{{Name: "a"}, {Name: "b"}}, MaxLoaded: 1,
		Open: func(m Model) (Engine, error) {
			opens[m.Name]++
			return &tokenizing{fake{name: m.Name}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, _ := c.Select("a")
	b, _ := c.Select("b")
	if _, ok := engine.As[engine.Tokenizer](a); ok || opens["a"] != 0 {
		t.Fatalf("As on an unloaded model: found %v, opened %d times; want neither", ok, opens["a"])
	}
	tk, release, err := engine.Hold[engine.Tokenizer](context.Background(), a)
	if err != nil || opens["a"] != 1 {
		t.Fatalf("Hold: %v, opened %d times; want once", err, opens["a"])
	}
	if ids, err := tk.Tokenize(context.Background(), "A", false); err != nil || len(ids) != 1 || ids[0] != 165 {
		t.Fatalf("the held tokenizer answered %v, %v", ids, err)
	}
	if _, ok := engine.As[engine.SlotReporter](a); !ok {
		t.Fatal("As on a loaded model does not find its abilities")
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, rel, err := engine.Hold[engine.Tokenizer](gone, b); err == nil {
		rel()
		t.Fatal("b was loaded while a, held, took the only room")
	}
	release()
	_, rel, err := engine.Hold[engine.Tokenizer](context.Background(), b)
	if err != nil {
		t.Fatalf("after a's release, b: %v", err)
	}
	rel()
	if _, ok := engine.As[engine.Tokenizer](a); ok {
		t.Fatal("a still found loaded after b took its room")
	}
	if _, _, err := engine.Hold[engine.Embedder](context.Background(), b); !errors.Is(err, engine.ErrNotSupported) {
		t.Fatalf("Hold of an ability the engine lacks: %v, want ErrNotSupported", err)
	}
}
