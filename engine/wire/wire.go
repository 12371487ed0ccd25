// Package wire holds the conventions kvwin's processes share on the wire
// besides the bodies of the APIs they speak: the X-Kvwin-* headers and
// X-Conversation-Id, how their values are written and read, and the request
// id (X-Request-Id) a server gives each request, carries in its context,
// writes on every log line logged with that context and sends on to
// backends, so a gateway's and a node's lines for one turn share it. The
// server (web), the adapters talking to kvwin nodes and Ollama, and the
// benchmarks reading answers all use it, so a renamed header or a changed
// format cannot drift between them. It sits below web and engine and
// imports neither.
package wire

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Request headers.
const (
	// HeaderConversation names the request's conversation, as OpenAI's
	// prompt_cache_key does; the header wins when both are given.
	HeaderConversation = "X-Conversation-Id"
	// HeaderWindowPolicy overrides the window policy for one request.
	HeaderWindowPolicy = "X-Kvwin-Window-Policy"
	// HeaderTenant names the tenant a request acts for; a kvwin node trusts
	// it only with its admin key (a gateway in front of it sends it).
	HeaderTenant = "X-Kvwin-Tenant"
	// HeaderPriority names a request's priority class ("interactive" or
	// "batch"): any caller may lower its key's class with it, never raise
	// it (a gateway passes its client's class so).
	HeaderPriority = "X-Kvwin-Priority"
	// HeaderWeight is the fair-share weight of the tenant a request acts
	// for; a kvwin node trusts it only with its admin key (a gateway passes
	// its client's key's weight so).
	HeaderWeight = "X-Kvwin-Weight"
)

// Response headers of every generation, streamed or not.
const (
	// HeaderBackend names the backend that served the request.
	HeaderBackend = "X-Kvwin-Backend"
	// HeaderPromptTokens is the number of tokens in the prompt.
	HeaderPromptTokens = "X-Kvwin-Prompt-Tokens"
	// HeaderCachedTokens is the number of prompt tokens reused from the KV cache.
	HeaderCachedTokens = "X-Kvwin-Cached-Tokens"
	// HeaderCachedEstimated is "true" when HeaderCachedTokens is kvwin's
	// estimate rather than the backend's own count; absent otherwise.
	HeaderCachedEstimated = "X-Kvwin-Cached-Estimated"
	// HeaderPromptMs is the backend's time computing the uncached prompt
	// tokens, in milliseconds (llama-server's timings.prompt_ms).
	HeaderPromptMs = "X-Kvwin-Prompt-Ms"
	// HeaderWindow describes the window a chat was served with (Window).
	HeaderWindow = "X-Kvwin-Window"
)

// GenerationHeaders are the headers Generation sets. A streamed answer,
// whose status and headers go out before the backend has said any of
// them, declares them (and Server-Timing) as HTTP trailers and sends them
// after its last event.
var GenerationHeaders = []string{HeaderBackend, HeaderPromptTokens, HeaderCachedTokens, HeaderCachedEstimated, HeaderPromptMs}

// Generation is what the response headers of one generation say.
type Generation struct {
	Backend         string
	PromptTokens    int
	CachedTokens    int
	CachedEstimated bool
	PromptMs        float64
}

// Set writes g's headers into h.
func (g Generation) Set(h http.Header) {
	h.Set(HeaderBackend, g.Backend)
	h.Set(HeaderPromptTokens, strconv.Itoa(g.PromptTokens))
	h.Set(HeaderCachedTokens, strconv.Itoa(g.CachedTokens))
	h.Set(HeaderPromptMs, strconv.FormatFloat(g.PromptMs, 'f', 3, 64))
	if g.CachedEstimated {
		h.Set(HeaderCachedEstimated, "true")
	}
}

// ReadGeneration reads a generation's headers from h. Absent or malformed
// numbers read as 0 (a server of another version, or an error answer).
func ReadGeneration(h http.Header) Generation {
	g := Generation{Backend: h.Get(HeaderBackend), CachedEstimated: h.Get(HeaderCachedEstimated) == "true"}
	g.PromptTokens, _ = strconv.Atoi(h.Get(HeaderPromptTokens))
	g.CachedTokens, _ = strconv.Atoi(h.Get(HeaderCachedTokens))
	g.PromptMs, _ = strconv.ParseFloat(h.Get(HeaderPromptMs), 64)
	return g
}

// GenerationOf reads the generation headers of an answer whose body was
// read to its end: from its trailers when it sent them (a streamed
// answer), else from its headers (a whole answer, or a server of an older
// version, which sent them as headers when its first token came).
func GenerationOf(resp *http.Response) Generation {
	if resp.Trailer.Get(HeaderPromptTokens) != "" {
		return ReadGeneration(resp.Trailer)
	}
	return ReadGeneration(resp.Header)
}

// Window is the X-Kvwin-Window header:
// "policy=P; kept_tokens=N; evicted_turns=N; packet_turns=N; step=N".
type Window struct {
	// Present is false when the response had no such header: a server
	// without the window layer, which sends everything (step 0).
	Present      bool
	Policy       string
	KeptTokens   int
	EvictedTurns int
	PacketTurns  int
	// Step counts the conversation's eviction steps so far.
	Step int
}

// String is the header's value.
func (w Window) String() string {
	return fmt.Sprintf("policy=%s; kept_tokens=%d; evicted_turns=%d; packet_turns=%d; step=%d",
		w.Policy, w.KeptTokens, w.EvictedTurns, w.PacketTurns, w.Step)
}

// ParseWindow parses the header value leniently, since it is read from
// servers of other versions: fields may come in any order, separated by
// ";" or ",", with or without spaces; unknown fields and values that are
// not numbers are ignored (a field left out reads as 0). An empty value is
// an absent header.
func ParseWindow(v string) Window {
	var w Window
	if strings.TrimSpace(v) == "" {
		return w
	}
	w.Present = true
	fields := strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' })
	for _, f := range fields {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if key == "policy" {
			w.Policy = val
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil {
			continue
		}
		switch key {
		case "kept_tokens":
			w.KeptTokens = n
		case "evicted_turns":
			w.EvictedTurns = n
		case "packet_turns":
			w.PacketTurns = n
		case "step":
			w.Step = n
		}
	}
	return w
}
