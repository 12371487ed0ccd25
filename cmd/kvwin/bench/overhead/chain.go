package overhead

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"kvwin/cmd/kvwin/bench/chat"
)

// The Responses chain (--chain N): one conversation of N turns through
// POST /v1/responses, each turn sending only its new input with
// previous_response_id, so the request stays the same size and everything
// that grows with the conversation is the server's: its chain, its window,
// its memory of evicted turns. Unlike the lengths' turns these are not
// fully cached (each adds the previous answer and a new ask); what is
// compared is the server's own phases early and late in the same chain.

// chainSpan is the turns each end of a chain is summarized over: the
// first and last 100 (#49's acceptance compares turns 1–100 with
// 1,901–2,000), or halves of a shorter chain.
func chainSpan(turns int) int { return min(100, turns/2) }

// responsesBody is one chain turn's request: non-streamed, so the
// Server-Timing header covers the whole turn, and one token, so the chain
// grows by the ask and a one-token answer.
type responsesBody struct {
	Model              string  `json:"model,omitempty"`
	Input              string  `json:"input"`
	Instructions       string  `json:"instructions,omitempty"`
	PreviousResponseID string  `json:"previous_response_id,omitempty"`
	MaxOutputTokens    int     `json:"max_output_tokens"`
	Temperature        float64 `json:"temperature"`
	Stream             bool    `json:"stream"`
}

// measureChain runs one chain of o.Chain turns against the server at base
// and returns two rows: its first span of turns and its last (chainSpan),
// each a summary like a length's. Messages is the history the span's last
// turn continues: the instructions and two messages a turn.
func measureChain(ctx context.Context, o Options, hc *http.Client, base, model, label string) ([]Row, error) {
	url := strings.TrimSuffix(base, "/") + "/v1/responses"
	seed := o.seed // the run's: every server gets the same chain
	span := chainSpan(o.Chain)
	b := responsesBody{Model: model, MaxOutputTokens: 1,
		Instructions: fmt.Sprintf("[%d] You are a careful assistant. ", seed) + chat.Words(seed, 160)}
	var first, last []sample
	for t := 1; t <= o.Chain; t++ {
		b.Input = fmt.Sprintf("question %d? ", t) + chat.Words(seed*1000+uint64(t), 18)
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		s, answer, err := turn(ctx, hc, url, raw)
		if err != nil {
			return nil, fmt.Errorf("%s, chain turn %d: %w", label, t, err)
		}
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(answer, &r); err != nil || r.ID == "" {
			return nil, fmt.Errorf("%s, chain turn %d: no response id in %.200s", label, t, answer)
		}
		b.PreviousResponseID = r.ID
		switch {
		case t <= span:
			first = append(first, s)
		case t > o.Chain-span:
			last = append(last, s)
		}
	}
	rows := []Row{summarize(label, 2*span, first), summarize(label, 2*o.Chain, last)}
	rows[0].Turns = fmt.Sprintf("1-%d", span)
	rows[1].Turns = fmt.Sprintf("%d-%d", o.Chain-span+1, o.Chain)
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "%-26s chain turns %-11s %6d tokens (%6d cached): latency %7.2f ms, prompt %6.2f ms, overhead %6.2f ms, %7.0f allocs %8.1f KB/turn%s\n",
			label, r.Turns, r.PromptTokens, r.CachedTokens, r.LatencyMs, r.PromptMs, r.OverheadMs, r.Allocs, r.AllocKB, chat.PhaseText(r.Phases))
	}
	if w0, ok := rows[0].Phases["window"]; ok && w0 > 0 {
		fmt.Fprintf(os.Stderr, "%-26s window phase, turns %s ÷ turns %s: %.2f×\n", label, rows[1].Turns, rows[0].Turns, rows[1].Phases["window"]/w0)
	}
	return rows, nil
}
