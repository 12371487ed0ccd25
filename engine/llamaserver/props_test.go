package llamaserver

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

func TestLoadProps(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	got, err := b.LoadProps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Props{Slots: 4, ContextSlot: 8192, ModelPath: "/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf"}
	if got.ChatTemplate == "" || !strings.Contains(got.ChatTemplate, "<|im_start|>") {
		t.Errorf("chat template %q, want the fixture's ChatML template", got.ChatTemplate)
	}
	got.ChatTemplate = ""
	if got != want {
		t.Errorf("props %+v, want %+v", got, want)
	}
}

func TestSlotsAndHealth(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	if s := b.Slots(); s != nil {
		t.Errorf("Slots before FetchSlots = %v, want nil", s)
	}
	got, err := b.FetchSlots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.SlotState{{ID: 0, Context: 8192, Processing: true}, {ID: 1, Context: 8192}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FetchSlots = %+v, want %+v", got, want)
	}
	got[0].ID = 99 // the caller's copy
	if s := b.Slots(); !reflect.DeepEqual(s, want) {
		t.Errorf("Slots = %+v, want %+v", s, want)
	}
	if err := b.Health(context.Background()); err != nil {
		t.Errorf("Health: %v", err)
	}

	lb := answering(t, fileAnswer(http.StatusServiceUnavailable, "error_loading.json"), Config{})
	if err := lb.Health(context.Background()); !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "Loading model") {
		t.Errorf("Health of a loading server: %v, want ErrUnavailable saying Loading model", err)
	}
	if _, err := lb.FetchSlots(context.Background()); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("FetchSlots of a loading server: %v, want ErrUnavailable", err)
	}
}

// TestMetadataTimeout: a metadata call to a hung server ends after
// Config.Timeout as unavailable.
func TestMetadataTimeout(t *testing.T) {
	b := answering(t, http.HandlerFunc(hang), Config{Timeout: 50 * time.Millisecond})
	err := b.Health(context.Background())
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Errorf("err = %v, want ErrUnavailable after the timeout", err)
	}
}

func TestTokenizeDetokenize(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	ctx := context.Background()
	tests := []struct {
		special bool
		body    string
		want    []int
	}{
		{false, `{"content":"<|im_end|>a","add_special":false,"parse_special":false,"with_pieces":false}`, encode("<|im_end|>a", false, false, true)},
		{true, `{"content":"<|im_end|>a","add_special":true,"parse_special":true,"with_pieces":false}`, []int{1, 3, 100 + 'a'}},
	}
	for _, tt := range tests {
		got, err := b.Tokenize(ctx, "<|im_end|>a", tt.special)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Tokenize(special=%v) = %v, want %v", tt.special, got, tt.want)
		}
		bodies := f.requests("/tokenize")
		if last := bodies[len(bodies)-1]; last != tt.body {
			t.Errorf("request %s, want %s", last, tt.body)
		}
	}
	text, err := b.Detokenize(ctx, []int{3, 100 + 'a'})
	if err != nil || text != "<|im_end|>a" {
		t.Errorf("Detokenize = %q, %v", text, err)
	}
}

// TestTokenizeAnswers: /tokenize answers with pieces are understood;
// malformed ones are errors.
func TestTokenizeAnswers(t *testing.T) {
	tests := []struct {
		body string
		want []int
		err  string
	}{
		{`{"tokens":[{"id":123,"piece":"Hello"},{"id":164,"piece":[161]}]}`, []int{123, 164}, ""},
		{`{"tokens":[]}`, []int{}, ""},
		{`{"tokens":[1,"two"]}`, nil, "not an id"},
		{`{"tokens":[{"piece":"x"}]}`, nil, "has no id"},
		{`{"tokens":[-4]}`, nil, "negative id"},
		{`{}`, nil, "no tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			b := answering(t, jsonAnswer(http.StatusOK, tt.body), Config{})
			got, err := b.Tokenize(context.Background(), "x", false)
			if tt.err != "" {
				if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ErrUnavailable saying %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Tokenize = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want Config // the defaults filled in; zero when an error is wanted
		err  string
	}{
		{"defaults", Config{BaseURL: "http://gpu-1:8080/"},
			Config{BaseURL: "http://gpu-1:8080", Name: "gpu-1:8080", Timeout: DefaultTimeout, IdleTimeout: DefaultIdleTimeout,
				ConnectTimeout: DefaultConnectTimeout, FirstTokenTimeout: DefaultFirstTokenTimeout,
				MaxChunkBytes: DefaultMaxChunkBytes, MaxAnswerBytes: DefaultMaxAnswerBytes}, ""},
		{"path prefix kept", Config{BaseURL: "https://proxy/llama/a/", Name: "a", Timeout: time.Second, IdleTimeout: time.Minute, CacheReuse: 256, MaxChunkBytes: 1 << 10},
			Config{BaseURL: "https://proxy/llama/a", Name: "a", Timeout: time.Second, IdleTimeout: time.Minute, CacheReuse: 256,
				ConnectTimeout: DefaultConnectTimeout, FirstTokenTimeout: DefaultFirstTokenTimeout, MaxChunkBytes: 1 << 10, MaxAnswerBytes: DefaultMaxAnswerBytes}, ""},
		{"no URL", Config{}, Config{}, "no base URL"},
		{"no scheme", Config{BaseURL: "gpu-1:8080"}, Config{}, "scheme"},
		{"no host", Config{BaseURL: "http:///x"}, Config{}, "no host"},
		{"query", Config{BaseURL: "http://gpu-1/?model=x"}, Config{}, "query"},
		{"negative timeout", Config{BaseURL: "http://gpu-1", Timeout: -1}, Config{}, "timeout"},
		{"negative idle timeout", Config{BaseURL: "http://gpu-1", IdleTimeout: -1}, Config{}, "idle timeout"},
		{"negative first-token timeout", Config{BaseURL: "http://gpu-1", FirstTokenTimeout: -1}, Config{}, "first-token timeout"},
		{"negative connect timeout", Config{BaseURL: "http://gpu-1", ConnectTimeout: -1}, Config{}, "connect timeout"},
		{"negative chunk limit", Config{BaseURL: "http://gpu-1", MaxChunkBytes: -1}, Config{}, "byte limits"},
		{"negative cache reuse", Config{BaseURL: "http://gpu-1", CacheReuse: -1}, Config{}, "cache reuse"},
		{"client with a timeout", Config{BaseURL: "http://gpu-1", HTTPClient: &http.Client{Timeout: time.Second}}, Config{}, "would cut long generations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := tt.cfg.withDefaults()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to say %q", err, tt.err)
				}
				if _, err := New(tt.cfg, nil); err == nil {
					t.Fatal("New accepted the config")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("config %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestClosed: a closed backend refuses work.
func TestClosed(t *testing.T) {
	f := startFake(t, &fakeServer{})
	b := f.backend(t, Config{})
	_ = b.Close()
	_ = b.Close()
	if _, err := b.Generate(context.Background(), engine.Request{Tokens: []int{1}}, nil); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Generate after Close: %v", err)
	}
}

// Whether a server's slots can seed each other is read from the server: a
// kvwin node says so in its /props, a llama-server (the recorded build's
// /props) says nothing and cannot.
func TestSharesPrefixesIsReadFromProps(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Handler
		want bool
	}{
		{"llama-server 2025-06", fileAnswer(http.StatusOK, "llama-server-2025-06/props.response.json"), false},
		{"kvwin node", jsonAnswer(http.StatusOK, `{"default_generation_settings":{"n_ctx":512},"total_slots":2,"model_path":"tiny","kvwin_shares_prefixes":true}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := answering(t, tc.h, Config{})
			p, err := b.LoadProps(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if p.SharesPrefixes != tc.want || b.Info().SharesPrefixes != tc.want {
				t.Errorf("props say shares prefixes %v, Info %v; want %v", p.SharesPrefixes, b.Info().SharesPrefixes, tc.want)
			}
		})
	}
}
