// Package openai serves the OpenAI API: POST /v1/chat/completions (with
// tools and response_format, through web/toolcall), the Responses API
// (POST /v1/responses and its stored responses), POST /v1/completions,
// POST /v1/embeddings, GET /v1/models and /v1/models/{model}. A handler
// only translates its body into an engine.Request and hands it to the
// server's turn with this API's encoder (generate.go); errors have
// OpenAI's shape (core.Fail).
package openai

import (
	"encoding/json"
	"log/slog"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// This file holds the OpenAI wire types kvwin reads and writes. Only the
// fields kvwin acts on are declared; encoding/json ignores the rest.

// Object names of OpenAI responses.
const (
	objectChatCompletion = "chat.completion"
	objectChatChunk      = "chat.completion.chunk"
	objectTextCompletion = "text_completion" // legacy completions, streamed or not
	objectList           = "list"
	objectModel          = "model"
)

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	core.Params
	Messages       messageList              `json:"messages"`
	Logprobs       bool                     `json:"logprobs"`
	TopLogprobs    *int                     `json:"top_logprobs"`
	ResponseFormat *toolcall.ResponseFormat `json:"response_format"`
	Tools          []toolcall.Tool          `json:"tools"`
	// ToolChoice is "none", "auto", "required" or
	// {"type": "function", "function": {"name": …}}; kept raw until read.
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

// chatMessage is one message as sent. Content stays raw until translation,
// where its index is known for error messages: it is a string, null, or an
// array of content parts.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []toolcall.Call `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

// contentPart is one element of an array-valued message content.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// completionRequest is the body of POST /v1/completions. Prompt stays raw
// because OpenAI allows a string, an array of strings or token ids.
type completionRequest struct {
	core.Params
	Prompt json.RawMessage `json:"prompt"`
	// Logprobs is the legacy API's count of top alternatives per token
	// (0–5 in OpenAI's; kvwin allows up to engine.MaxTopLogprobs).
	Logprobs *int `json:"logprobs"`
}

// usage is OpenAI's usage object. PromptTokensDetails is a value, not a
// pointer, so cached_tokens is always present, even when 0.
type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// chatCompletion is the non-streamed chat response.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatOutput    `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// chatOutput is the answer's message. Content is null when the model only
// called tools, as OpenAI sends it.
type chatOutput struct {
	Role      string          `json:"role"`
	Content   *string         `json:"content"`
	ToolCalls []toolcall.Call `json:"tool_calls,omitempty"`
}

// chatLogprobs is a chat choice's logprobs object.
type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
	Refusal []tokenLogprob `json:"refusal"`
}

// tokenLogprob is one token of chatLogprobs.content. Bytes are the UTF-8
// bytes as numbers, as OpenAI sends them (a token may hold part of a
// character).
type tokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// completionObject is the object a completion streams in chunks (and a
// legacy completion also answers whole), with choices of type C. Usage is
// set only on the usage chunk, whose Choices is empty (not null), as
// OpenAI sends it, and on a whole legacy completion.
type completionObject[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

// chatChunk is one streamed chat chunk.
type chatChunk = completionObject[chatChunkChoice]

// chatChunkChoice carries a delta; FinishReason is null until the last one.
type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs,omitempty"`
	FinishReason *string       `json:"finish_reason"`
}

// chatDelta is the change one chunk brings. Content is a pointer so the
// first chunk can carry an explicit "" and the last one none at all.
type chatDelta struct {
	Role      string               `json:"role,omitempty"`
	Content   *string              `json:"content,omitempty"`
	ToolCalls []toolcall.CallDelta `json:"tool_calls,omitempty"`
}

// textCompletion is a legacy completion, streamed chunk or whole response:
// OpenAI uses the same object for both.
type textCompletion = completionObject[textChoice]

// textChoice is one legacy completion choice; FinishReason is null in every
// streamed chunk but the last.
type textChoice struct {
	Text         string        `json:"text"`
	Index        int           `json:"index"`
	Logprobs     *textLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// textLogprobs is the legacy completions' logprobs object.
type textLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// modelList is the body of GET /v1/models.
type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// Services is what the OpenAI routes need from the server they are
// mounted on (web.Server implements it).
type Services interface {
	core.ChatServices
	// NewID returns the server's response ids (fixed in tests, as Now).
	NewID(prefix string) string
	// WindowAs windows a chat in the conversation and under the policy
	// ("" the server's) the dialect decided: a Responses chain's.
	WindowAs(c *gin.Context, t *core.Turn, conversation, policy string, req *engine.Request) error
	// Log is the server's logger.
	Log() *slog.Logger
}

// server serves the OpenAI routes over its Services.
type server struct {
	Services
	store  ResponseStore // the Responses API's stored responses; nil: none
	chains *chainMemo    // decoded chains (with store)
}

// Register mounts the OpenAI API on r, served through svc.
func Register(r gin.IRoutes, svc Services) {
	s := &server{Services: svc}
	handle := s.Bind(core.Fail)
	r.POST("/v1/chat/completions", handle(s.chatCompletions))
	r.POST("/v1/completions", handle(s.completions))
	r.POST("/v1/embeddings", handle(s.embeddings))
	r.GET("/v1/models", s.models)
	r.GET("/v1/models/*model", s.model)
}
