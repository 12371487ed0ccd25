package web

import (
	"context"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/engine/wire"
	"kvwin/web/core"
	"kvwin/window"
)

// Headers of the window and the conversation (docs/architecture.md, "Headers"; package wire).
const (
	HeaderWindowPolicy = wire.HeaderWindowPolicy
	HeaderWindow       = wire.HeaderWindow
	HeaderConversation = wire.HeaderConversation
)

// Windower builds the bounded window of a chat request; window.Window
// implements it. It blocks on the memory store for named conversations.
type Windower interface {
	Build(ctx context.Context, req window.Request) (window.Result, error)
}

// ApplyWindow replaces the request's messages by their window, records the
// conversation and the window's layout in t and sets the X-Kvwin-Window
// header. Without a window configured, only policy "full"
// is accepted (everything is sent).
func (s *Server) ApplyWindow(c *gin.Context, t *core.Turn, promptCacheKey string, req *engine.Request) error {
	conversation, err := core.ConversationOf(c, promptCacheKey)
	if err != nil {
		return err
	}
	return s.WindowAs(c, t, conversation, c.GetHeader(HeaderWindowPolicy), req)
}

// WindowAs is ApplyWindow for a conversation and window policy ("" the
// server's) the dialect decided: a Responses chain's, whose name the
// server keeps, and truncation "disabled", which is policy full.
func (s *Server) WindowAs(c *gin.Context, t *core.Turn, conversation, policy string, req *engine.Request) error {
	t.Conversation = conversation
	if s.cfg.Window == nil {
		if policy != "" && policy != window.PolicyFull {
			return engine.Invalid("window policy %q: this server sends every message (full)", policy)
		}
		req.Messages = s.recall(t, req.Messages)
		return nil
	}
	// Each message is counted as the backend gets it, with its calls as
	// generated (recall): the window cuts the client's messages, but the
	// prompt it bounds is the one sent. The counters are held for the cut
	// (a catalog's model is loaded for them, as the generation right after
	// needs it loaded anyway); one that cannot be had leaves the estimate.
	ctx := c.Request.Context()
	tenant := t.Tenant
	one, countKey := window.ApproxCount, "approx"
	if mc, release, err := engine.Hold[engine.MessageCounter](ctx, t.Backend); err == nil {
		defer release()
		info := t.Backend.Info()
		one, countKey = mc.CountMessage, info.Name+"\x00"+info.Model
	}
	count := func(m engine.Message) int { return one(s.asSent(tenant, m)) }
	if cc, release, err := engine.Hold[engine.ConversationCounter](ctx, t.Backend); err == nil {
		defer release()
		// Other messages (a packet's) are counted as the tenant's too.
		sent, _ := s.answers.Recall(tenant, req.Messages)
		count = primed(req.Messages, cc.CountMessages(tenant, sent), func(m engine.Message) int {
			return cc.CountMessages(tenant, []engine.Message{s.asSent(tenant, m)})[0]
		})
	}
	win := s.cfg.Window
	if mw, ok := win.(ModelWindows); ok {
		win = mw.For(req.Model)
	}
	res, err := win.Build(ctx, window.Request{
		Owner: t.Owner, Policy: policy, Messages: req.Messages, Count: count, CountKey: countKey,
		Limit: newestLimit(t.Backend.Info().ContextSlot, req.MaxTokens),
	})
	if err != nil {
		return err
	}
	if res.Degraded != nil {
		s.log.WarnContext(c.Request.Context(), "memory store unavailable; the packet comes from the request's own turns", "err", res.Degraded)
	}
	// The window cut the client's history as the client sent it, so that
	// its conversation's stored turns match whether or not an answer is
	// remembered; the backend gets the tool calls of the tenant's answers
	// as they were generated (toolcall.Answers), whose KV it holds.
	req.Messages = s.recall(t, res.Messages)
	// Past an eviction step the kept turns follow the sinks directly; with
	// --shift the backend may move their KV there instead of recomputing it.
	req.Shift = s.cfg.Shift && res.Evicted() > 0
	if res.Evicted() > 0 {
		// Once something was evicted the pinned sinks are padded to a block
		// boundary; the backend pads in its own tokens and blocks.
		req.PadSinks = res.Sinks
	}
	t.Window = &core.WindowLayout{Policy: res.Policy, Messages: res.Cut.Messages, SinkTokens: res.SinkTokens + res.SinkPad,
		KeptTokens: res.KeptTokens - res.SinkTokens - res.SinkPad, EvictedTurns: res.Evicted(), PacketTokens: res.PacketTokens,
		PacketTurns: res.PacketTurns, EvictionSteps: res.Step}
	c.Header(HeaderWindow, wire.Window{Policy: res.Policy, KeptTokens: res.KeptTokens, EvictedTurns: res.Evicted(),
		PacketTurns: res.PacketTurns, Step: res.Step}.String())
	return nil
}

// recall is msgs with the tool calls of t's tenant's answers as they were
// generated (toolcall.Answers), counted in the metrics.
func (s *Server) recall(t *core.Turn, msgs []engine.Message) []engine.Message {
	out, n := s.answers.Recall(t.Tenant, msgs)
	s.metrics.recalled.Add(float64(n))
	return out
}

// asSent is m as the backend gets it: an assistant message of tenant's
// with its calls as generated, if they were (toolcall.Answers).
func (s *Server) asSent(tenant string, m engine.Message) engine.Message {
	if m.Role != engine.RoleAssistant {
		return m
	}
	out, _ := s.answers.Recall(tenant, []engine.Message{m})
	return out[0]
}

// Response headers every generation carries, streamed or not (docs/architecture.md, "Headers");
// their names and formats live in package wire.
const (
	HeaderBackend         = wire.HeaderBackend
	HeaderPromptTokens    = wire.HeaderPromptTokens
	HeaderCachedTokens    = wire.HeaderCachedTokens
	HeaderCachedEstimated = wire.HeaderCachedEstimated
	HeaderPromptMs        = wire.HeaderPromptMs
)

// newestLimit is the most a window may hold when its newest message alone
// passes the budget (window.Request.Limit): the slot's context less the
// answer the request asks room for. A request without max_tokens leaves
// the output reservation the budget keeps (0: the budget).
func newestLimit(ctx, maxTokens int) int {
	if ctx <= 0 || maxTokens <= 0 || maxTokens >= ctx {
		return 0
	}
	return ctx - maxTokens
}

// primed is a counter that knows the counts of msgs, which the window asks
// for in order: while it is asked for msgs[i], the next message, it answers
// counts[i]; any other message goes to count. Either way the answer is the
// message's count (counts are a function of the message), so the cursor
// only saves the lookups. Not safe for concurrent use; one per request.
func primed(msgs []engine.Message, counts []int, count window.Counter) window.Counter {
	if len(counts) != len(msgs) {
		return count
	}
	next := 0
	return func(m engine.Message) int {
		if next < len(msgs) && msgs[next] == m {
			next++
			return counts[next-1]
		}
		return count(m)
	}
}
