package engine

import (
	"context"

	"kvwin/kvcache"
)

// The optional abilities of a backend, beyond Backend. Each is one small
// interface found by type assertion: a backend that cannot do something
// does not implement it, and whoever needs it falls back (byte estimates,
// approximate keys) or answers 501. Every adapter states the ones it has
// with compile-time checks (var _ engine.X = (*T)(nil)), so a renamed
// method breaks the build instead of silently dropping to a fallback. The
// router implements each by delegating to its backends.

// Tokenizer is implemented by backends that can tokenize exactly as they
// compute, so a gateway can hash the prompt's blocks.
type Tokenizer interface {
	Tokenize(ctx context.Context, text string, special bool) ([]int, error)
	Detokenize(ctx context.Context, tokens []int) (string, error)
}

// SpecialTokenizer is implemented by backends that tokenize with
// llama.cpp's two flags apart: addSpecial inserts BOS, parseSpecial turns
// control-token text into control tokens (llama-server's /tokenize).
type SpecialTokenizer interface {
	TokenizeSpecial(ctx context.Context, text string, addSpecial, parseSpecial bool) ([]int, error)
}

// MessageCounter is implemented by backends that count a chat message's
// tokens exactly as they render it, so a window plans in their tokens. It
// does not block on the network.
type MessageCounter interface {
	CountMessage(m Message) int
}

// ConversationCounter is implemented by backends that count a whole
// conversation's messages at once for a tenant, reusing the counts of the
// prefix they counted on its earlier turns, so a turn costs its new
// messages only. CountMessages(tenant, msgs)[i] is CountMessage(msgs[i]).
type ConversationCounter interface {
	CountMessages(tenant string, msgs []Message) []int
}

// Prompter is implemented by backends that render a request's prompt into
// the token ids they compute, so a gateway keys blocks exactly. It may
// block on the backend.
type Prompter interface {
	Prompt(ctx context.Context, req Request) ([]int, error)
}

// TextRenderer is implemented by backends that cannot tokenize for kvwin
// (Ollama): PromptText is the canonical text of a request's prompt that
// both the backend's own reuse estimate and a gateway's registry key
// approximately (kvcache.NewTextKeyer), so the two agree block for block.
type TextRenderer interface {
	PromptText(req Request) (string, error)
}

// ChatTemplater is implemented by backends that know their model's chat
// template (llama-server's /props chat_template).
type ChatTemplater interface {
	ChatTemplate() string
}

// ToolTemplater is implemented by backends whose model's chat template can
// render a request's Tools itself. TemplateTools reports whether it does,
// in the <tool_call> convention a chat handler parses; when it does not,
// the handler describes the tools in the system message instead.
type ToolTemplater interface {
	TemplateTools() bool
}

// HealthChecker is implemented by backends with a health endpoint. Health
// blocks on the backend.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// ConversationForgetter is implemented by backends that keep state per
// conversation (KV snapshots): ForgetConversation deletes a tenant's and
// reports how many stores held some. It blocks on them.
type ConversationForgetter interface {
	ForgetConversation(ctx context.Context, tenant, conversation string) (int, error)
}

// SlotReporter is implemented by backends that can list their slots.
type SlotReporter interface {
	Slots() []SlotState
}

// SlotFetcher is implemented by remote backends whose slots are learned by
// asking (llama-server's GET /slots): FetchSlots asks now and blocks on the
// backend, where SlotReporter's Slots returns what was last learned.
type SlotFetcher interface {
	FetchSlots(ctx context.Context) ([]SlotState, error)
}

// SlotPinner is implemented by backends that run a request on exactly the
// slot it names (Request.Slot, waiting for it if busy), reuse only that
// slot's own KV, and with Request.NoCache reuse none of it (llama-server's
// id_slot and cache_prompt=false). A router that knows whose KV each slot
// holds can then keep tenants apart on a backend that does not
// (Info.Tenants false). PinsSlots reports whether this backend does so now.
type SlotPinner interface {
	PinsSlots() bool
}

// SlotReader is implemented by remote backends that can say what their
// slots hold (llama-server's GET /slots): ReadSlots asks now and blocks on
// the backend. A backend whose server does not serve it (llama-server
// without --slots) returns an error wrapping ErrNotSupported.
type SlotReader interface {
	ReadSlots(ctx context.Context) ([]SlotContent, error)
}

// SlotContent is what one slot of a backend holds, as far as the server
// says.
type SlotContent struct {
	ID         int
	Processing bool
	// Tokens are the token ids of the slot's last prompt, when the server
	// gives its text (older llama-server builds); nil when it does not.
	Tokens []int
	// Count is the tokens the slot's KV holds (n_prompt_tokens, a kvwin
	// node's n_tokens), or len(Tokens); -1 when the server says neither.
	Count int
}

// Readier is implemented by backends that can tell whether they could
// serve now (a router: while one of its backends is healthy; a catalog:
// while one of its models can be served). Ready returns nil if a request
// could be served now, else an error wrapping ErrUnavailable that says why
// not. It does not block.
type Readier interface {
	Ready() error
}

// Refresher is implemented by remote backends that can re-read what they
// serve (llama-server's /props: slots, context, model), so a node
// restarted with fewer slots or another context is planned for as it is
// now. Refresh blocks on the backend.
type Refresher interface {
	Refresh(ctx context.Context) error
}

// SnapshotExpirer is implemented by backends that keep KV snapshots on
// disk under a TTL: ExpireSnapshots deletes those not used for it now
// (the backend also does so on its own) and returns how many. It blocks on
// disk.
type SnapshotExpirer interface {
	ExpireSnapshots() int
}

// SlotJournaler is implemented by backends that publish what their slots
// hold as a journal of changes (the embedded engine): a kvwin node serves
// it at GET /kvwin/v1/events, and every gateway follows it.
type SlotJournaler interface {
	SlotJournal() *kvcache.Journal
}

// ResidencyFollower is implemented by backends whose slots' content a
// gateway can follow as a journal (a kvwin node's GET /kvwin/v1/events).
// FollowResidency blocks, calling fn with each event from c on (a snapshot
// first when c cannot be resumed), until ctx ends, the stream breaks or fn
// returns an error; it returns an error wrapping ErrNotSupported when the
// backend publishes no journal.
type ResidencyFollower interface {
	FollowResidency(ctx context.Context, c kvcache.Cursor, fn func(kvcache.JournalEvent) error) error
}

// LoadReporter is implemented by backends that can say how many requests
// run in their slots and wait for one (the embedded engine). It does not
// block.
type LoadReporter interface {
	Load() kvcache.Load
}
