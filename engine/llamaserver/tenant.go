package llamaserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"kvwin/engine"
	"kvwin/engine/queue"
	"kvwin/engine/wire"
)

// Headers a kvwin node reads from a caller holding its admin key.
const (
	headerTenant       = wire.HeaderTenant
	headerConversation = wire.HeaderConversation
)

// owner is whose request a generation serves, and its place in a node's
// queue.
type owner struct {
	tenant, conversation string
	class                queue.Class
	weight               float64
}

// ownerOf is req's owner.
func ownerOf(req engine.Request) owner {
	return owner{tenant: req.Tenant, conversation: req.Conversation, class: req.Class, weight: req.Weight}
}

// set names the owner to the server. A kvwin node trusts the tenant and
// its weight only from a caller with its admin key (Config.APIKey) and
// says so in /props (kvwin_tenants); llama-server ignores these headers.
// The class goes only when it is not the default, as a client would send
// it.
func (o owner) set(h http.Header) {
	if o.tenant != "" {
		h.Set(headerTenant, o.tenant)
	}
	if o.conversation != "" {
		h.Set(headerConversation, o.conversation)
	}
	if o.class != queue.Interactive {
		h.Set(wire.HeaderPriority, o.class.String())
	}
	if o.weight != 0 && o.weight != 1 {
		h.Set(wire.HeaderWeight, strconv.FormatFloat(o.weight, 'g', -1, 64))
	}
}

// authorize adds the configured key, the request id of the turn the
// request serves (wire.SetRequestID), so the server's log lines share it,
// and the turn's span context (wire.SetTraceContext), so a kvwin node's
// spans join the gateway's trace.
func (b *Backend) authorize(req *http.Request) {
	wire.SetRequestID(req.Context(), req.Header)
	wire.SetTraceContext(req.Context(), req.Header)
	if b.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.APIKey)
	}
}

// ForgetConversation deletes the KV snapshots a kvwin node saved for a
// tenant's conversation (DELETE /kvwin/v1/conversations/{id}?tenant=) and
// returns 1 if the node had any. A server that does not keep tenants apart
// (llama-server, a node without our admin key) keeps nothing per
// conversation: 0. It blocks for at most Config.Timeout.
func (b *Backend) ForgetConversation(ctx context.Context, tenant, conversation string) (int, error) {
	if st := b.snapshot(); st == nil || !st.props.Tenants {
		return 0, nil
	}
	path := "/kvwin/v1/conversations/" + url.PathEscape(conversation) + "?tenant=" + url.QueryEscape(tenant)
	op := http.MethodDelete + " " + b.base + "/kvwin/v1/conversations/…"
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, b.base+path, nil)
	if err != nil {
		return 0, fmt.Errorf("llamaserver: %s: %w", op, err)
	}
	b.authorize(req)
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("llamaserver: %s: %w", op, engine.ErrUnavailable)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return 1, nil
	case http.StatusNotFound:
		return 0, nil
	default:
		return 0, fmt.Errorf("llamaserver: %s: status %d: %w", op, resp.StatusCode, engine.ErrUnavailable)
	}
}

// PinsSlots reports that a request runs on the slot it names: llama-server
// then reuses only that slot's common prefix (its RAM prompt cache is read
// only for unpinned requests) and, with cache_prompt false, nothing; a
// busy named slot is waited for. See engine.SlotPinner.
func (b *Backend) PinsSlots() bool { return true }
