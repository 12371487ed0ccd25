// Package llamaservertest is a fake llama-server for tests: an httptest
// server that keeps llama-server's slot rules, so a test can count what a
// router's placement makes real servers compute without building one.
//
// What it keeps of llama-server (tools/server of the June 2025 and August
// 2026 builds, with --cache-ram 0 for the newer):
//
//   - Each slot holds the tokens of its last prompt and of what it generated
//     then, but the last sampled token (never decoded).
//   - A request reuses the longest common prefix of its prompt with what its
//     own slot holds, never another slot's, and computes at least one token
//     (a prompt wholly held recomputes its last). cache_prompt false reuses
//     nothing.
//   - id_slot ≥ 0 runs the request on that slot, waiting while it is busy.
//     id_slot −1: the idle slot whose held prompt is most similar, above
//     the build's threshold (Rules), else the idle slot used longest ago
//     (a never-used one first); all busy, the request waits.
//   - The answer reports timings.prompt_n (computed) and, as the build
//     does, timings.cache_n (reused) or only tokens_evaluated. Streamed
//     chunks carry the id_slot asked for (−1 unpinned), the final object
//     the slot that ran it.
//
// The vocabulary is a byte per token (id 100+b), BOS 1, <|im_start|> 2 and
// <|im_end|> 3 when parsed, the chat template ChatML. A generation is
// n_predict lowercase letters that depend on the prompt.
package llamaservertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"kvwin/kvcache"
)

// Rules is how a build picks a slot for a request that names none.
type Rules int

// The builds' rules.
const (
	// Rules2026 is the August 2026 build: the slot whose held tokens share
	// the longest prefix with the prompt, as a share of the prompt, above
	// 0.1 (--slot-prompt-similarity); it reports timings.cache_n.
	Rules2026 Rules = iota
	// Rules2025 is the June 2025 build: the share is of the slot's held
	// tokens, above 0.5; its answers carry no timings.cache_n (reuse is
	// tokens_evaluated − timings.prompt_n).
	Rules2025
)

// Config configures a Server.
type Config struct {
	Slots int   // default 2
	Ctx   int   // tokens per slot; default 8192
	Rules Rules // default Rules2026
	// PromptCache keeps the August 2026 build's host-memory prompt cache
	// (--cache-ram, with --cache-idle-slots): a request taking a slot
	// whose held tokens it shares less than half of saves them, and loads
	// the saved prompt sharing the longest prefix with it if that beats
	// the slot's, pinned or not; and every slot idle when a request starts
	// is saved too.
	PromptCache bool
}

// Server is a running fake llama-server. Safe for concurrent use.
type Server struct {
	cfg Config
	srv *httptest.Server

	mu       sync.Mutex
	cond     *sync.Cond
	slots    []slot
	clock    int64
	cache    [][]int // saved prompts (PromptCache)
	computed int     // prompt tokens computed (timings.prompt_n), summed
	reused   int     // prompt tokens reused (cache_n), summed
	requests int     // /completion requests answered
}

type slot struct {
	held     []int
	busy     bool
	lastUsed int64 // 0: never
}

// Start starts a fake llama-server on 127.0.0.1; Close stops it.
func Start(cfg Config) *Server {
	if cfg.Slots <= 0 {
		cfg.Slots = 2
	}
	if cfg.Ctx <= 0 {
		cfg.Ctx = 8192
	}
	s := &Server{cfg: cfg, slots: make([]slot, cfg.Slots)}
	s.cond = sync.NewCond(&s.mu)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Counts are a server's totals since it started.
type Counts struct {
	Requests int // /completion requests answered
	Computed int // prompt tokens computed (the sum of timings.prompt_n)
	Reused   int // prompt tokens reused from a slot's KV
}

// Counts returns the totals.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{Requests: s.requests, Computed: s.computed, Reused: s.reused}
}

// Erase empties every slot, as a restart does.
func (s *Server) Erase() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.slots {
		s.slots[i].held, s.slots[i].lastUsed = nil, 0
	}
}

// Held returns a copy of the tokens slot i holds.
func (s *Server) Held(i int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.slots[i].held...)
}

const (
	bos     = 1
	imStart = 2
	imEnd   = 3
)

// Encode tokenizes text as the fake does.
func Encode(text string, addSpecial, parseSpecial bool) []int {
	out := []int{}
	if addSpecial {
		out = append(out, bos)
	}
	for len(text) > 0 {
		switch {
		case parseSpecial && strings.HasPrefix(text, "<|im_start|>"):
			out, text = append(out, imStart), text[len("<|im_start|>"):]
		case parseSpecial && strings.HasPrefix(text, "<|im_end|>"):
			out, text = append(out, imEnd), text[len("<|im_end|>"):]
		default:
			out, text = append(out, 100+int(text[0])), text[1:]
		}
	}
	return out
}

// decode is Encode's inverse.
func decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= 100:
			b.WriteByte(byte(id - 100))
		case id == imStart:
			b.WriteString("<|im_start|>")
		case id == imEnd:
			b.WriteString("<|im_end|>")
		}
	}
	return b.String()
}

const chatML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.Method + " " + r.URL.Path {
	case "GET /health":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case "GET /props":
		writeJSON(w, http.StatusOK, map[string]any{
			"default_generation_settings": map[string]any{"n_ctx": s.cfg.Ctx},
			"total_slots":                 s.cfg.Slots,
			"model_path":                  "/models/tiny.gguf",
			"chat_template":               chatML,
		})
	case "GET /slots":
		s.mu.Lock()
		out := make([]map[string]any, len(s.slots))
		for i, sl := range s.slots {
			out[i] = map[string]any{"id": i, "n_ctx": s.cfg.Ctx, "is_processing": sl.busy, "n_prompt_tokens": len(sl.held)}
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case "POST /tokenize":
		var in struct {
			Content      string `json:"content"`
			AddSpecial   bool   `json:"add_special"`
			ParseSpecial *bool  `json:"parse_special"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			fail(w, http.StatusBadRequest, err.Error())
			return
		}
		// The June 2025 build parses control-token text whatever
		// parse_special says.
		parse := in.ParseSpecial == nil || *in.ParseSpecial || s.cfg.Rules == Rules2025
		writeJSON(w, http.StatusOK, map[string]any{"tokens": Encode(in.Content, in.AddSpecial, parse)})
	case "POST /detokenize":
		var in struct {
			Tokens []int `json:"tokens"`
		}
		_ = json.Unmarshal(body, &in)
		writeJSON(w, http.StatusOK, map[string]string{"content": decode(in.Tokens)})
	case "POST /completion":
		s.complete(w, r, body)
	default:
		fail(w, http.StatusNotFound, "File Not Found")
	}
}

// completionRequest is what the fake reads of a /completion body.
type completionRequest struct {
	Prompt      []int `json:"prompt"`
	IDSlot      *int  `json:"id_slot"`
	CachePrompt *bool `json:"cache_prompt"`
	NPredict    int   `json:"n_predict"`
	Stream      bool  `json:"stream"`
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, body []byte) {
	var in completionRequest
	if err := json.Unmarshal(body, &in); err != nil || len(in.Prompt) == 0 {
		fail(w, http.StatusBadRequest, "\"prompt\" must be provided")
		return
	}
	if len(in.Prompt) >= s.cfg.Ctx {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": 400, "type": "exceed_context_size_error",
			"message":         "the request exceeds the available context size, try increasing it",
			"n_prompt_tokens": len(in.Prompt), "n_ctx": s.cfg.Ctx}})
		return
	}
	id := -1
	if in.IDSlot != nil {
		id = *in.IDSlot
	}
	asked := id // streamed chunks before the last echo it, as both builds do
	if id >= len(s.slots) {
		fail(w, http.StatusBadRequest, "Invalid slot ID")
		return
	}
	n := in.NPredict
	if n <= 0 {
		n = 16
	}
	n = min(n, s.cfg.Ctx-len(in.Prompt)-1)
	cache := in.CachePrompt == nil || *in.CachePrompt

	id, reused := s.claim(in, id, cache)
	gen := make([]int, n)
	text := make([]byte, n)
	for i := range gen {
		text[i] = byte('a' + (len(in.Prompt)+i)%26)
		gen[i] = 100 + int(text[i])
	}
	computed := len(in.Prompt) - reused
	s.release(id, in.Prompt, gen, computed, reused)

	timings := map[string]any{"prompt_n": computed, "prompt_ms": float64(computed) * 0.1, "predicted_n": n, "predicted_ms": float64(n)}
	if s.cfg.Rules == Rules2026 {
		timings["cache_n"] = reused
	}
	final := map[string]any{"index": 0, "content": "", "tokens": []int{}, "id_slot": id, "stop": true, "model": "tiny",
		"tokens_predicted": n, "tokens_evaluated": len(in.Prompt), "stop_type": "limit", "truncated": false,
		"tokens_cached": len(in.Prompt) + n - 1, "timings": timings}
	if !in.Stream {
		final["content"], final["tokens"] = string(text), gen
		writeJSON(w, http.StatusOK, final)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	for i := range gen {
		writeEvent(bw, map[string]any{"index": 0, "content": string(text[i : i+1]), "tokens": []int{gen[i]}, "stop": false, "id_slot": asked,
			"tokens_predicted": i + 1, "tokens_evaluated": len(in.Prompt), "timings": timings})
	}
	writeEvent(bw, final)
	_ = bw.Flush()
}

// claim waits for a free slot for in (the one asked for, id, if any) and
// marks it busy; with the prompt cache on, it swaps in the cached prompt
// that shares most with in's and keeps the other slots' prompts. It
// returns the slot and the prompt tokens reused (none without cache).
func (s *Server) claim(in completionRequest, id int, cache bool) (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if id < 0 {
			id = s.choose(in.Prompt)
		}
		if id >= 0 && !s.slots[id].busy {
			break
		}
		if in.IDSlot == nil || *in.IDSlot < 0 {
			id = -1
		}
		s.cond.Wait()
	}
	sl := &s.slots[id]
	sl.busy = true
	if s.cfg.PromptCache && len(sl.held) > 0 && 2*kvcache.SharedPrefix(sl.held, in.Prompt) < len(sl.held) {
		s.cache = append(s.cache, sl.held)
		best, bestN := -1, kvcache.SharedPrefix(sl.held, in.Prompt)
		for i, c := range s.cache {
			if n := kvcache.SharedPrefix(c, in.Prompt); n > bestN {
				best, bestN = i, n
			}
		}
		if best >= 0 {
			sl.held = s.cache[best]
			s.cache = append(s.cache[:best], s.cache[best+1:]...)
		}
	}
	if s.cfg.PromptCache {
		for i := range s.slots {
			if o := s.slots[i]; i != id && !o.busy && len(o.held) > 0 && !s.cached(o.held) {
				s.cache = append(s.cache, o.held)
			}
		}
	}
	reused := 0
	if cache {
		reused = min(kvcache.SharedPrefix(sl.held, in.Prompt), len(in.Prompt)-1)
	}
	return id, reused
}

// release frees slot id, now holding prompt and gen but its last token,
// and counts the request.
func (s *Server) release(id int, prompt, gen []int, computed, reused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[id]
	s.clock++
	sl.held = append(append([]int(nil), prompt...), gen[:max(len(gen)-1, 0)]...)
	sl.busy, sl.lastUsed = false, s.clock
	s.computed += computed
	s.reused += reused
	s.requests++
	s.cond.Broadcast()
}

// cached reports whether the prompt cache holds tokens. s.mu is held.
func (s *Server) cached(tokens []int) bool {
	for _, c := range s.cache {
		if len(c) == len(tokens) && kvcache.SharedPrefix(c, tokens) == len(c) {
			return true
		}
	}
	return false
}

// choose is the idle slot for a prompt that names none, -1 if all are
// busy. s.mu is held.
func (s *Server) choose(prompt []int) int {
	best, bestSim, bestLCP := -1, 0.0, 0
	threshold := 0.1
	if s.cfg.Rules == Rules2025 {
		threshold = 0.5
	}
	for i, sl := range s.slots {
		if sl.busy || len(sl.held) == 0 {
			continue
		}
		lcp := kvcache.SharedPrefix(sl.held, prompt)
		sim := float64(lcp) / float64(len(prompt))
		better := sim > bestSim
		if s.cfg.Rules == Rules2025 {
			sim = float64(lcp) / float64(len(sl.held))
			better = lcp > bestLCP
		}
		if sim > threshold && better {
			best, bestSim, bestLCP = i, sim, lcp
		}
	}
	if best >= 0 {
		return best
	}
	oldest := int64(math.MaxInt64)
	for i, sl := range s.slots {
		if !sl.busy && sl.lastUsed < oldest {
			best, oldest = i, sl.lastUsed
		}
	}
	return best
}

func writeEvent(w io.Writer, v any) {
	data, _ := json.Marshal(v)
	fmt.Fprintf(w, "data: %s\n\n", data)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, msg string) {
	typ := "invalid_request_error"
	if status == http.StatusNotFound {
		typ = "not_found_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "type": typ}})
}
