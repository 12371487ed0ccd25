package ollama

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseURL: the --backend ollama=URL form, and what it refuses.
func TestParseURL(t *testing.T) {
	tests := []struct {
		raw     string
		want    Config
		message string // a refused URL's error says it
	}{
		{raw: "http://gpu-1:11434?model=llama3.1:8b", want: Config{BaseURL: "http://gpu-1:11434", Model: "llama3.1:8b"}},
		{raw: "https://proxy.local/ollama/?model=qwen2.5", want: Config{BaseURL: "https://proxy.local/ollama/", Model: "qwen2.5"}},
		{
			raw:  "http://gpu-1:11434?model=m&slots=4&num_ctx=16384&keep_alive=1h&name=box",
			want: Config{BaseURL: "http://gpu-1:11434", Model: "m", Slots: 4, ContextLength: 16384, KeepAlive: time.Hour, Name: "box"},
		},
		{raw: "http://gpu-1:11434?model=m&keep_alive=-1", want: Config{BaseURL: "http://gpu-1:11434", Model: "m", KeepAlive: -1}},
		{raw: "http://gpu-1:11434", message: "no model name"},
		{raw: "http://gpu-1:11434?model=", message: "no model name"},
		{raw: "gpu-1:11434?model=m", message: "scheme must be http or https"},
		{raw: "http://gpu-1:11434?model=m&modle=x", message: `unknown parameter "modle"`},
		{raw: "http://gpu-1:11434?model=m&model=n", message: `"model" given 2 times`},
		{raw: "http://gpu-1:11434?model=m&slots=four", message: "slots"},
		{raw: "http://gpu-1:11434?model=m&slots=-1", message: "slots -1 is negative"},
		{raw: "http://gpu-1:11434?model=m&keep_alive=soon", message: "keep_alive"},
		{raw: "http://:11434?model=m", message: "has no host"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := ParseURL(tt.raw)
			if tt.message != "" {
				if err == nil || !strings.Contains(err.Error(), tt.message) {
					t.Fatalf("error %v, want one saying %q", err, tt.message)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestConfigDefaultsAndValidation: New fills in defaults and refuses what
// would misbehave later.
func TestConfigDefaultsAndValidation(t *testing.T) {
	base := Config{BaseURL: "http://gpu-1:11434/", Model: "m"}
	got, err := base.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		BaseURL: "http://gpu-1:11434", Model: "m", Name: "gpu-1:11434", Slots: 1, MinContext: DefaultMinContext,
		AnswerTokens: DefaultAnswerTokens, KeepAlive: DefaultKeepAlive, Timeout: DefaultTimeout, IdleTimeout: DefaultIdleTimeout,
		ConnectTimeout: DefaultConnectTimeout, FirstTokenTimeout: DefaultFirstTokenTimeout,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", got, want)
	}

	tests := []struct {
		name    string
		edit    func(*Config)
		message string
	}{
		{"no URL", func(c *Config) { c.BaseURL = "" }, "no base URL"},
		{"a query in the URL", func(c *Config) { c.BaseURL += "?model=m" }, "must not carry a query"},
		{"negative context", func(c *Config) { c.ContextLength = -1 }, "context length -1"},
		{"negative idle timeout", func(c *Config) { c.IdleTimeout = -time.Second }, "idle timeout"},
		{"negative first-token timeout", func(c *Config) { c.FirstTokenTimeout = -time.Second }, "first-token timeout"},
		{"negative connect timeout", func(c *Config) { c.ConnectTimeout = -time.Second }, "connect timeout"},
		{"a client with a timeout", func(c *Config) { c.HTTPClient = &http.Client{Timeout: time.Second} }, "would cut long generations"},
		{"a managed option", func(c *Config) { c.Options = map[string]any{"num_ctx": 8192} }, `"num_ctx" is set by kvwin`},
		{"an unknown option", func(c *Config) { c.Options = map[string]any{"num_threads": 1} }, `unknown option "num_threads"`},
		{"an option of the wrong type", func(c *Config) { c.Options = map[string]any{"num_thread": "one"} }, "must be of type integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			if _, err := New(c, nil); err == nil || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("New: error %v, want one saying %q", err, tt.message)
			}
		})
	}

	ok := base
	ok.Options = map[string]any{"num_thread": 1, "num_gpu": 99, "use_mmap": false}
	if _, err := New(ok, nil); err != nil {
		t.Errorf("valid extra options refused: %v", err)
	}
}
