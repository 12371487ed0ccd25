package ttft

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// The Responses API replay (kvwin bench ttft --api responses): the client
// of a conversation kvwin holds. Turn 1 sends the system prompt as
// instructions and the first ask; every later turn sends the same
// instructions, only its own ask and previous_response_id, so its request
// stays the same size however long the conversation grows. The server's
// chain holds what the model answered, so the chat-completions replay it is
// measured beside sends those answers back (Conversation.WithReplies): both
// replays prefill byte-identical histories.

// APIs the harness replays a conversation through.
const (
	APIChat      = "chat"
	APIResponses = "responses"
)

// responsesBody is one turn's POST /v1/responses.
type responsesBody struct {
	Model              string  `json:"model,omitempty"`
	Input              string  `json:"input"`
	Instructions       string  `json:"instructions,omitempty"`
	PreviousResponseID string  `json:"previous_response_id,omitempty"`
	Stream             bool    `json:"stream"`
	MaxOutputTokens    int     `json:"max_output_tokens"`
	Temperature        float64 `json:"temperature"`
	IgnoreEOS          bool    `json:"ignore_eos"`
}

// RunResponses replays c through the Responses API and returns the
// measured turns and the model's replies, turn by turn. It measures every
// turn (a chain cannot skip one); Sample does not apply.
func (r Runner) RunResponses(ctx context.Context, c Conversation) ([]TurnResult, []string, error) {
	if len(c.Turns) == 0 {
		return nil, nil, ErrNoTurns
	}
	if !r.Policy.cachePrompt() {
		return nil, nil, fmt.Errorf("ttft: policy %s recomputes every prompt, which the Responses API cannot ask for", r.Policy)
	}
	r = r.withDefaults()
	hc, count, timeout := r.Client, r.Count, r.Timeout
	body := responsesBody{Stream: true, MaxOutputTokens: r.MaxTokens, IgnoreEOS: true, Instructions: r.Salt + c.System}
	url := strings.TrimSuffix(r.BaseURL, "/") + "/v1/responses"
	var (
		out      []TurnResult
		replies  []string
		lastStep int
	)
	for turn := 1; turn <= len(c.Turns); turn++ {
		body.Input = c.Turns[turn-1].User
		tctx, cancel := context.WithTimeout(ctx, timeout)
		ex, err := sendWith(tctx, hc, url, r.Policy, body, turn, readResponseStream)
		cancel()
		if err != nil {
			return out, replies, err
		}
		body.PreviousResponseID = ex.id
		replies = append(replies, ex.text)
		tr := ex.result(turn, count(c.WithReplies(replies).Messages(turn, r.Salt)), &lastStep)
		out = append(out, tr)
		if r.Progress != nil {
			r.Progress(tr, len(c.Turns))
		}
	}
	return out, replies, nil
}

// WithReplies is c with the assistant replies of its first turns replaced
// by replies.
func (c Conversation) WithReplies(replies []string) Conversation {
	turns := append([]Turn(nil), c.Turns...)
	for i, r := range replies {
		if i < len(turns) {
			turns[i].Assistant = r
		}
	}
	c.Turns = turns
	return c
}

// readResponseStream reads a response's typed SSE events to the end: the
// time to the first event after response.created and
// response.in_progress (which kvwin sends as soon as it accepted the
// request, before the first token: the first output item or text comes
// with the first token), the response's id and the text its deltas add
// up to.
// response.failed, or a stream without response.completed or
// response.incomplete, is an error.
func readResponseStream(r io.Reader, start time.Time, ex *exchange) (time.Duration, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var (
		first time.Duration
		text  strings.Builder
	)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		at := time.Since(start)
		var ev struct {
			Type     string `json:"type"`
			Delta    string `json:"delta"`
			Response *struct {
				ID    string `json:"id"`
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			return 0, fmt.Errorf("bad SSE event %q: %w", truncate(data, 200), err)
		}
		if first == 0 && ev.Type != "response.created" && ev.Type != "response.in_progress" {
			first = at
		}
		switch ev.Type {
		case "response.created":
			if ev.Response != nil {
				ex.id = ev.Response.ID
			}
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.failed":
			msg := "response.failed"
			if ev.Response != nil && ev.Response.Error != nil {
				msg = ev.Response.Error.Message
			}
			return 0, fmt.Errorf("in-stream error: %s", msg)
		case "response.completed", "response.incomplete":
			ex.text = text.String()
			if ex.id == "" {
				return 0, errors.New("the stream named no response id")
			}
			return first, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read stream: %w", err)
	}
	return 0, errors.New("the stream ended without response.completed")
}

// apiRun is one replay of one policy: the API it went through and its
// turns.
type apiRun struct {
	api   string
	turns []TurnResult
}

// replay runs policy p's replays through api: chat completions alone, or
// the Responses API and then chat completions with the replies the chain
// holds, each on a server of its own (or both on the target, salted apart).
func (s *benchServers) replay(ctx context.Context, api string, p Policy, r Runner, conv Conversation) ([]apiRun, error) {
	switch api {
	case "", APIChat:
		turns, err := s.measure(ctx, p, r, func(r Runner) ([]TurnResult, error) { return r.Run(ctx, conv) })
		return []apiRun{{turns: turns}}, err
	case APIResponses:
	default:
		return nil, fmt.Errorf("ttft: --api %q: want %s or %s", api, APIChat, APIResponses)
	}
	var replies []string
	held, err := s.measure(ctx, p, r, func(r Runner) ([]TurnResult, error) {
		turns, rs, err := r.RunResponses(ctx, conv)
		replies = rs
		return turns, err
	})
	if err != nil {
		return nil, err
	}
	if r.Salt != "" { // on a shared target, no reuse of the responses run's prefix
		r.Salt = "~" + r.Salt[1:]
	}
	r.Sample = 1
	r.Conversation = "bench-ttft-" + string(p) + r.Salt // named, as the chain is
	sent, err := s.measure(ctx, p, r, func(r Runner) ([]TurnResult, error) { return r.Run(ctx, conv.WithReplies(replies)) })
	return []apiRun{{APIResponses, held}, {APIChat, sent}}, err
}

// WriteAPIComparison writes policy p's turns through the Responses API
// beside the chat-completions replay of the same conversation: TTFT, cached
// share and request bytes per turn, and the ratios of the last turn's
// bytes to the first's.
func WriteAPIComparison(w io.Writer, p Policy, held, sent []TurnResult) error {
	if _, err := fmt.Fprintf(w, "%s: the Responses API (only new input; kvwin holds the chain) beside chat completions (the whole history)\n", p); err != nil {
		return err
	}
	fmt.Fprintf(w, "%5s %8s %14s %14s %12s %12s %14s %14s\n", "turn", "history", "responses_ms", "chat_ms", "resp_cached", "chat_cached", "resp_bytes", "chat_bytes")
	for i := range min(len(held), len(sent)) {
		h, c := held[i], sent[i]
		fmt.Fprintf(w, "%5d %8d %14.1f %14.1f %12.2f %12.2f %14d %14d\n", h.Turn, h.HistoryTokens, h.TTFTMs, c.TTFTMs,
			share(h.CachedTokens, h.PromptTokens), share(c.CachedTokens, c.PromptTokens), h.RequestBytes, c.RequestBytes)
	}
	if n := min(len(held), len(sent)); n > 1 {
		fmt.Fprintf(w, "request bytes, last turn ÷ first: responses %.2f×, chat %.2f×\n",
			share(held[n-1].RequestBytes, held[0].RequestBytes), share(sent[n-1].RequestBytes, sent[0].RequestBytes))
	}
	return nil
}

func share(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// label is the result's name in tables and ttft.csv: its policy, and the
// API when it is one of an --api responses pair.
func (p PolicyResult) label() string {
	if p.API == "" {
		return string(p.Policy)
	}
	return string(p.Policy) + "@" + p.API
}
