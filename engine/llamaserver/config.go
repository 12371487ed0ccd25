package llamaserver

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"kvwin/engine/idle"
	"kvwin/kvcache"
)

// Defaults of the Config fields left zero.
const (
	// DefaultTimeout bounds one metadata call (/props, /tokenize, …).
	DefaultTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds opening a connection to the server.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultFirstTokenTimeout bounds the wait for a generation's first
	// streamed chunk, the server's queue and the prefill included. A
	// server that accepts a generation and never answers is given up on
	// after it, and a router tries another.
	DefaultFirstTokenTimeout = 120 * time.Second
	// DefaultIdleTimeout bounds each silence between chunks after the
	// first: a token comes every few tens of milliseconds on a healthy
	// server, so a minute of nothing means it hung.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxChunkBytes bounds one streamed chunk (one SSE line) or a
	// whole answer that is not streamed. A chunk carries one token's
	// text; the final one more: llama-server repeats the prompt as text
	// (some MB for a context of a million tokens), a kvwin node lists the
	// generated ids.
	DefaultMaxChunkBytes = 16 << 20
	// DefaultMaxAnswerBytes bounds the text of one answer.
	DefaultMaxAnswerBytes = 16 << 20
	// DefaultPromptCacheBytes bounds a Backend's own cache of tokenized
	// renderings (Config.PromptCache): 16 MiB, as its message token cache,
	// the token ids of four million prompt tokens.
	DefaultPromptCacheBytes = 16 << 20
)

// Config configures a Backend. Zero fields take the defaults; New validates
// the result.
type Config struct {
	// BaseURL is the server's root, e.g. "http://gpu-1:8080" (required).
	// A path prefix is kept (a server behind a reverse proxy).
	BaseURL string `json:"base_url"`
	// Name is the backend's stable name in X-Kvwin-Backend and metrics;
	// default: the URL's host:port.
	Name string `json:"name"`
	// Model is the model id clients use; default: the server's model alias
	// from /props, else its model file's base name without ".gguf".
	Model string `json:"model"`
	// Timeout bounds each metadata call; default DefaultTimeout.
	Timeout time.Duration `json:"timeout"`
	// ConnectTimeout bounds opening a connection; default
	// DefaultConnectTimeout. It applies to the Backend's own HTTP client
	// only (not to Config.HTTPClient).
	ConnectTimeout time.Duration `json:"connect_timeout"`
	// FirstTokenTimeout bounds the wait for a generation's first chunk
	// (see DefaultFirstTokenTimeout); default DefaultFirstTokenTimeout.
	FirstTokenTimeout time.Duration `json:"first_token_timeout"`
	// IdleTimeout bounds each silence between chunks after the first (see
	// DefaultIdleTimeout); default DefaultIdleTimeout. There is no bound on
	// a generation's total time: a long answer that keeps streaming is fine.
	IdleTimeout time.Duration `json:"idle_timeout"`
	// CacheReuse is sent as n_cache_reuse: the minimum run of tokens the
	// server may move by KV shifting (llama-server's --cache-reuse). 0, the
	// default, disables it: shifted KV is approximate
	// (docs/architecture.md, "The window").
	CacheReuse int `json:"cache_reuse"`
	// MaxChunkBytes bounds one chunk of an answer (see
	// DefaultMaxChunkBytes); default DefaultMaxChunkBytes. A larger chunk
	// is not read into memory: the answer fails (before any event: the
	// server is unavailable, and a router tries another).
	MaxChunkBytes int `json:"max_chunk_bytes"`
	// MaxAnswerBytes bounds the text of one answer; default
	// DefaultMaxAnswerBytes. The answer is cut there, finishing with
	// "length", as it is at the request's max tokens, which the backend
	// counts itself: a server that generates past n_predict is cut off.
	MaxAnswerBytes int `json:"max_answer_bytes"`

	// APIKey, if set, is sent as "Authorization: Bearer KEY" with every
	// request: llama-server's --api-key, or a kvwin node's admin key (with
	// which the node keeps the tenants this backend names apart).
	APIKey string `json:"-"`

	// HTTPClient sends the requests; default: a client of its own. It must
	// not set a Timeout, which would cut long streams; use the fields above.
	HTTPClient *http.Client `json:"-"`
	// TokenCache holds message token ids; several backends may share one
	// (its budget, not its entries: keys name the server). Default: a cache
	// of its own with kvcache's default size, closed by Close.
	TokenCache *kvcache.TokenCache `json:"-"`
	// PromptCache holds, per tenant and conversation, the tokens of the
	// text the server's template rendered up to its last control token, so
	// a turn sends /tokenize only what follows (see rendered.go); several
	// backends may share one (keys name the server). Default: a cache of
	// its own of DefaultPromptCacheBytes, closed by Close.
	PromptCache *kvcache.PromptCache `json:"-"`
}

// withDefaults fills in defaults, checks ranges and returns the parsed base
// URL.
func (c Config) withDefaults() (Config, *url.URL, error) {
	if c.BaseURL == "" {
		return c, nil, errors.New("llamaserver: no base URL")
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		return c, nil, fmt.Errorf("llamaserver: base URL %q: %w", c.BaseURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return c, nil, fmt.Errorf("llamaserver: base URL %q: scheme must be http or https", c.BaseURL)
	case u.Host == "":
		return c, nil, fmt.Errorf("llamaserver: base URL %q has no host", c.BaseURL)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return c, nil, fmt.Errorf("llamaserver: base URL %q must not carry a query, fragment or user info", c.BaseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	c.BaseURL = u.String()

	bounds := idle.Bounds{Call: &c.Timeout, Idle: &c.IdleTimeout, Connect: &c.ConnectTimeout, FirstToken: &c.FirstTokenTimeout}
	if err := bounds.Check("llamaserver"); err != nil {
		return c, nil, err
	}
	switch {
	case c.MaxChunkBytes < 0 || c.MaxAnswerBytes < 0:
		return c, nil, fmt.Errorf("llamaserver: byte limits %d (chunk) and %d (answer) must not be negative", c.MaxChunkBytes, c.MaxAnswerBytes)
	case c.CacheReuse < 0:
		return c, nil, fmt.Errorf("llamaserver: cache reuse %d is negative", c.CacheReuse)
	case c.HTTPClient != nil && c.HTTPClient.Timeout != 0:
		return c, nil, fmt.Errorf("llamaserver: the HTTP client has a timeout (%v), which would cut long generations; use Config.IdleTimeout", c.HTTPClient.Timeout)
	}
	if c.Name == "" {
		c.Name = u.Host
	}
	bounds.Default(DefaultTimeout, DefaultIdleTimeout, DefaultConnectTimeout, DefaultFirstTokenTimeout)
	c.MaxChunkBytes = cmp.Or(c.MaxChunkBytes, DefaultMaxChunkBytes)
	c.MaxAnswerBytes = cmp.Or(c.MaxAnswerBytes, DefaultMaxAnswerBytes)
	return c, u, nil
}
