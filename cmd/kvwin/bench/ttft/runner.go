package ttft

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// TurnResult is one measured turn of one policy. The JSON names are those
// of ttft.json.
type TurnResult struct {
	Turn int `json:"turn"` // 1-based
	// HistoryTokens is the whole conversation up to this turn's ask, by the
	// Runner's Counter: what full would send, the same for every policy.
	HistoryTokens int `json:"history_tokens"`
	// PromptTokens and CachedTokens are the server's counts for this
	// request (X-Kvwin-Prompt-Tokens, X-Kvwin-Cached-Tokens); NewTokens is
	// their difference, the tokens the server prefilled.
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	NewTokens    int     `json:"new_tokens"`
	TTFTMs       float64 `json:"ttft_ms"`   // client side: request sent → first streamed event
	PromptMs     float64 `json:"prompt_ms"` // server side: X-Kvwin-Prompt-Ms
	// Step is the conversation's eviction steps so far (X-Kvwin-Window;
	// 0 without the header).
	Step int `json:"step"`
	// RequestBytes is the size of the turn's request body: the whole
	// history for chat completions, the new input for the Responses API.
	RequestBytes int `json:"request_bytes"`
	// Phases are the server's Server-Timing phases of the turn in ms, by
	// name (kvwin's: read, window, render, tokenize, queue, prefill,
	// first_token, total); absent where the server sends none.
	Phases map[string]float64 `json:"phases,omitempty"`
	// Evicted reports that an eviction step happened at this turn: Step
	// grew since the previous measured turn.
	Evicted bool `json:"-"`
}

// Runner replays a conversation against one server under one policy, turn
// by turn, one request at a time, as a client does: each request carries
// the system prompt, every earlier turn with the workload's reply, and the
// turn's ask, streamed, with max_tokens MaxTokens, temperature 0 and
// ignore_eos, so every turn decodes the same number of tokens.
//
// A Runner is a value; Run may be called concurrently on different servers
// but a server should see one run at a time, or runs disturb each other's
// caches and timings.
type Runner struct {
	// BaseURL is the server's, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Client sends the requests; nil means a client of its own.
	Client *http.Client
	Policy Policy
	// Count gives the history tokens; nil means ChatMLCounter(1).
	Count Counter
	// MaxTokens per turn; 0 means 8.
	MaxTokens int
	// Sample, under FullNoCache only, measures only turns 1, 1+Sample,
	// 1+2·Sample, … and the last: with nothing cached, skipped turns change
	// nothing for the measured ones, and a whole-history prefill per turn
	// is what makes a run long. Other policies measure every turn, since
	// each turn's cache depends on the one before. 0 or 1 measures all.
	Sample int
	// Salt is prepended to the system prompt. Against a long-running server
	// a distinct salt per policy and run (of equal length, so the x axis
	// stays comparable) makes the very first token differ, so no policy
	// reuses another's cached prefix.
	Salt string
	// Conversation, if set, names the conversation (prompt_cache_key), so
	// its evicted turns go to the memory store as a chain's do.
	Conversation string
	// Timeout bounds each request; 0 means 10 minutes.
	Timeout time.Duration
	// Progress, if set, is called after each measured turn with the turn
	// and the number of turns; it runs on Run's goroutine.
	Progress func(r TurnResult, turns int)
}

// withDefaults is r with every field a replay needs set: a plain HTTP
// client, ChatML's token count, 8 tokens an answer, 10 minutes a turn.
func (r Runner) withDefaults() Runner {
	if r.Client == nil {
		r.Client = &http.Client{}
	}
	if r.Count == nil {
		r.Count, _ = ChatMLCounter(1)
	}
	if r.MaxTokens == 0 {
		r.MaxTokens = 8
	}
	if r.Timeout == 0 {
		r.Timeout = 10 * time.Minute
	}
	return r
}

// Run replays c and returns the measured turns. It blocks until the last
// turn is done, ctx ends or a request fails; on failure it returns the
// turns measured so far with the error (a *RejectedError for an error
// status, ErrPolicyIgnored if the server did not apply the policy).
func (r Runner) Run(ctx context.Context, c Conversation) ([]TurnResult, error) {
	if !r.Policy.known() {
		return nil, fmt.Errorf("ttft: unknown policy %q", r.Policy)
	}
	if len(c.Turns) == 0 {
		return nil, ErrNoTurns
	}
	r = r.withDefaults()
	hc, count, timeout := r.Client, r.Count, r.Timeout
	body := chatBody{Stream: true, MaxTokens: r.MaxTokens, IgnoreEOS: true, CachePrompt: r.Policy.cachePrompt(), PromptCacheKey: r.Conversation}
	url := strings.TrimSuffix(r.BaseURL, "/") + "/v1/chat/completions"
	n := len(c.Turns)
	var out []TurnResult
	lastStep := 0
	for turn := 1; turn <= n; turn++ {
		if !r.measures(turn, n) {
			continue
		}
		body.Messages = c.Messages(turn, r.Salt)
		tctx, cancel := context.WithTimeout(ctx, timeout)
		ex, err := send(tctx, hc, url, r.Policy, body, turn)
		cancel()
		if err != nil {
			return out, err
		}
		tr := ex.result(turn, count(body.Messages), &lastStep)
		out = append(out, tr)
		if r.Progress != nil {
			r.Progress(tr, n)
		}
	}
	return out, nil
}

// measures reports whether turn of n is sent and measured.
func (r Runner) measures(turn, n int) bool {
	if r.Policy != FullNoCache || r.Sample <= 1 {
		return true
	}
	return (turn-1)%r.Sample == 0 || turn == n
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
