// Package engine holds the contract every inference backend of kvwin meets:
// the core request, the streamed result, and the timings each backend reports.
//
// The contract is deliberately small. A Backend generates; everything else a
// backend may be able to do (tokenize, report its slots, snapshot KV) is an
// optional interface found by type assertion, so adapters for remote servers
// that cannot do something simply do not implement it.
package engine

import (
	"context"
	"time"

	"kvwin/engine/queue"
	"kvwin/internal/ident"
	"kvwin/kvcache"
)

// Message is one chat message as the client sent it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Roles a chat message may have.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ValidRole reports whether role is one kvwin accepts in a chat request.
func ValidRole(role string) bool {
	switch role {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// Sampling holds the sampling parameters of one request. The zero value is
// not meaningful; use DefaultSampling and override.
type Sampling struct {
	Temperature   float32 // 0 means greedy
	TopK          int     // 0 disables
	TopP          float32 // 1 disables
	MinP          float32 // 0 disables
	RepeatPenalty float32 // 1 disables
	RepeatLastN   int
	Seed          uint32
	// Grammar constrains generation to a GBNF grammar (llama.cpp's);
	// empty for none.
	Grammar string
	// PresencePenalty and FrequencyPenalty are OpenAI's: subtracted from a
	// token's logit once if it appeared in the last RepeatLastN tokens,
	// and once per appearance. 0 disables each.
	PresencePenalty  float32
	FrequencyPenalty float32
	// LogitBias is added to the logits of the tokens named (OpenAI's
	// logit_bias, in [-100, 100]; -100 bans a token in practice).
	LogitBias map[int]float32
	// Output, when set, constrains generation to one JSON value (see
	// Output); backends that cannot constrain return ErrInvalid.
	Output *Output
}

// Output constrains a generation to Prefix, then one JSON value, then
// Suffix, by grammar: a JSON object of Schema, or any JSON object when
// Schema is empty. Tool calls use Prefix and Suffix for their wrapper.
type Output struct {
	Schema         []byte
	Prefix, Suffix string
}

// DefaultSampling returns the sampling used when a request sets nothing:
// llama-server's defaults.
func DefaultSampling() Sampling {
	return Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64, Seed: 0xFFFFFFFF}
}

// Request is the core request every backend serves. Exactly one of Messages,
// Prompt and Tokens is set: Messages are rendered with the backend's chat
// template, Prompt is tokenized as raw text (no template), Tokens are used as
// they are (the node API's token-id prompts).
type Request struct {
	Model    string
	Messages []Message
	Prompt   string
	Tokens   []int
	// Tools are the request's function tools (OpenAI's objects, decoded
	// JSON) for a backend whose chat template renders them
	// (ToolTemplater); others ignore them.
	Tools []any

	// MaxTokens bounds the generated tokens; 0 means "until the context is
	// full or the model stops", as llama-server's n_predict = -1.
	MaxTokens int
	Sampling  Sampling
	Stop      []string

	// Slot asks for one slot (llama-server's id_slot); -1 lets the backend
	// choose. The embedded engine takes it as a hint: if the slot is busy,
	// the request is placed as if unpinned rather than waiting for it.
	Slot int
	// Keep is the number of prompt tokens a backend must keep when it has to
	// shift its context (llama-server's n_keep); 0 lets the backend decide.
	Keep int
	// PadSinks, when > 0, pads the rendered prompt after its first PadSinks
	// messages (the window's pinned sinks) with filler tokens up to a block
	// boundary of the backend's registry, so the sinks are whole blocks that
	// every conversation sharing them can reuse, and the kept history starts
	// on a block. Backends that cannot place tokens between messages ignore it.
	PadSinks int
	// Shift lets the backend reuse the KV of a later part of the prompt by
	// moving it (llama.cpp seq_rm + seq_add; llama-server's n_cache_reuse)
	// when an earlier part was removed: no recompute, but approximate, since
	// that KV was computed attending to what was removed. Set by the window
	// at eviction steps when the operator chose --shift.
	Shift bool
	// IgnoreEOS keeps generating past end-of-generation tokens, as
	// llama-server's ignore_eos (benchmarks that need a fixed length).
	IgnoreEOS bool
	// Logprobs asks for each generated token's log-probability, and
	// TopLogprobs (0–MaxTopLogprobs) for that many of the most likely
	// tokens at each step, in Result.Logprobs and Event.Logprobs.
	// Backends that cannot report them refuse the request with
	// ErrNoLogprobs rather than answer without them.
	Logprobs    bool
	TopLogprobs int
	// NoCache asks the backend not to reuse any cached prefix (llama-server's
	// cache_prompt=false). Used by benchmarks to measure cold prefill, and
	// by a router keeping tenants apart on a backend that does not.
	NoCache bool
	// SlotOnly, with Slot set, makes Slot binding as llama-server's id_slot
	// is: only that slot's own KV is reused (no prefix copied from another
	// slot, no snapshot restored), and if the slot is busy the request
	// runs on another reusing nothing. A router keeping tenants apart on a
	// backend that does not sets it (engine.SlotPinner); a kvwin node
	// reads it from /completion's kvwin_slot_only.
	SlotOnly bool

	// Owner is whose request it is: Tenant from its API key ("default"
	// without keys), and a backend never reuses KV computed for another
	// tenant's prompt, so cached-token counts say nothing about other
	// tenants; Conversation from prompt_cache_key or X-Conversation-Id (""
	// for unnamed), so a backend can delete the KV it saved for it when the
	// conversation is deleted.
	ident.Owner
	// Class is the request's priority class and Weight its tenant's share
	// within the class (0 means 1): a backend with a queue of its own
	// orders it by them (package queue; docs/tenants.md, "Priority and
	// fair shares"). A remote adapter sends both to a kvwin node.
	Class  queue.Class
	Weight float64
}

// CheckPrompt reports whether exactly one of Messages, Prompt and Tokens is
// set, as every backend requires.
func (r Request) CheckPrompt() error {
	forms := 0
	for _, set := range []bool{len(r.Messages) > 0, r.Prompt != "", len(r.Tokens) > 0} {
		if set {
			forms++
		}
	}
	if forms != 1 {
		return Invalid("exactly one of messages, prompt and tokens must be given")
	}
	return nil
}

// Timings are what a backend reports about one request. Every backend fills
// PromptTokens and CachedTokens; CachedEstimated is true where the backend
// cannot report reuse exactly and the figure is kvwin's estimate.
type Timings struct {
	PromptTokens    int           // tokens in the prompt
	CachedTokens    int           // prompt tokens reused from the KV cache, not recomputed
	CachedEstimated bool          // CachedTokens is an estimate
	PromptEval      time.Duration // time spent computing the uncached prompt tokens
	FirstToken      time.Duration // from the backend receiving the request to the first token
	GeneratedTokens int
	Decode          time.Duration // time spent generating after the first token
	// Where the backend's share of the time to the first token went, as far
	// as it knows (zero where it does not say): turning messages into
	// prompt tokens (Render, besides the tokenizer's own time on text no
	// cache held, Tokenize), and waiting from then until the prompt got a
	// slot (Queue). PromptEval is the prefill; the rest of FirstToken is
	// placement and sampling the first token.
	Render, Tokenize, Queue time.Duration
}

// Finish reasons, as OpenAI names them.
const (
	FinishStop   = "stop"   // end-of-generation token or a stop string
	FinishLength = "length" // MaxTokens reached or the slot's context is full
)

// MaxTopLogprobs bounds Request.TopLogprobs, as OpenAI does.
const MaxTopLogprobs = 20

// TokenLogprob is one generated token's log-probability (natural log, of
// the distribution the model gave before sampling's truncation), with the
// most likely alternatives when they were asked for.
type TokenLogprob struct {
	Token   string // the token's text; a byte token may be part of a character
	Bytes   []byte
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is one alternative at a step, most likely first.
type TopLogprob struct {
	Token   string
	Bytes   []byte
	Logprob float32
}

// Result is the outcome of a finished generation.
type Result struct {
	Text   string // the whole generated text, as streamed
	Tokens []int  // the generated token ids
	// Logprobs has one entry per generated token when the request asked
	// for them (end-of-generation excluded).
	Logprobs     []TokenLogprob
	FinishReason string
	// StopSequence is the stop string (Request.Stop) that ended the
	// generation; "" when an end-of-generation token or the length did,
	// or the backend does not say (Ollama).
	StopSequence string
	Slot         int // the slot that served it, -1 if unknown
	Timings      Timings
	Backend      string // as Event.Backend
	// Journal is where the backend's slot journal stood when the turn
	// ended: its events up to there include the turn's end and the load
	// after it, so a follower takes no load from an older event as the
	// load now (router/member.go). Zero when the backend publishes no
	// journal or does not say.
	Journal kvcache.Cursor
}

// Event is one step of a streamed generation. The first event a backend sends
// has First set and carries the prompt-side timings (prompt, cached tokens,
// prompt-eval time, time to first token) and the slot, so a server can send
// its response headers before any text; it may carry text too. Every later
// event carries text. Text never splits a UTF-8 character.
type Event struct {
	First   bool
	Text    string
	Slot    int
	Timings Timings
	// Backend names the backend that serves the request when a router
	// chose it; empty from a backend itself (its Info().Name applies).
	Backend string
	// Logprobs are those of the tokens generated since the last event,
	// when the request asked for them. Text held back (an incomplete
	// UTF-8 character, a possible stop string) may come in a later event
	// than its tokens' log-probabilities.
	Logprobs []TokenLogprob
}

// StreamFunc receives the events of a generation as they happen, on the
// goroutine that called Generate. Returning an error cancels the generation.
type StreamFunc func(Event) error

// Info describes what a backend serves.
type Info struct {
	Name        string // stable name used in X-Kvwin-Backend and metrics
	Model       string // model id clients name in requests
	ContextSlot int    // tokens per slot
	Slots       int
	// Snapshots: a slot given to another conversation keeps its KV on the
	// backend's disk and is restored when the conversation returns (kvwin
	// nodes). A router may count evicted prefixes as still held there.
	Snapshots bool
	// Tenants: the backend keeps tenants apart itself (a kvwin node that
	// trusts this caller's X-Kvwin-Tenant), so the cached tokens it reports
	// for a tenant are that tenant's own. A router caps what other
	// backends report at the tenant's own registry prefix.
	Tenants bool
	// SharesPrefixes: a prefix computed in one slot seeds another slot
	// without being computed again (a kvwin node copies it between slots).
	// A backend without it (llama-server) reuses only the KV a slot itself
	// holds, so a router placing a turn there weighs what the slot's
	// present chain is worth to the conversation that computed it.
	SharesPrefixes bool
}

// Backend generates completions. Implementations are safe for concurrent use.
type Backend interface {
	// Info describes the backend. It does not block.
	Info() Info
	// Generate runs req, calling stream (if not nil) with each event on the
	// calling goroutine, and blocks until the generation ends, ctx is
	// cancelled or stream returns an error. Errors before the first event
	// mean nothing was generated.
	Generate(ctx context.Context, req Request, stream StreamFunc) (Result, error)
}

// SlotState is a snapshot of one slot of a backend.
type SlotState struct {
	ID         int  `json:"id"`
	Context    int  `json:"n_ctx"`
	Processing bool `json:"is_processing"`
	Tokens     int  `json:"n_tokens"` // tokens held in the slot's KV
	// Tenant is the tenant whose tokens the slot holds ("" when it holds
	// none); a server shows a tenant only its own slots. Not on the wire.
	Tenant string `json:"-"`
}
