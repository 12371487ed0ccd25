package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/window/memory"
)

// Responses kept by kvwin (store): each is saved with what it added to its
// conversation, owned by its tenant; previous_response_id continues its
// chain. A chain is one named conversation: the first request's
// prompt_cache_key (or X-Conversation-Id), else the first response's id;
// DELETE /kvwin/v1/conversations/{that name} removes the whole chain, and
// --memory-ttl expires it as any conversation. Another tenant's id is a
// 404, never a 403, so ids say nothing across tenants.

// ResponseStore keeps stored responses (memory.Store implements it).
type ResponseStore interface {
	SaveResponse(ctx context.Context, r memory.StoredResponse) error
	Response(ctx context.Context, tenant, id string) (memory.StoredResponse, error)
	ResponseChain(ctx context.Context, tenant, id string) (memory.Key, [][]byte, error)
	DeleteResponse(ctx context.Context, tenant, id string) (bool, error)
}

var _ ResponseStore = (*memory.Store)(nil)

// maxResponseIDBytes bounds an id a client sends: kvwin's are 31 bytes.
const maxResponseIDBytes = 128

// RegisterResponses mounts the Responses API on r, its stored responses in
// store (nil: responses are answered and not kept; stored ones cannot be
// reached, a 503).
func RegisterResponses(r gin.IRoutes, svc Services, store ResponseStore) {
	s := &server{Services: svc, store: store, chains: newChainMemo()}
	handle := s.Bind(core.Fail)
	r.POST("/v1/responses", handle(s.createResponse))
	r.GET("/v1/responses/:id", handle(s.getResponse))
	r.DELETE("/v1/responses/:id", handle(s.deleteResponse))
	r.GET("/v1/responses/:id/input_items", handle(s.inputItems))
}

// chain reads the chain rt continues: its messages, first response first,
// and its conversation. A new chain's conversation is the one the request
// names, else (when it is stored) its own id.
func (s *server) chain(c *gin.Context, t *core.Turn, rt *responseTurn) ([]engine.Message, error) {
	prev := rt.body.PreviousResponseID
	if prev == "" {
		conv, err := core.ConversationOf(c, rt.body.PromptCacheKey)
		if conv == "" && rt.store && s.store != nil {
			conv = rt.id
		}
		rt.key = conv
		return nil, err
	}
	if err := core.CheckName("previous_response_id", prev, maxResponseIDBytes); err != nil {
		return nil, err
	}
	if s.store == nil {
		return nil, fmt.Errorf("%w: previous_response_id cannot be read", core.ErrMemoryUnavailable)
	}
	key, docs, err := s.store.ResponseChain(c.Request.Context(), t.Tenant, prev)
	if err != nil {
		return nil, s.storeError(c, err, prev)
	}
	history, err := s.chains.decode(t.Tenant, prev, docs)
	if err != nil {
		return nil, err
	}
	rt.key, rt.previous, rt.history = key.Conversation, prev, history
	// Shared with the memo: the turn's messages are a copy (readResponse).
	return history.messages(), nil
}

// storeError is the error a client gets for a store's err about id.
func (s *server) storeError(c *gin.Context, err error, id string) error {
	if errors.Is(err, memory.ErrResponseNotFound) {
		// The store's error names id too: only a broken chain says more.
		if errors.Is(err, memory.ErrChainBroken) {
			return fmt.Errorf("%w: no response %q of yours can be reached (%w)", core.ErrResponseNotFound, id, err)
		}
		return fmt.Errorf("%w: no response %q of yours can be reached", core.ErrResponseNotFound, id)
	}
	// The store's own error names its database (host, user, name): it is
	// logged, and a client is told only that it cannot be reached now.
	s.Log().ErrorContext(c.Request.Context(), "stored responses unavailable", "response", id, "err", err)
	return fmt.Errorf("%w: stored responses cannot be reached now", core.ErrMemoryUnavailable)
}

// keep stores rt's finished response obj, with the messages it adds to its
// chain: the new input and the answer as the model wrote it, so the next
// turn's prompt repeats this one's tokens. A response that could not be
// kept says store false.
func (s *server) keep(c *gin.Context, t *core.Turn, rt *responseTurn, res engine.Result, obj *responseObject) {
	if !rt.store {
		return
	}
	ctx := c.Request.Context()
	if s.store == nil {
		obj.Store = false
		s.Log().WarnContext(ctx, "response not stored: the memory store is unavailable", "response", rt.id)
		return
	}
	msgs := append(slices.Clip(rt.input), engine.Message{Role: engine.RoleAssistant, Content: res.Text})
	messages, err := json.Marshal(msgs)
	if err != nil {
		return
	}
	input, err := json.Marshal(rt.items)
	if err != nil {
		return
	}
	body, err := core.EncodeJSON(obj)
	if err != nil {
		return
	}
	err = s.store.SaveResponse(context.WithoutCancel(ctx), memory.StoredResponse{ID: rt.id, Key: memory.Key{Tenant: t.Tenant, Conversation: rt.key},
		Previous: rt.previous, Input: input, Messages: messages, Body: body, At: s.Now()})
	if err != nil {
		obj.Store = false
		s.Log().ErrorContext(ctx, "response not stored", "response", rt.id, "err", err)
		return
	}
	s.chains.saved(t.Tenant, rt.id, rt.history, msgs)
}

// pathID is the response id of the path. One no store can hold
// (core.CheckNameBytes) is a 400 naming id; one longer than
// maxResponseIDBytes names no response (kvwin's are 31 bytes): a 404 that
// quotes only its first maxResponseIDBytes and its length, so neither the
// answer nor the log repeats a client's 200,000 bytes.
func pathID(c *gin.Context) (string, error) {
	id := c.Param("id")
	if err := core.CheckNameBytes("id", id); err != nil {
		return "", err
	}
	if len(id) > maxResponseIDBytes {
		return "", fmt.Errorf("%w: %q… (%d bytes)", core.ErrResponseNotFound, core.CutAt(id, maxResponseIDBytes), len(id))
	}
	return id, nil
}

// stored reads the tenant's stored response named by the path.
func (s *server) stored(c *gin.Context, t *core.Turn) (memory.StoredResponse, error) {
	id, err := pathID(c)
	if err != nil {
		return memory.StoredResponse{}, err
	}
	if s.store == nil {
		return memory.StoredResponse{}, fmt.Errorf("%w: stored responses cannot be read", core.ErrMemoryUnavailable)
	}
	r, err := s.store.Response(c.Request.Context(), t.Tenant, id)
	if err != nil {
		return r, s.storeError(c, err, id)
	}
	return r, nil
}

// getResponse serves GET /v1/responses/{id}: the response as it was
// answered.
func (s *server) getResponse(c *gin.Context, t *core.Turn) error {
	if c.Query("stream") == "true" {
		return core.BadInput(core.CodeInvalidValue, "stream", "kvwin does not stream stored responses again; ask without stream")
	}
	r, err := s.stored(c, t)
	if err != nil {
		return err
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", r.Body)
	return nil
}

// deleteResponse serves DELETE /v1/responses/{id}: that response only;
// the responses continuing it can no longer be continued.
func (s *server) deleteResponse(c *gin.Context, t *core.Turn) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if s.store == nil {
		return fmt.Errorf("%w: stored responses cannot be deleted", core.ErrMemoryUnavailable)
	}
	ok, err := s.store.DeleteResponse(c.Request.Context(), t.Tenant, id)
	if err == nil && !ok {
		err = memory.ErrResponseNotFound
	}
	if err != nil {
		return s.storeError(c, err, id)
	}
	core.WriteJSON(c.Writer, http.StatusOK, deletedResponse{ID: id, Object: "response.deleted", Deleted: true})
	return nil
}

// inputItems serves GET /v1/responses/{id}/input_items: the items of the
// response's own input, newest first unless order=asc, limit (1-100,
// default 20) at a time after the item named by after. An after that names
// no item of the response is a 400 naming after, never the first page
// again (which would page forever). The page starts past the last item of
// that id: POST refuses repeated ids, but a response stored before may
// hold them, and a page ends at the last item it lists, so each page
// starts further on and paging ends.
func (s *server) inputItems(c *gin.Context, t *core.Turn) error {
	limit := 20
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return core.BadInput(core.CodeInvalidValue, "limit", "limit must be in [1, 100], not %q", v)
		}
		limit = n
	}
	order := c.DefaultQuery("order", "desc")
	if order != "asc" && order != "desc" {
		return core.BadInput(core.CodeInvalidValue, "order", `order must be "asc" or "desc", not %q`, order)
	}
	r, err := s.stored(c, t)
	if err != nil {
		return err
	}
	var items []listedItem
	if err := json.Unmarshal(r.Input, &items); err != nil {
		return fmt.Errorf("stored input of %q does not decode: %w", r.ID, err)
	}
	if order == "desc" {
		slices.Reverse(items)
	}
	if after := c.Query("after"); after != "" {
		i := lastItem(items, after)
		if i < 0 {
			return core.BadInput(core.CodeInvalidValue, "after", "after names no input item of response %q", r.ID)
		}
		items = items[i+1:]
	}
	list := itemList{Object: objectList, Data: items, HasMore: len(items) > limit}
	list.Data = items[:min(limit, len(items))]
	if n := len(list.Data); n > 0 {
		list.FirstID, list.LastID = &list.Data[0].ID, &list.Data[n-1].ID
	} else {
		list.Data = []listedItem{}
	}
	core.WriteJSON(c.Writer, http.StatusOK, list)
	return nil
}

// lastItem is the index of the last of items whose id is id, -1 if none.
func lastItem(items []listedItem, id string) int {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].ID == id {
			return i
		}
	}
	return -1
}
