package ttft

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"math"
	"strconv"
)

// Report is a whole run: ttft.json's document.
type Report struct {
	Policies []PolicyResult `json:"policies"`
}

// WriteJSON writes r as ttft.json: one indented object, exactly
// {"policies": [{"policy", "evictions", "plateau_ratio", "cached_share",
// "fit": {"c0", "a", "b"}, "turns": [{"turn", "history_tokens",
// "prompt_tokens", "cached_tokens", "new_tokens", "ttft_ms", "prompt_ms",
// "step"}]}]}. Fit coefficients are in seconds (see attention.Coefficients).
func WriteJSON(w io.Writer, r Report) error {
	if r.Policies == nil {
		r.Policies = []PolicyResult{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// csvHeader is ttft.csv's first row. It is ttft.json's turn keys with the
// policy first and one more column, evicted (1 when an eviction step
// happened at the turn), so a plot tool needs no second file.
var csvHeader = []string{"policy", "turn", "history_tokens", "prompt_tokens", "cached_tokens",
	"new_tokens", "ttft_ms", "prompt_ms", "step", "evicted"}

// WriteCSV writes r as ttft.csv: a header row, then one row per policy and
// measured turn, policies in run order.
func WriteCSV(w io.Writer, r Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	itoa := strconv.Itoa
	// Times are measured to the microsecond; more digits would be noise.
	ftoa := func(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', -1, 64) }
	for _, p := range r.Policies {
		for _, t := range p.Turns {
			evicted := "0"
			if t.Evicted {
				evicted = "1"
			}
			row := []string{p.label(), itoa(t.Turn), itoa(t.HistoryTokens), itoa(t.PromptTokens),
				itoa(t.CachedTokens), itoa(t.NewTokens), ftoa(t.TTFTMs), ftoa(t.PromptMs), itoa(t.Step), evicted}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
