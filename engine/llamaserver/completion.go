package llamaserver

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"time"

	"kvwin/engine"
	"kvwin/kvcache"
)

// completionRequest is the body of POST /completion, with llama-server's
// field names. Every field is always sent: a server's defaults differ by
// version and flags, and kvwin's request must mean the same everywhere.
type completionRequest struct {
	Prompt        []int    `json:"prompt"`         // token ids: no tokenization on the server
	IDSlot        int      `json:"id_slot"`        // -1: the server picks
	CachePrompt   bool     `json:"cache_prompt"`   // reuse the slot's common prefix
	NKeep         int      `json:"n_keep"`         // tokens kept if the context shifts; -1 all
	NCacheReuse   int      `json:"n_cache_reuse"`  // Config.CacheReuse
	NPredict      int      `json:"n_predict"`      // -1: until EOS or the context is full
	Seed          uint32   `json:"seed"`           // 4294967295: random
	Temperature   float32  `json:"temperature"`    // 0: greedy
	TopK          int      `json:"top_k"`          // 0: off
	TopP          float32  `json:"top_p"`          // 1: off
	MinP          float32  `json:"min_p"`          // 0: off
	RepeatPenalty float32  `json:"repeat_penalty"` // 1: off
	RepeatLastN   int      `json:"repeat_last_n"`
	Stop          []string `json:"stop"`       // never null
	IgnoreEOS     bool     `json:"ignore_eos"` // generate past end-of-generation tokens
	Grammar       string   `json:"grammar,omitempty"`
	// The rest of OpenAI's sampling, as llama-server names it; set only
	// when the request set it.
	PresencePenalty  float32      `json:"presence_penalty,omitempty"`
	FrequencyPenalty float32      `json:"frequency_penalty,omitempty"`
	LogitBias        [][2]float64 `json:"logit_bias,omitempty"` // [[token, bias], …]
	// JSONSchema is llama-server's constrained JSON output; KvwinOutput
	// is the whole constraint (with a tool call's wrapper), which kvwin
	// nodes read and llama-server ignores.
	JSONSchema  json.RawMessage `json:"json_schema,omitempty"`
	KvwinOutput *outputBody     `json:"kvwin_output,omitempty"`
	// KvwinSlotOnly asks a kvwin node for llama-server's binding id_slot
	// (engine.Request.SlotOnly); llama-server ignores it, being so already.
	KvwinSlotOnly bool `json:"kvwin_slot_only,omitempty"`
	// NProbs asks for each generated token's probability and its top
	// alternatives (see logprobs.go); PostSamplingProbs is false with
	// it: the distribution before sampling, as OpenAI reports. Both
	// are left out when no log-probabilities are asked for.
	NProbs            int   `json:"n_probs,omitempty"`
	PostSamplingProbs *bool `json:"post_sampling_probs,omitempty"`
	// Stream is always true (see the package comment).
	Stream bool `json:"stream"`
	// TimingsPerToken puts the timings in every chunk, so the first one
	// already says how many prompt tokens the server reused: the engine
	// contract's first event carries them.
	TimingsPerToken bool `json:"timings_per_token"`
}

// outputBody is engine.Output on the wire (kvwin_output).
type outputBody struct {
	Schema json.RawMessage `json:"schema,omitempty"`
	Prefix string          `json:"prefix,omitempty"`
	Suffix string          `json:"suffix,omitempty"`
}

// shiftMinRun is the n_cache_reuse sent for shifting requests: shorter
// runs are cheaper to recompute than to move.
const shiftMinRun = 64

// completionBody translates req, whose prompt is tokens, for the server.
func (b *Backend) completionBody(req engine.Request, tokens []int) completionRequest {
	s := req.Sampling
	body := completionRequest{
		Prompt: tokens, IDSlot: req.Slot, CachePrompt: !req.NoCache, NKeep: req.Keep,
		NCacheReuse: b.cfg.CacheReuse, NPredict: req.MaxTokens,
		Seed: s.Seed, Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
		RepeatPenalty: s.RepeatPenalty, RepeatLastN: s.RepeatLastN,
		Stop: req.Stop, IgnoreEOS: req.IgnoreEOS, Grammar: s.Grammar, Stream: true, TimingsPerToken: true,
	}
	if body.NPredict == 0 {
		body.NPredict = -1 // the engine's "no limit"; 0 would generate nothing
	}
	body.PresencePenalty, body.FrequencyPenalty = s.PresencePenalty, s.FrequencyPenalty
	for tok, bias := range s.LogitBias {
		body.LogitBias = append(body.LogitBias, [2]float64{float64(tok), float64(bias)})
	}
	slices.SortFunc(body.LogitBias, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
	if o := s.Output; o != nil {
		body.KvwinOutput = &outputBody{Schema: o.Schema, Prefix: o.Prefix, Suffix: o.Suffix}
		if o.Prefix == "" && o.Suffix == "" {
			body.JSONSchema = o.Schema
			if len(o.Schema) == 0 {
				body.JSONSchema = json.RawMessage(`{"type":"object"}`)
			}
		}
	}
	if body.NProbs = nProbs(req); body.NProbs > 0 {
		body.PostSamplingProbs = new(bool)
	}
	if req.Shift && body.NCacheReuse == 0 {
		body.NCacheReuse = shiftMinRun // reuse shifted chunks of at least this many tokens
	}
	if req.NoCache {
		body.NCacheReuse = 0 // nothing of the slot is reused, moved chunks neither
	}
	body.KvwinSlotOnly = req.SlotOnly && req.Slot >= 0
	if body.Stop == nil {
		body.Stop = []string{}
	}
	return body
}

// chunk is one object of a /completion answer: a streamed partial
// ({content, tokens, stop: false, id_slot, tokens_predicted,
// tokens_evaluated[, timings]}), the final object (stop: true, with
// stop_type, truncated, tokens_cached, timings, …), or an in-stream error.
type chunk struct {
	Content         string       `json:"content"`
	Tokens          []int        `json:"tokens"`
	Stop            bool         `json:"stop"`
	IDSlot          *int         `json:"id_slot"`
	TokensPredicted int          `json:"tokens_predicted"`
	TokensEvaluated int          `json:"tokens_evaluated"`
	StopType        string       `json:"stop_type"`     // final: none, eos, word, limit
	StoppingWord    string       `json:"stopping_word"` // final, with stop_type word: the stop string
	Truncated       bool         `json:"truncated"`
	Timings         *timings     `json:"timings"`
	Usage           *usage       `json:"usage"` // OpenAI's, where a server adds it
	Error           *errorObject `json:"error"`
	// Probs are the probabilities of the chunk's tokens (n_probs), or of
	// all of them in a final object that was not streamed.
	Probs []probEntry `json:"completion_probabilities"`
	// KvwinJournal, from a kvwin node, on the final object: where its
	// slot journal stood when the turn ended (engine.Result.Journal).
	KvwinJournal *kvcache.Cursor `json:"kvwin_journal"`
}

// maxEpoch bounds an epoch taken from an answer (a node's are 16 hex
// digits): a position that cannot be one is left out.
const maxEpoch = 64

// journal is where c says the node's journal stood (engine.Result.Journal),
// zero when it does not say.
func (c *chunk) journal() kvcache.Cursor {
	j := c.KvwinJournal
	if j == nil || j.Epoch == "" || len(j.Epoch) > maxEpoch {
		return kvcache.Cursor{}
	}
	return *j
}

// timings is llama-server's timings object (the fields kvwin reads).
// CacheN is a pointer: servers before mid-2025 do not send it, and its
// absence is not a reuse of 0.
type timings struct {
	CacheN      *int    `json:"cache_n"`   // prompt tokens reused from the slot's KV
	PromptN     int     `json:"prompt_n"`  // prompt tokens computed
	PromptMS    float64 `json:"prompt_ms"` // time computing them
	PredictedN  int     `json:"predicted_n"`
	PredictedMS float64 `json:"predicted_ms"`
}

// usage is OpenAI's usage object, which llama-server's OpenAI routes send
// (and a proxy in front of /completion may add).
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// Reading reuse. Servers have said how many prompt tokens they reused in
// three ways since early 2025, all read, the most direct first:
//
//	timings.cache_n                          newer servers and kvwin nodes: the count itself
//	usage.prompt_tokens_details.cached_tokens OpenAI's usage, where present
//	tokens_evaluated − timings.prompt_n      older servers (June 2025): the prompt's tokens
//	                                         less those computed (usage.prompt_tokens −
//	                                         timings.prompt_n on their OpenAI routes)
//
// The prompt's length is tokens_evaluated where sent (every server since
// 2024 sends it), else usage.prompt_tokens, else cache_n + prompt_n. A
// chunk that says none of it reports what it can; the router checks the
// counts against what it sent and replaces those that cannot be true.

// promptSide maps the prompt half of what c reports: the prompt's length,
// the tokens reused of it and the time computing the rest. ok is false
// when c says nothing of the prompt.
func (c *chunk) promptSide() (t engine.Timings, ok bool) {
	tm, u := c.Timings, c.Usage
	switch {
	case c.TokensEvaluated > 0:
		t.PromptTokens = c.TokensEvaluated
	case u != nil && u.PromptTokens > 0:
		t.PromptTokens = u.PromptTokens
	case tm != nil && tm.CacheN != nil:
		t.PromptTokens = *tm.CacheN + tm.PromptN
	}
	switch {
	case tm != nil && tm.CacheN != nil:
		t.CachedTokens = *tm.CacheN
	case u != nil && u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil:
		t.CachedTokens = *u.PromptTokensDetails.CachedTokens
	case tm != nil && t.PromptTokens > 0:
		t.CachedTokens = max(t.PromptTokens-tm.PromptN, 0)
	}
	if tm != nil {
		t.PromptEval = ms(tm.PromptMS)
	}
	return t, t.PromptTokens > 0 || tm != nil
}

// ms converts llama-server's float milliseconds, to the nearest nanosecond
// (30.958 ms is not exact in binary).
func ms(v float64) time.Duration {
	if v <= 0 || math.IsNaN(v) {
		return 0
	}
	return time.Duration(math.Round(v * float64(time.Millisecond)))
}

// stoppingWord is the stop string that ended a generation, when the final
// chunk says a stop string did (stop_type word).
func stoppingWord(c *chunk) string {
	if c.StopType != "word" {
		return ""
	}
	return c.StoppingWord
}

// finishReason maps llama-server's stop_type.
func finishReason(c *chunk) string {
	if c.StopType == "limit" || c.Truncated {
		return engine.FinishLength
	}
	return engine.FinishStop // eos, word (and none, which a final object should not carry)
}
