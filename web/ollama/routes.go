// Package ollama serves Ollama's API, with its own types
// (github.com/ollama/ollama/api), through the same window, registry and
// backend as the OpenAI routes:
//
//	POST /api/chat       messages, tools → NDJSON stream (default) or one object
//	POST /api/generate   prompt (templated, raw, or with a Go template) → the same
//	GET  /api/tags       the served model
//	POST /api/show       its details, GGUF metadata, template, parameters
//	GET  /api/ps         the loaded model
//	GET  /api/version    the Ollama API version kvwin speaks
//	HEAD|GET /           "Ollama is running", as clients probe it
//
// Both generations take format ("json" or a JSON Schema); tools and
// format are served by the OpenAI routes' machinery (web/toolcall, in
// tools.go). Errors are Ollama's {"error": "…"} with core.Classify's
// status (404 for an unknown model). Ollama's body names no conversation:
// X-Conversation-Id does. Tenants and keys are those of every other route
// (web's auth.go).
package ollama

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	oapi "github.com/ollama/ollama/api"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// Version is the Ollama release whose API kvwin speaks (the pinned
// module's), reported by /api/version: clients gate features on it.
const Version = "0.9.6"

// latestTag is the tag Ollama appends to a model name without one.
const latestTag = ":latest"

// Services is what the Ollama routes need from the server they are
// mounted on (web.Server implements it).
type Services interface {
	core.ChatServices
	// Log is the server's logger.
	Log() *slog.Logger
	// Dashboard serves the operator's page (GET / from a browser).
	Dashboard(c *gin.Context)
}

// server serves the Ollama routes over its Services.
type server struct{ Services }

// Register mounts Ollama's API on r, served through svc.
func Register(r gin.IRoutes, svc Services) {
	s := &server{svc}
	handle := s.Bind(core.FailOllama)
	r.GET("/", s.ollamaRoot)
	r.HEAD("/", s.ollamaRoot)
	r.POST("/api/chat", handle(s.ollamaChat))
	r.POST("/api/generate", handle(s.ollamaGenerate))
	r.GET("/api/tags", s.ollamaTags)
	r.HEAD("/api/tags", s.ollamaTags)
	r.POST("/api/show", handle(s.ollamaShow))
	r.POST("/api/pull", handle(s.ollamaPull))
	r.POST("/api/create", s.ollamaUnmanaged("create"))
	r.POST("/api/copy", s.ollamaUnmanaged("copy"))
	r.DELETE("/api/delete", s.ollamaUnmanaged("delete"))
	r.POST("/api/push", s.ollamaUnmanaged("push"))
	r.POST("/api/embed", handle(s.ollamaEmbed))
	r.POST("/api/embeddings", handle(s.ollamaEmbeddings))
	r.GET("/api/ps", s.ollamaPS)
	r.GET("/api/version", s.ollamaVersion)
	r.HEAD("/api/version", s.ollamaVersion)
}

// ollamaRoot answers Ollama's liveness probe (the CLI's heartbeat is HEAD /).
func (s *server) ollamaRoot(c *gin.Context) {
	if wantsHTML(c) {
		s.Dashboard(c) // a browser: the operator's dashboard
		return
	}
	c.Header("Content-Type", "text/plain; charset=utf-8")
	c.Status(http.StatusOK)
	if c.Request.Method != http.MethodHead {
		_, _ = c.Writer.WriteString("Ollama is running")
	}
}

// ollamaVersion serves GET /api/version.
func (s *server) ollamaVersion(c *gin.Context) {
	core.WriteJSON(c.Writer, http.StatusOK, map[string]string{"version": Version})
}

// ollamaModel checks that name (with or without ":latest") is the served
// model. Ollama requires a name, and answers 404 for one it does not have.
func ollamaModel(name string, info engine.Info) error {
	if name == "" {
		return core.BadInput(core.CodeMissingParameter, "model", "model is required")
	}
	if strings.TrimSuffix(name, latestTag) != strings.TrimSuffix(info.Model, latestTag) {
		return fmt.Errorf("model %q not found (this server serves %q): %w", name, info.Model, engine.ErrUnknownModel)
	}
	return nil
}

// streams reports Ollama's default: a request streams unless it says
// "stream": false.
func streams(stream *bool) bool { return stream == nil || *stream }

// errImages: what the served model cannot do.
var errImages = errors.New("images are not supported: the served model has no vision")

// ollamaCommon checks the fields chat and generate share that kvwin cannot
// honour, so that a client never gets an answer that silently ignored them.
func ollamaCommon(info engine.Info, think *bool) error {
	if think != nil && *think {
		return core.BadInput(core.CodeInvalidValue, "think", "%q does not support thinking", info.Model)
	}
	return nil
}

// ollamaLoaded answers a request with nothing to generate, as Ollama does:
// it loads the model (kvwin's is always loaded) or, with keep_alive 0,
// unloads it (kvwin keeps it), and says which in done_reason.
func ollamaLoaded(keepAlive *oapi.Duration) string {
	if keepAlive != nil && keepAlive.Duration == 0 {
		return "unload"
	}
	return "load"
}

// decodeOllama decodes an Ollama generation request into body and checks
// what chat and generate share: the model it names (fields reads them from
// the decoded body) is served here, think is one kvwin can honour, and
// format is valid: out is its output constraint (tools.go).
func (s *server) decodeOllama(c *gin.Context, t *core.Turn, body any, fields func() (model string, format []byte, think *bool)) (info engine.Info, out *engine.Output, err error) {
	if err := s.Decode(c, body); err != nil {
		return info, nil, err
	}
	model, format, think := fields()
	_, info, err = s.SelectBackend(t, model)
	if err == nil {
		err = ollamaModel(model, info)
	}
	if err == nil {
		err = ollamaCommon(info, think)
	}
	if err == nil {
		out, err = ollamaFormat(format)
	}
	return info, out, err
}

// ollamaStart builds the engine request of a chat or generate from its
// options. With nothing to generate (empty) it answers as Ollama does, a
// load or unload (ollamaLoaded), and done is true: the answer is sent.
func ollamaStart(c *gin.Context, enc *ollamaEncoder, empty bool, keepAlive *oapi.Duration, options map[string]any, info engine.Info) (req engine.Request, done bool, err error) {
	if empty {
		core.WriteJSON(c.Writer, http.StatusOK, enc.loaded(ollamaLoaded(keepAlive)))
		return req, true, nil
	}
	req, err = ollamaRequest(options, info)
	return req, false, err
}

// ollamaChat serves POST /api/chat.
func (s *server) ollamaChat(c *gin.Context, t *core.Turn) error {
	start := time.Now()
	var body ollamaChatBody
	info, format, err := s.decodeOllama(c, t, &body, func() (string, []byte, *bool) { return body.Model, body.Format, body.Think })
	if err != nil {
		return err
	}
	if err := s.CheckItems("messages", len(body.Messages)); err != nil {
		return err
	}
	tools, err := ollamaTools(body.ToolDefs, body.Options) // tools.go
	if err != nil {
		return err
	}
	enc := &ollamaEncoder{chat: true, model: body.Model, now: s.Now, start: start}
	req, done, err := ollamaStart(c, enc, len(body.Messages) == 0, body.KeepAlive, body.Options, info)
	if done || err != nil {
		return err
	}
	if req.Messages, err = ollamaMessages(body.Messages); err != nil {
		return err
	}
	if err := toolcall.Apply(t, &req, tools, format); err != nil {
		return err
	}
	if tools.Call {
		enc.calls = &toolcall.Parser{NewID: func() string { return "" }}
	}
	if err := s.ApplyWindow(c, t, "", &req); err != nil {
		return err
	}
	enc.ready = time.Now()
	s.RunTurn(c, t, req, core.Wire{Enc: enc, Stream: streams(body.Stream), Frame: core.FrameNDJSON, Fail: core.FailOllama})
	return nil
}

// ollamaMessages translates Ollama's messages into engine messages; an
// assistant's tool calls and a tool's result are rendered as on the
// OpenAI route (toolTurn). A tool message's tool_name is not rendered: the
// convention's <tool_response> names no tool, as OpenAI's tool_call_id is
// not rendered either.
func ollamaMessages(in []oapi.Message) ([]engine.Message, error) {
	out := make([]engine.Message, len(in))
	for i, m := range in {
		if !engine.ValidRole(m.Role) {
			return nil, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role is %q; it must be one of system, user, assistant, tool", i, m.Role)
		}
		if len(m.Images) > 0 {
			return nil, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("messages[%d].images", i), "%v", errImages)
		}
		calls, err := ollamaHistory(m.ToolCalls)
		if err != nil {
			return nil, core.BadInput(core.CodeInvalidValue, fmt.Sprintf("messages[%d].tool_calls", i), "messages[%d].tool_calls: %v", i, err)
		}
		at := "" // named only in a tool call's error: not built per message per turn
		if len(calls) > 0 {
			at = fmt.Sprintf("messages[%d]", i)
		}
		if out[i], err = toolcall.Message(m.Role, m.Content, calls, at); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ollamaGenerate serves POST /api/generate. As Ollama: with raw the prompt
// goes to the model as it is; with template, the prompt (and system) are
// rendered by that Go template (Ollama's template package) and sent as
// text; otherwise they are a chat of one turn, windowed and rendered with
// the model's chat template like /api/chat's.
func (s *server) ollamaGenerate(c *gin.Context, t *core.Turn) error {
	start := time.Now()
	var body oapi.GenerateRequest
	info, format, err := s.decodeOllama(c, t, &body, func() (string, []byte, *bool) { return body.Model, body.Format, body.Think })
	if err != nil {
		return err
	}
	switch {
	case len(body.Images) > 0:
		return core.BadInput(core.CodeInvalidValue, "images", "%v", errImages)
	case len(body.Context) > 0:
		return core.BadInput(core.CodeInvalidValue, "context", "context (token ids of an earlier exchange) is not supported: send the conversation to /api/chat")
	case body.Suffix != "":
		return core.BadInput(core.CodeInvalidValue, "suffix", "%q does not support insert (suffix)", info.Model)
	}
	enc := &ollamaEncoder{model: body.Model, now: s.Now, start: start}
	req, done, err := ollamaStart(c, enc, body.Prompt == "", body.KeepAlive, body.Options, info)
	if done || err != nil {
		return err
	}
	req.Sampling.Output = format
	if t.Conversation, err = core.ConversationOf(c, ""); err != nil {
		return err
	}
	switch {
	case body.Raw:
		req.Prompt = body.Prompt
	case body.Template != "":
		if req.Prompt, err = renderTemplate(body.Template, body.System, body.Prompt); err != nil {
			return err
		}
	default:
		if body.System != "" {
			req.Messages = append(req.Messages, engine.Message{Role: engine.RoleSystem, Content: body.System})
		}
		req.Messages = append(req.Messages, engine.Message{Role: engine.RoleUser, Content: body.Prompt})
		if err := s.ApplyWindow(c, t, "", &req); err != nil {
			return err
		}
	}
	enc.ready = time.Now()
	s.RunTurn(c, t, req, core.Wire{Enc: enc, Stream: streams(body.Stream), Frame: core.FrameNDJSON, Fail: core.FailOllama})
	return nil
}

// wantsHTML reports whether a GET / comes from a browser (Accept names
// text/html); Ollama clients and probes get Ollama's root answer.
func wantsHTML(c *gin.Context) bool {
	return c.Request.Method == http.MethodGet && strings.Contains(c.GetHeader("Accept"), "text/html")
}
