package anthropic

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/web/toolcall"
)

// headerRequestID is the header Anthropic's SDKs read a request's id from
// (their errors quote it); kvwin sends its X-Request-Id there too.
const headerRequestID = "request-id"

// messages serves POST /v1/messages.
func (s *server) messages(c *gin.Context, t *core.Turn) error {
	c.Header(headerRequestID, t.RequestID)
	var body messagesRequest
	req, mode, single, err := s.prepare(c, t, &body, false)
	if err != nil {
		return err
	}
	enc := newEncoder(s.NewID("msg_"), t.Info.Model, mode.Call, single, req.Stop, s.NewID)
	s.RunTurn(c, t, req, core.Wire{Enc: enc, Stream: body.Stream, Frame: core.FrameEvents, Fail: Fail})
	return nil
}

// countTokens serves POST /v1/messages/count_tokens: the tokens of the
// prompt the same body would send, windowed and with its tools, so it
// equals a turn's input_tokens + cache_read_input_tokens.
func (s *server) countTokens(c *gin.Context, t *core.Turn) error {
	c.Header(headerRequestID, t.RequestID)
	var body messagesRequest
	req, _, _, err := s.prepare(c, t, &body, true)
	if err != nil {
		return err
	}
	req.Owner = t.Owner
	n, err := count(c.Request.Context(), t.Backend, req)
	if err != nil {
		return err
	}
	core.WriteJSON(c.Writer, http.StatusOK, countTokensResponse{InputTokens: n})
	return nil
}

// prepare decodes a Messages body and translates it into the engine
// request for t's backend (selected by the body's model), windowed as
// every chat is; it returns the request's tool mode and whether parallel
// calls are off.
func (s *server) prepare(c *gin.Context, t *core.Turn, body *messagesRequest, counting bool) (engine.Request, toolcall.Mode, bool, error) {
	var none toolcall.Mode
	if err := s.Decode(c, body); err != nil {
		return engine.Request{}, none, false, err
	}
	if err := refuse(body); err != nil {
		return engine.Request{}, none, false, err
	}
	if err := s.CheckItems("messages", len(body.Messages)); err != nil {
		return engine.Request{}, none, false, err
	}
	if body.Model == "" {
		return engine.Request{}, none, false, core.BadInput(core.CodeMissingParameter, "model", "model is required")
	}
	_, info, err := s.SelectBackend(t, body.Model)
	if err != nil {
		return engine.Request{}, none, false, err
	}
	req, err := requestOf(body, info, counting)
	if err != nil {
		return req, none, false, err
	}
	if req.Messages, err = engineMessages(body.System, body.Messages); err != nil {
		return req, none, false, err
	}
	mode, single, err := readTools(body.Tools, body.ToolChoice)
	if err != nil {
		return req, none, false, err
	}
	format, err := outputFormat(body.OutputConfig)
	if err != nil {
		return req, none, false, err
	}
	if err := toolcall.Apply(t, &req, mode, format); err != nil {
		return req, none, false, err
	}
	// The body names no conversation: X-Conversation-Id does, as on
	// every route (metadata.user_id names a user, not a conversation).
	if err := s.ApplyWindow(c, t, "", &req); err != nil {
		return req, none, false, err
	}
	return req, mode, single, nil
}

// count is the prompt tokens of req on b: exact where the backend renders
// prompts for kvwin (the embedded engine, llama-server, kvwin nodes, a
// gateway over them), else (Ollama, or a gateway over Ollamas, which says
// engine.ErrNotSupported) the sum of its messages as the window counts
// them.
func count(ctx context.Context, b engine.Backend, req engine.Request) (int, error) {
	if p, release, err := engine.Hold[engine.Prompter](ctx, b); err == nil {
		ids, err := p.Prompt(ctx, req)
		release()
		if !errors.Is(err, engine.ErrNotSupported) {
			return len(ids), err
		}
	}
	n := 0
	mc, release, err := engine.Hold[engine.MessageCounter](ctx, b)
	exact := err == nil
	if exact {
		defer release()
	}
	for _, m := range req.Messages {
		if exact {
			n += mc.CountMessage(m)
		} else {
			n += engine.EstimateTokens(len(m.Content))
		}
	}
	return n, nil
}
