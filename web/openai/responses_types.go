package openai

import (
	"encoding/json"
)

// The Responses API's wire types (POST /v1/responses and the stored
// responses' routes), as the openai-go v3 SDK reads and writes them. Only
// the fields kvwin acts on, or refuses, are declared.

// responsesRequest is the body of POST /v1/responses.
type responsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []responseTool    `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float32          `json:"temperature"`
	TopP               *float32          `json:"top_p"`
	Text               *responseText     `json:"text"`
	PromptCacheKey     string            `json:"prompt_cache_key"`
	Metadata           map[string]string `json:"metadata"`
	Truncation         string            `json:"truncation"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	Include            []string          `json:"include"`
	PreviousResponseID string            `json:"previous_response_id"`
	Reasoning          *reasoningParam   `json:"reasoning"`
	// IgnoreEOS is llama-server's extension, as on chat completions:
	// generate max_output_tokens whatever the model says (benchmarks).
	IgnoreEOS bool `json:"ignore_eos"`
	// Accepted and not acted on: they describe the caller or OpenAI's
	// billing, not the answer.
	User             string `json:"user"`
	SafetyIdentifier string `json:"safety_identifier"`
	ServiceTier      string `json:"service_tier"`
	// rawTools is tools as sent, which the response echoes.
	rawTools json.RawMessage
}

// reasoningParam is reasoning: checked, not acted on. The served model does
// not reason, so an answer has no reasoning items and no reasoning tokens,
// which is an answer at any effort (a model reasons as much as it needs);
// Codex sends reasoning on every request, so a 400 would refuse it whole.
type reasoningParam struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"`
}

// refusedFields are the request fields kvwin cannot honour: sent with a
// value (not null, not false, not 0), they are a 400 naming them.
var refusedFields = []string{"background", "conversation", "prompt", "max_tool_calls",
	"top_logprobs", "context_management", "moderation", "image", "access_programs"}

// acceptedFields are the top-level fields besides responsesRequest's own
// and refusedFields that are accepted and not acted on: sent by the
// official SDKs (stream_options, prompt_cache_retention,
// prompt_cache_options) or by Codex (client_metadata), none of which
// changes the answer. Any other field is a 400 naming it, as OpenAI
// answers: a client that sends stop or max_tokens learns kvwin did not
// honour it, instead of getting an answer that ignored it.
var acceptedFields = []string{"stream_options", "prompt_cache_retention", "prompt_cache_options", "client_metadata"}

// responseTool is one entry of tools: a function, flat (not nested under
// "function" as in chat completions); a namespace of functions; or a tool
// of OpenAI's own (web_search, file_search, …), which kvwin does not run.
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
	// Tools are a namespace's.
	Tools []responseTool `json:"tools,omitempty"`
}

// responseText is the text field: the output's format.
type responseText struct {
	Format *responseFormat `json:"format,omitempty"`
	// Verbosity is a hint to OpenAI's models (low, medium or high; other
	// values are a 400); kvwin's answer is the model's own, so it is
	// echoed and not acted on.
	Verbosity string `json:"verbosity,omitempty"`
}

// responseFormat is text.format: text, json_object or json_schema (whose
// name and schema sit beside type, not under json_schema).
type responseFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// inputItem is one item of input. Which fields apply depends on Type
// (absent means "message", as OpenAI's easy input message).
type inputItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Role    string          `json:"role,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	Status  string          `json:"status,omitempty"`
	// function_call and function_call_output.
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Namespace string          `json:"namespace,omitempty"`
	Arguments *string         `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
}

// inputPart is one part of a message's content array.
type inputPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// listedItem is an input item as GET /v1/responses/{id}/input_items lists
// it: with its id, and a message's content as parts.
type listedItem struct {
	Type      string     `json:"type"`
	ID        string     `json:"id"`
	Role      string     `json:"role,omitempty"`
	Content   []textPart `json:"content,omitempty"`
	Status    string     `json:"status,omitempty"`
	CallID    string     `json:"call_id,omitempty"`
	Name      string     `json:"name,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Arguments *string    `json:"arguments,omitempty"`
	Output    *string    `json:"output,omitempty"`
}

// textPart is a content part of text: input_text in an input message,
// output_text (with its annotations) in an answer.
type textPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations,omitempty"`
}

// outputText is an answer's text part: annotations and logprobs are always
// present (empty), as OpenAI sends them.
type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

// outputItem is one item of a response's output: a message or a
// function_call.
type outputItem struct {
	Type    string        `json:"type"`
	ID      string        `json:"id"`
	Status  string        `json:"status"`
	Role    string        `json:"role,omitempty"`
	Content *[]outputText `json:"content,omitempty"`
	// function_call.
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Namespace string  `json:"namespace,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

// responseObject is a response, whole or as the streamed events carry it.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	CompletedAt        *int64             `json:"completed_at"`
	Status             string             `json:"status"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []outputItem       `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	PromptCacheKey     *string            `json:"prompt_cache_key"`
	Store              bool               `json:"store"`
	Temperature        float32            `json:"temperature"`
	Text               responseText       `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopP               float32            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *responseUsage     `json:"usage"`
	Metadata           map[string]any     `json:"metadata"`
	Background         bool               `json:"background"`
	Reasoning          map[string]any     `json:"reasoning"`
	User               *string            `json:"user"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

// responseUsage is the response's usage; the details are values, so
// cached_tokens is always present.
type responseUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  inputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails outputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
}

type inputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type outputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// streamEvent is one event of a streamed response; the fields set are the
// ones its type carries. It names its SSE event (core.EventNamer).
type streamEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	Item           *outputItem     `json:"item,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Part           *outputText     `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Logprobs       json.RawMessage `json:"logprobs,omitempty"`
	// error events.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Param   string `json:"param,omitempty"`
}

// itemList is the body of GET /v1/responses/{id}/input_items.
type itemList struct {
	Object  string       `json:"object"`
	Data    []listedItem `json:"data"`
	FirstID *string      `json:"first_id"`
	LastID  *string      `json:"last_id"`
	HasMore bool         `json:"has_more"`
}

// deletedResponse is the body of DELETE /v1/responses/{id}.
type deletedResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}
