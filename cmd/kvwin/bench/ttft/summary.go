package ttft

import (
	"slices"
	"time"

	"kvwin/attention"
	"kvwin/cmd/kvwin/bench/stats"
)

// PolicyResult is one policy's run and its summary: an element of
// ttft.json's "policies". A field that the run cannot define (a plateau
// ratio of a conversation that never outgrew the budget, a fit with too
// few observations) is null.
type PolicyResult struct {
	Policy Policy `json:"policy"`
	// API is the API replayed through with --api responses (chat or
	// responses); empty for chat completions alone.
	API          string   `json:"api,omitempty"`
	Evictions    int      `json:"evictions"`
	PlateauRatio *float64 `json:"plateau_ratio"`
	// PromptRatio is TTFT over the server's own prompt time late in the
	// run (see PromptRatio): what a turn costs beyond llama.cpp's decode.
	PromptRatio *float64 `json:"prompt_ratio"`
	// LatePhases are where the TTFT of PromptRatio's turns went: the
	// median of each Server-Timing phase over them in ms, and "outside",
	// the median of TTFT minus the server's total (the client, the
	// connection and the first event's way back). Absent where the server
	// sends no Server-Timing.
	LatePhases  map[string]float64      `json:"late_phases,omitempty"`
	CachedShare float64                 `json:"cached_share"`
	Fit         *attention.Coefficients `json:"fit"`
	Turns       []TurnResult            `json:"turns"`
}

// Summarize computes the summary of one policy's turns against budget.
//
// Turn 1 is always cold (nothing is cached, and a fresh server warms up on
// it), so it is left out of every figure: the plateau ratio, the cached
// share, the TTFT percentiles and the fit.
//
//   - Evictions: the eviction steps the server reported, the largest Step
//     of the run.
//   - CachedShare: Σ cached tokens ÷ Σ prompt tokens.
//   - Fit: attention.Fit over {P = new tokens, C = cached tokens, elapsed =
//     server prompt time}.
//   - PlateauRatio: see PlateauRatio.
//   - PromptRatio: see PromptRatio.
//   - LatePhases: see LatePhases.
func Summarize(p Policy, turns []TurnResult, budget int) PolicyResult {
	r := PolicyResult{Policy: p, Turns: turns}
	if turns == nil {
		r.Turns = []TurnResult{} // "turns": [], not null
	}
	counted := warm(turns)
	var cached, prompt int
	obs := make([]attention.Observation, 0, len(counted))
	for _, t := range counted {
		cached += t.CachedTokens
		prompt += t.PromptTokens
		obs = append(obs, attention.Observation{New: t.NewTokens, Context: t.CachedTokens,
			Elapsed: time.Duration(t.PromptMs * float64(time.Millisecond))})
	}
	for _, t := range turns {
		r.Evictions = max(r.Evictions, t.Step)
	}
	if prompt > 0 {
		r.CachedShare = float64(cached) / float64(prompt)
	}
	if k, err := attention.Fit(obs); err == nil {
		r.Fit = &k
	}
	if v, ok := PlateauRatio(turns, budget); ok {
		r.PlateauRatio = &v
	}
	if v, ok := PromptRatio(turns); ok {
		r.PromptRatio = &v
	}
	r.LatePhases = LatePhases(turns)
	return r
}

// PlateauRatio is how much TTFT still grew after the conversation outgrew
// the budget: the median TTFT over the last tenth of the turns divided by
// the median TTFT over the tenth of turns that follows the first turn whose
// history exceeds budget. Near 1, TTFT has stopped growing; full-nocache's
// grows with the history.
//
// Precisely, over the measured turns after turn 1, in order (n of them):
// a tenth is k = ceil(n/10) turns (at least 1); the late tenth is the last
// k; the first turn with HistoryTokens > budget is at index i (it is left
// out: it is where the first eviction step lands), and the early tenth is
// the k turns after it. The ratio is undefined (ok false) when no turn
// exceeds the budget, when the early tenth does not end before the late
// one begins (the run did not outgrow the budget long enough to show a
// plateau), or when the early median is not positive.
func PlateauRatio(turns []TurnResult, budget int) (ratio float64, ok bool) {
	ts := warm(turns)
	n := len(ts)
	k := tenth(n)
	i := slices.IndexFunc(ts, func(t TurnResult) bool { return t.HistoryTokens > budget })
	if i < 0 || i+k >= n-k {
		return 0, false
	}
	early := stats.Quantile(ttfts(ts[i+1:i+1+k]), 0.5)
	late := stats.Quantile(ttfts(ts[n-k:]), 0.5)
	if !(early > 0) {
		return 0, false
	}
	return late / early, true
}

// PromptRatio is what a turn costs beyond the server's prompt decode late
// in the run: the median TTFT over the last tenth of the turns (after turn
// 1; a tenth as in PlateauRatio) divided by the median X-Kvwin-Prompt-Ms
// (llama-server's timings.prompt_ms) of the same turns. Near 1, the
// server adds nothing to llama.cpp's own prompt time. Undefined (ok false)
// without such turns or when the server reports no prompt time for them.
func PromptRatio(turns []TurnResult) (ratio float64, ok bool) {
	late := lateTenth(turns)
	if len(late) == 0 {
		return 0, false
	}
	prompt := make([]float64, len(late))
	for i, t := range late {
		prompt[i] = t.PromptMs
	}
	p := stats.Quantile(prompt, 0.5)
	if !(p > 0) {
		return 0, false
	}
	return stats.Quantile(ttfts(late), 0.5) / p, true
}

// LatePhases is the median of each Server-Timing phase over PromptRatio's
// turns (the last tenth after turn 1), each over the turns that report
// it, and "outside": the median of TTFT minus the phases' total over the
// turns that report one. Nil when no such turn reports a phase.
func LatePhases(turns []TurnResult) map[string]float64 {
	by := map[string][]float64{}
	for _, t := range lateTenth(turns) {
		for name, d := range t.Phases {
			by[name] = append(by[name], d)
		}
		if total, ok := t.Phases["total"]; ok {
			by["outside"] = append(by["outside"], t.TTFTMs-total)
		}
	}
	if len(by) == 0 {
		return nil
	}
	out := make(map[string]float64, len(by))
	for name, ds := range by {
		out[name] = stats.Quantile(ds, 0.5)
	}
	return out
}

// lateTenth is the last tenth of the turns after turn 1 (a tenth as in
// PlateauRatio); none without such turns.
func lateTenth(turns []TurnResult) []TurnResult {
	ts := warm(turns)
	if len(ts) == 0 {
		return nil
	}
	return ts[len(ts)-tenth(len(ts)):]
}

// tenth is a tenth of n turns, rounded up, at least 1.
func tenth(n int) int { return max(1, (n+9)/10) }

// TTFTQuantile is the q-quantile (0.5: the median) of the TTFT of the
// turns after turn 1, by stats.Quantile (interpolated linearly); NaN
// without such turns.
func TTFTQuantile(turns []TurnResult, q float64) float64 {
	return stats.Quantile(ttfts(warm(turns)), q)
}

// warm drops turn 1.
func warm(turns []TurnResult) []TurnResult {
	out := make([]TurnResult, 0, len(turns))
	for _, t := range turns {
		if t.Turn > 1 {
			out = append(out, t)
		}
	}
	return out
}

func ttfts(turns []TurnResult) []float64 {
	out := make([]float64, len(turns))
	for i, t := range turns {
		out[i] = t.TTFTMs
	}
	return out
}
