package overhead

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"time"

	"kvwin/cmd/kvwin/bench/chat"
	"kvwin/engine/wire"
)

// message is one chat message of a request body.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// body is one turn's request: a non-streamed chat completion of one token,
// so the client's latency is everything the server does up to the first
// token, plus its answer.
type body struct {
	Model       string    `json:"model,omitempty"`
	Messages    []message `json:"messages"`
	MaxTokens   int       `json:"max_tokens"`
	Temperature float64   `json:"temperature"`
	Stream      bool      `json:"stream"`
	// CachePrompt asks llama-server to reuse its slot's KV (its default
	// too); kvwin ignores it.
	CachePrompt bool `json:"cache_prompt"`
}

// History is a conversation of n messages (n even, at least 2): a system
// prompt, (n-2)/2 user and assistant exchanges, and a last short user
// message that variant changes. seed makes the conversation's first
// bytes, so two lengths never share a cached prefix.
func History(seed uint64, n, variant int) []message {
	msgs := []message{{Role: "system", Content: fmt.Sprintf("[%d] You are a careful assistant. ", seed) + chat.Words(seed, 160)}}
	for i := 0; i < (n-2)/2; i++ {
		msgs = append(msgs,
			message{Role: "user", Content: chat.Words(seed*1000+uint64(2*i), 18)},
			message{Role: "assistant", Content: chat.Words(seed*1000+uint64(2*i+1), 18)})
	}
	return append(msgs, message{Role: "user", Content: fmt.Sprintf("question %d?", variant)})
}

// sample is what one turn measured.
type sample struct {
	latency  time.Duration // request written → response read, at the client
	promptMs float64       // the server's prompt decode time
	prompt   int           // prompt tokens, where the server says
	cached   int
	timing   string // the Server-Timing header, if any
	mallocs  uint64 // heap allocations in this process during the turn
	bytes    uint64 // heap bytes allocated in this process during the turn
}

// turn sends one prepared body and reads the whole answer, which it
// returns too. The body is marshaled before the measurement, so the
// allocations counted are the HTTP exchange's and (in process) the
// server's.
func turn(ctx context.Context, hc *http.Client, url string, b []byte) (sample, []byte, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, start, err := chat.Post(ctx, hc, url, http.Header{"Content-Type": {"application/json"}}, b)
	if err != nil {
		return sample{}, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	lat := time.Since(start)
	runtime.ReadMemStats(&after)
	if err != nil {
		return sample{}, nil, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return sample{}, nil, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(raw[:min(len(raw), 300)])))
	}
	s := sample{latency: lat, mallocs: after.Mallocs - before.Mallocs, bytes: after.TotalAlloc - before.TotalAlloc,
		timing: resp.Header.Get("Server-Timing")}
	g := wire.ReadGeneration(resp.Header)
	s.prompt, s.cached, s.promptMs = g.PromptTokens, g.CachedTokens, g.PromptMs
	if resp.Header.Get(wire.HeaderPromptMs) == "" {
		// Not kvwin: llama-server reports its prompt decode in the body.
		var ans struct {
			Timings struct {
				PromptN  int     `json:"prompt_n"`
				PromptMs float64 `json:"prompt_ms"`
				CacheN   int     `json:"cache_n"`
			} `json:"timings"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(raw, &ans); err != nil {
			return sample{}, nil, fmt.Errorf("answer: %w", err)
		}
		s.promptMs = ans.Timings.PromptMs
		s.prompt = ans.Usage.PromptTokens
		s.cached = ans.Timings.CacheN
		if s.prompt == 0 {
			s.prompt = ans.Timings.PromptN + ans.Timings.CacheN
		}
	}
	return s, raw, nil
}
