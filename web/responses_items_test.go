package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/window/memory"
)

// input_items paging ends: an after that names no item is a 400 naming
// after (not the first page again), a POST repeating an item's id is a 400
// naming it, and a response stored with repeated ids (before that rule)
// pages to its end, each page past the last.
func TestInputItemsPagingEnds(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(10, 5, 1), firstEvent(10, 5), textEvent("ok"))
	store := openMemory(t)
	ts := startResponses(t, f, store)

	resp, b := do(t, ts, http.MethodPost, "/v1/responses", `{"input":[{"id":"m1","role":"user","content":"a"},{"id":"m2","role":"user","content":"b"},{"id":"m1","role":"user","content":"c"}]}`)
	if e := wantError(t, resp, b, 400, core.TypeInvalidRequest, core.CodeInvalidValue); e.Param != "input[2].id" {
		t.Fatalf("a repeated item id: param %q, want input[2].id", e.Param)
	}

	ids := []string{"a", "b", "a", "b", "c", "a"}
	var items []map[string]any
	for _, id := range ids {
		items = append(items, map[string]any{"type": "message", "id": id, "role": "user", "content": []any{map[string]string{"type": "input_text", "text": id}}})
	}
	input, _ := json.Marshal(items)
	err := store.SaveResponse(context.Background(), memory.StoredResponse{ID: "resp_old", Key: memory.Key{Tenant: DefaultTenant, Conversation: "resp_old"},
		Input: input, Messages: []byte(`[]`), Body: []byte(`{}`), At: time.Unix(testCreated, 0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range []string{"asc", "desc"} {
		t.Run(order, func(t *testing.T) {
			after, pages := "", 0
			for {
				pages++
				if pages > len(ids) {
					t.Fatalf("%d pages of one item for %d items: paging does not end", pages, len(ids))
				}
				path := fmt.Sprintf("/v1/responses/resp_old/input_items?limit=1&order=%s", order)
				if after != "" {
					path += "&after=" + after
				}
				resp, b := do(t, ts, http.MethodGet, path, "")
				var list struct {
					Data    []struct{ ID string } `json:"data"`
					LastID  *string               `json:"last_id"`
					HasMore bool                  `json:"has_more"`
				}
				if err := json.Unmarshal(b, &list); err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
				}
				if !list.HasMore {
					break
				}
				after = *list.LastID
			}
		})
	}

	resp, b = do(t, ts, http.MethodGet, "/v1/responses/resp_old/input_items?after=nope", "")
	if e := wantError(t, resp, b, 400, core.TypeInvalidRequest, core.CodeInvalidValue); e.Param != "after" {
		t.Fatalf("an unknown after: param %q, want after", e.Param)
	}
}
