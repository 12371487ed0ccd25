package ollama

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ollama/ollama/api"

	"kvwin/engine/idle"
)

// Defaults of the Config fields left zero.
const (
	// DefaultKeepAlive is sent as keep_alive: how long Ollama keeps the
	// model, and so its KV cache, loaded after a request. Ollama's own
	// default (5m) drops a conversation's cached prefix whenever its user
	// pauses for a coffee.
	DefaultKeepAlive = 30 * time.Minute
	// DefaultMinContext is the smallest num_ctx sent. It is Ollama
	// v0.9.6's own default (OLLAMA_CONTEXT_LENGTH), so a model another
	// client loaded with defaults is not reloaded for a short request.
	DefaultMinContext = 4096
	// DefaultAnswerTokens is the room num_ctx keeps for an answer when a
	// request sets no MaxTokens.
	DefaultAnswerTokens = 1024
	// DefaultTimeout bounds one metadata call (/api/show).
	DefaultTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds opening a connection to the server.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultFirstTokenTimeout bounds the wait for a generation's first
	// streamed response: the server's queue, loading the model and the
	// prefill. Ollama loads a model from disk before it says anything, so
	// an operator serving a model larger than its disk reads in two
	// minutes raises it (or keeps the model loaded: Config.KeepAlive).
	DefaultFirstTokenTimeout = 120 * time.Second
	// DefaultIdleTimeout bounds each silence between streamed responses
	// after the first: a minute without a token means the server hung.
	DefaultIdleTimeout = 60 * time.Second
)

// Config configures a Backend. Zero fields take the defaults; New validates
// the result. Operators usually write it as a URL (see ParseURL).
type Config struct {
	// BaseURL is the Ollama server's root, e.g. "http://gpu-1:11434"
	// (required). A path prefix is kept (a server behind a reverse proxy).
	BaseURL string `json:"base_url"`
	// Model is the Ollama model name requests are served with, e.g.
	// "llama3.1:8b" (required): one Backend serves one model, so the
	// registry and the router see one KV cache per backend.
	Model string `json:"model"`
	// Name is the backend's stable name in X-Kvwin-Backend and metrics;
	// default: the URL's host:port.
	Name string `json:"name"`
	// Slots is the number of requests the server runs in parallel for the
	// model: set it to the server's OLLAMA_NUM_PARALLEL. Ollama does not
	// report it, so the default is 1, the only value that is never an
	// overstatement (v0.9.6 itself picks 1 or 2 when the variable is
	// unset, depending on memory).
	Slots int `json:"slots"`
	// ContextLength pins num_ctx, the context per slot, and caps it by the
	// model's trained context. Pinned, num_ctx never changes, so Ollama
	// never reloads the model (and drops its KV cache) because of kvwin;
	// recommended in production, sized to what the GPU holds. 0, the
	// default, sizes num_ctx per request (see the package comment).
	ContextLength int `json:"context_length"`
	// MinContext is the smallest num_ctx sized per request; default
	// DefaultMinContext. Ignored when ContextLength is set.
	MinContext int `json:"min_context"`
	// AnswerTokens is the room kept for the answer of a request without
	// MaxTokens; default DefaultAnswerTokens.
	AnswerTokens int `json:"answer_tokens"`
	// KeepAlive is sent as keep_alive; default DefaultKeepAlive. A negative
	// value keeps the model loaded until the server stops.
	KeepAlive time.Duration `json:"keep_alive"`
	// Options are extra Ollama options sent with every request, e.g.
	// {"num_thread": 1} or {"num_gpu": 99}. They must be Ollama option
	// names of the right type and must not be one of the options kvwin sets
	// from the request (num_ctx, num_keep, num_predict, seed, temperature,
	// top_k, top_p, min_p, repeat_penalty, repeat_last_n, stop). Runner
	// options (num_thread, num_gpu, num_batch, …) must stay the same for the
	// life of the server's model: Ollama reloads the model when they change.
	Options map[string]any `json:"options"`
	// Timeout bounds each metadata call; default DefaultTimeout.
	Timeout time.Duration `json:"timeout"`
	// ConnectTimeout bounds opening a connection; default
	// DefaultConnectTimeout. It applies to the Backend's own HTTP client
	// only (not to Config.HTTPClient).
	ConnectTimeout time.Duration `json:"connect_timeout"`
	// FirstTokenTimeout bounds the wait for a generation's first streamed
	// response (see DefaultFirstTokenTimeout); default
	// DefaultFirstTokenTimeout.
	FirstTokenTimeout time.Duration `json:"first_token_timeout"`
	// IdleTimeout bounds each silence after the first response (see
	// DefaultIdleTimeout); default DefaultIdleTimeout. There is no bound on
	// a generation's total time: a long answer that keeps streaming is fine.
	IdleTimeout time.Duration `json:"idle_timeout"`

	// HTTPClient sends the requests; default: a client of its own. It must
	// not set a Timeout, which would cut long streams; use the fields above.
	HTTPClient *http.Client `json:"-"`
}

// managedOptions are the options kvwin sets from each request; Config.Options
// may not override them.
var managedOptions = []string{
	"num_ctx", "num_keep", "num_predict", "seed", "temperature", "top_k", "top_p",
	"min_p", "repeat_penalty", "repeat_last_n", "stop",
}

// withDefaults fills in defaults, checks ranges and returns the result.
func (c Config) withDefaults() (Config, error) {
	if c.BaseURL == "" {
		return c, errors.New("ollama: no base URL")
	}
	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		return c, fmt.Errorf("ollama: base URL %q: %w", c.BaseURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return c, fmt.Errorf("ollama: base URL %q: scheme must be http or https (write http://%s)", c.BaseURL, c.BaseURL)
	case u.Hostname() == "":
		return c, fmt.Errorf("ollama: base URL %q has no host", c.BaseURL)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return c, fmt.Errorf("ollama: base URL %q must not carry a query, fragment or user info (ParseURL reads the query)", c.BaseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	c.BaseURL = u.String()

	switch {
	case strings.TrimSpace(c.Model) == "":
		return c, fmt.Errorf("ollama %s: no model name (write %s?model=NAME)", c.BaseURL, c.BaseURL)
	case c.Slots < 0:
		return c, fmt.Errorf("ollama: slots %d is negative", c.Slots)
	case c.ContextLength < 0:
		return c, fmt.Errorf("ollama: context length %d is negative", c.ContextLength)
	case c.MinContext < 0:
		return c, fmt.Errorf("ollama: min context %d is negative", c.MinContext)
	case c.AnswerTokens < 0:
		return c, fmt.Errorf("ollama: answer tokens %d is negative", c.AnswerTokens)
	}
	bounds := idle.Bounds{Call: &c.Timeout, Idle: &c.IdleTimeout, Connect: &c.ConnectTimeout, FirstToken: &c.FirstTokenTimeout}
	if err := bounds.Check("ollama"); err != nil {
		return c, err
	}
	if c.HTTPClient != nil && c.HTTPClient.Timeout != 0 {
		return c, fmt.Errorf("ollama: the HTTP client has a timeout (%v), which would cut long generations; use Config.IdleTimeout", c.HTTPClient.Timeout)
	}
	if err := checkOptions(c.Options); err != nil {
		return c, err
	}
	if c.Name == "" {
		c.Name = u.Host
	}
	c.Slots = cmp.Or(c.Slots, 1)
	c.MinContext = cmp.Or(c.MinContext, DefaultMinContext)
	c.AnswerTokens = cmp.Or(c.AnswerTokens, DefaultAnswerTokens)
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	bounds.Default(DefaultTimeout, DefaultIdleTimeout, DefaultConnectTimeout, DefaultFirstTokenTimeout)
	return c, nil
}

// optionNames are the option names Ollama v0.9.6 knows: the JSON names of
// api.Options and its embedded api.Runner.
var optionNames = func() map[string]bool {
	names := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[api.Options]()) {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
			names[name] = true
		}
	}
	return names
}()

// checkOptions rejects extra options Ollama would ignore (it only logs an
// unknown name) or refuse (a wrong type), and options kvwin manages itself.
func checkOptions(opts map[string]any) error {
	for name := range opts {
		switch {
		case slices.Contains(managedOptions, name):
			return fmt.Errorf("ollama: option %q is set by kvwin from each request; it cannot be configured", name)
		case !optionNames[name]:
			return fmt.Errorf("ollama: unknown option %q", name)
		}
	}
	// Through JSON, as Ollama receives them: numbers become float64, which
	// is what api.Options.FromMap checks types against.
	data, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("ollama: options: %w", err)
	}
	var wire map[string]any
	if err := json.Unmarshal(data, &wire); err != nil {
		return fmt.Errorf("ollama: options: %w", err)
	}
	o := api.Options{}
	if err := o.FromMap(wire); err != nil {
		return fmt.Errorf("ollama: options: %w", err)
	}
	return nil
}

// ParseURL reads the URL form of a Config, as in `--backend ollama=URL`:
//
//	http://gpu-1:11434?model=llama3.1:8b
//	http://gpu-1:11434?model=llama3.1:8b&slots=4&num_ctx=16384&keep_alive=1h&name=gpu-1
//
// model is required; slots (Config.Slots), num_ctx (Config.ContextLength),
// keep_alive (Config.KeepAlive, a Go duration or -1 for forever) and name
// are optional. Other parameters are rejected, so a typo is not silently
// ignored. The result is validated; New fills in the defaults.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("ollama: backend URL %q: %w", raw, err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("ollama: backend URL %q: query: %w", raw, err)
	}
	u.RawQuery, u.ForceQuery = "", false
	c := Config{BaseURL: u.String()}
	for key, vals := range q {
		if len(vals) != 1 {
			return Config{}, fmt.Errorf("ollama: backend URL %q: %q given %d times", raw, key, len(vals))
		}
		v := vals[0]
		switch key {
		case "model":
			c.Model = v
		case "name":
			c.Name = v
		case "slots":
			c.Slots, err = strconv.Atoi(v)
		case "num_ctx":
			c.ContextLength, err = strconv.Atoi(v)
		case "keep_alive":
			if v == "-1" {
				c.KeepAlive = -1
			} else {
				c.KeepAlive, err = time.ParseDuration(v)
			}
		default:
			return Config{}, fmt.Errorf("ollama: backend URL %q: unknown parameter %q (known: model, name, slots, num_ctx, keep_alive)", raw, key)
		}
		if err != nil {
			return Config{}, fmt.Errorf("ollama: backend URL %q: %s: %w", raw, key, err)
		}
	}
	if _, err := c.withDefaults(); err != nil {
		return Config{}, err
	}
	return c, nil
}
