// Package anthropic serves Anthropic's Messages API, POST /v1/messages
// (streamed as Anthropic's named SSE events or whole) and POST
// /v1/messages/count_tokens, through the same turn pipeline, window,
// registry and backend as every other route, and GET /v1/models in
// Anthropic's list shape for requests that carry anthropic-version. A
// handler only translates: the body into one engine.Request (decode.go,
// with tools in web/toolcall's convention and constrained decoding), the
// result into Anthropic's objects (encoder.go). Errors have Anthropic's
// shape and types (errors.go): 529 overloaded_error for a full queue.
//
// A Messages body names no conversation (metadata.user_id names a user,
// who has many): as on the chat route, X-Conversation-Id does. Keys come
// as x-api-key or Authorization: Bearer (web's auth.go); anthropic-version,
// anthropic-beta and cache_control are accepted (kvwin caches every prefix
// anyway). See docs/anthropic.md.
package anthropic

import (
	"encoding/json"

	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// This file holds the wire types of the Messages API as kvwin reads and
// writes them. Fields of the request kvwin does not act on and that do not
// change the answer (metadata, service_tier, cache_control, …) are left to
// encoding/json to ignore; those that would change it and that kvwin
// cannot honour are declared so that their presence is a 400 naming them.

// messagesRequest is the body of POST /v1/messages and, without
// max_tokens, of POST /v1/messages/count_tokens.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      []message       `json:"messages"`
	System        json.RawMessage `json:"system"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   *float32        `json:"temperature"`
	TopP          *float32        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Metadata      *metadata       `json:"metadata"`
	Tools         []tool          `json:"tools"`
	ToolChoice    *toolChoice     `json:"tool_choice"`
	Thinking      *thinking       `json:"thinking"`
	OutputConfig  *outputConfig   `json:"output_config"`
	// Server-side tools kvwin has none of: a 400 naming them. (Context
	// management is accepted and left to kvwin's window, which decides
	// what of a long conversation is sent.)
	Container  json.RawMessage `json:"container"`
	MCPServers json.RawMessage `json:"mcp_servers"`
}

// metadata is accepted: user_id names the end user, not a conversation.
type metadata struct {
	UserID *string `json:"user_id"`
}

// message is one message as sent; its content is a string or an array of
// content blocks, kept raw until its index is known for errors.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// block is one content block of a message, a system prompt or a
// tool_result; which fields apply depends on Type.
type block struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// tool is one entry of tools: a client tool with its input schema. Tools
// with another type (Anthropic's server tools: web search, code
// execution, …) run on Anthropic's side, which kvwin is not.
type tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// toolChoice is tool_choice: auto, any, tool (with name) or none.
type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// thinking is read and checked, never done (checkThinking).
type thinking struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
}

// outputConfig is output_config: format json_schema is served by
// constrained decoding; effort, a hint, is accepted.
type outputConfig struct {
	Format *struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	} `json:"format"`
}

// Block types of an assistant's thinking, read and dropped (decode.go).
const (
	typeThinking         = "thinking"
	typeRedactedThinking = "redacted_thinking"
)

// Object and event types of the answer.
const (
	typeMessage      = "message"
	typeText         = "text"
	typeToolUse      = "tool_use"
	typeToolResult   = "tool_result"
	eventStart       = "message_start"
	eventDelta       = "message_delta"
	eventStop        = "message_stop"
	eventBlockStart  = "content_block_start"
	eventBlockDelta  = "content_block_delta"
	eventBlockStop   = "content_block_stop"
	eventPing        = "ping"
	eventError       = "error"
	deltaText        = "text_delta"
	deltaInputJSON   = "input_json_delta"
	roleAssistant    = "assistant"
	roleUser         = "user"
	roleSystem       = "system"
	stopEndTurn      = "end_turn"
	stopMaxTokens    = "max_tokens"
	stopStopSequence = "stop_sequence"
	stopToolUse      = "tool_use"
)

// messageObject is the answer: whole, or in message_start with no content
// and no stop reason yet.
type messageObject struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []any   `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        usage   `json:"usage"`
}

// usage is Anthropic's usage: input_tokens are the prompt tokens computed
// (not reused), cache_read_input_tokens those reused from the KV cache;
// kvwin bills no cache writes, so cache_creation_input_tokens is 0.
type usage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// textBlock and toolUseBlock are the answer's content blocks.
type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// The streamed events; each names its SSE event by its type.
type (
	startEvent struct {
		Type    string        `json:"type"`
		Message messageObject `json:"message"`
	}
	blockStartEvent struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}
	blockDeltaEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}
	textDelta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	inputJSONDelta struct {
		Type        string `json:"type"`
		PartialJSON string `json:"partial_json"`
	}
	blockStopEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	deltaEvent struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage usage `json:"usage"`
	}
	// bareEvent is message_stop and ping.
	bareEvent struct {
		Type string `json:"type"`
	}
)

func (e startEvent) EventName() string      { return e.Type }
func (e blockStartEvent) EventName() string { return e.Type }
func (e blockDeltaEvent) EventName() string { return e.Type }
func (e blockStopEvent) EventName() string  { return e.Type }
func (e deltaEvent) EventName() string      { return e.Type }
func (e bareEvent) EventName() string       { return e.Type }
func (e errorBody) EventName() string       { return e.Type }

var (
	_ core.EventNamer = startEvent{}
	_ core.EventNamer = errorBody{}
)

// countTokensResponse is the body of POST /v1/messages/count_tokens.
type countTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}

// Services is what the Messages routes need from the server they are
// mounted on (web.Server implements it).
type Services interface {
	core.ChatServices
	// NewID returns the server's response ids (fixed in tests, as Now).
	NewID(prefix string) string
}

// server serves the Messages routes over its Services.
type server struct{ Services }

// Register mounts the Messages API on r, served through svc. GET
// /v1/models in Anthropic's shape is Models, a middleware, since the
// OpenAI routes hold the path.
func Register(r gin.IRoutes, svc Services) {
	s := &server{svc}
	handle := s.Bind(Fail)
	r.POST("/v1/messages", handle(s.messages))
	r.POST("/v1/messages/count_tokens", handle(s.countTokens))
}
