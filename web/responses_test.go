package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
	"kvwin/web/core"
	"kvwin/window/memory"
)

// startResponses serves f with the stored responses in store (nil: none),
// ids numbered in order.
func startResponses(t *testing.T, f *fakeBackend, store *memory.Store) *httptest.Server {
	t.Helper()
	cfg := Config{}
	if store != nil {
		cfg.Responses = store
	}
	s, err := New(cfg, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	s.now = func() time.Time { return time.Unix(testCreated, 0) }
	s.newID = func(prefix string) string { n++; return fmt.Sprintf("%s%d", prefix, n) }
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() { f.Release() })
	return ts
}

func openMemory(t *testing.T) *memory.Store {
	t.Helper()
	st, err := memory.Open(memory.StoreConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// A chain sends only new input; the backend gets the whole history, with
// the instructions of the request they came with only.
func TestResponsesChainReachesTheBackendWhole(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(10, 5, 1), firstEvent(10, 5), textEvent("ok"))
	ts := startResponses(t, f, openMemory(t))
	post := func(body string) map[string]any {
		t.Helper()
		resp, b := do(t, ts, http.MethodPost, "/v1/responses", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return out
	}
	r1 := post(`{"input": "one", "instructions": "Be brief."}`)
	r2 := post(fmt.Sprintf(`{"input": [{"role": "user", "content": [{"type": "input_text", "text": "two"}]}, {"role": "user", "content": "three"}], "previous_response_id": %q}`, r1["id"]))
	r3 := post(fmt.Sprintf(`{"input": "four", "instructions": "Be kind.", "previous_response_id": %q}`, r2["id"]))
	reqs := f.Requests()
	want := []engine.Message{{Role: "system", Content: "Be kind."}, {Role: "user", Content: "one"}, {Role: "assistant", Content: "ok"},
		{Role: "user", Content: "two"}, {Role: "user", Content: "three"}, {Role: "assistant", Content: "ok"}, {Role: "user", Content: "four"}}
	if len(reqs) != 3 || fmt.Sprint(reqs[2].Messages) != fmt.Sprint(want) {
		t.Fatalf("third request's messages %q, want %q", reqs[len(reqs)-1].Messages, want)
	}
	if reqs[1].Messages[0].Role == "system" {
		t.Fatalf("the first request's instructions reached the second: %q", reqs[1].Messages)
	}
	if reqs[2].Conversation != r1["id"] || r3["previous_response_id"] != r2["id"] {
		t.Fatalf("conversation %q, want the chain's first id %v", reqs[2].Conversation, r1["id"])
	}
	usage := r3["usage"].(map[string]any)
	if usage["input_tokens"] != 10.0 || usage["input_tokens_details"].(map[string]any)["cached_tokens"] != 5.0 {
		t.Fatalf("usage %v", usage)
	}

	// input_items: the response's own input, newest first by default.
	id2 := r2["id"].(string)
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		FirstID string `json:"first_id"`
		HasMore bool   `json:"has_more"`
	}
	resp, b := do(t, ts, http.MethodGet, "/v1/responses/"+id2+"/input_items?order=asc&limit=1", "")
	if json.Unmarshal(b, &list); resp.StatusCode != 200 || len(list.Data) != 1 || !list.HasMore {
		t.Fatalf("input_items: %d %s", resp.StatusCode, b)
	}
	first := list.Data[0].ID
	resp, b = do(t, ts, http.MethodGet, "/v1/responses/"+id2+"/input_items?after="+first, "")
	list.Data = nil
	if json.Unmarshal(b, &list); resp.StatusCode != 200 || len(list.Data) != 0 {
		t.Fatalf("input_items after the newest (desc): %d %s", resp.StatusCode, b)
	}
	resp, b = do(t, ts, http.MethodGet, "/v1/responses/"+id2+"/input_items?limit=0", "")
	wantError(t, resp, b, 400, core.TypeInvalidRequest, core.CodeInvalidValue)

	// Deleting r2 ends its chain: r3 cannot be continued, r1 can.
	resp, b = do(t, ts, http.MethodDelete, "/v1/responses/"+id2, "")
	if resp.StatusCode != 200 || string(b) != fmt.Sprintf(`{"id":%q,"object":"response.deleted","deleted":true}`+"\n", id2) {
		t.Fatalf("delete: %d %s", resp.StatusCode, b)
	}
	resp, b = do(t, ts, http.MethodGet, "/v1/responses/"+id2, "")
	wantError(t, resp, b, 404, core.TypeInvalidRequest, core.CodeResponseNotFound)
	resp, b = do(t, ts, http.MethodPost, "/v1/responses", fmt.Sprintf(`{"input": "five", "previous_response_id": %q}`, r3["id"]))
	wantError(t, resp, b, 404, core.TypeInvalidRequest, core.CodeResponseNotFound)
	// The message names the response asked for once, and says beside it
	// when an earlier one of its chain is what is gone.
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	wantMsg := fmt.Sprintf(`no such response: no response %q of yours can be reached (no such response: a response the chain of %[1]q continues was deleted)`, r3["id"])
	if json.Unmarshal(b, &e); e.Error.Message != wantMsg {
		t.Errorf("chain missing r2: message %q, want %q", e.Error.Message, wantMsg)
	}
	resp, b = do(t, ts, http.MethodPost, "/v1/responses", `{"input": "five", "previous_response_id": "resp_nope"}`)
	wantError(t, resp, b, 404, core.TypeInvalidRequest, core.CodeResponseNotFound)
	if json.Unmarshal(b, &e); e.Error.Message != `no such response: no response "resp_nope" of yours can be reached` {
		t.Errorf("unknown id: message %q", e.Error.Message)
	}
	post(fmt.Sprintf(`{"input": "five", "previous_response_id": %q}`, r1["id"]))
}

// Without a memory store responses are answered, not kept; stored ones
// cannot be reached.
func TestResponsesWithoutAStore(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("ok"))
	ts := startResponses(t, f, nil)
	resp, b := do(t, ts, http.MethodPost, "/v1/responses", `{"input": "hi"}`)
	var out struct {
		Store bool `json:"store"`
	}
	if json.Unmarshal(b, &out); resp.StatusCode != 200 || out.Store {
		t.Fatalf("%d %s: want 200 with store false", resp.StatusCode, b)
	}
	resp, b = do(t, ts, http.MethodGet, "/v1/responses/resp_1", "")
	wantError(t, resp, b, 503, core.TypeServer, core.CodeMemoryUnavailable)
	resp, b = do(t, ts, http.MethodPost, "/v1/responses", `{"input": "hi", "previous_response_id": "resp_1"}`)
	wantError(t, resp, b, 503, core.TypeServer, core.CodeMemoryUnavailable)
}

// A streamed response names every SSE event by its type, as OpenAI's
// stream does: an "event:" line, then the data line whose "type" it is.
func TestResponsesStreamNamesItsEvents(t *testing.T) {
	f := newFake().Script(engine.FinishStop, engineTimings(10, 5, 1), firstEvent(10, 5), textEvent("ok"))
	ts := startResponses(t, f, nil)
	resp, b := do(t, ts, http.MethodPost, "/v1/responses", `{"model":"tiny","input":"hi","stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var names []string
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] == "" {
			continue
		}
		name, ok := strings.CutPrefix(lines[i], "event: ")
		if !ok || i+1 >= len(lines) {
			t.Fatalf("line %d is %q, want an event line before its data", i, lines[i])
		}
		data, ok := strings.CutPrefix(lines[i+1], "data: ")
		var ev struct{ Type string }
		if !ok || json.Unmarshal([]byte(data), &ev) != nil || ev.Type != name {
			t.Fatalf("event %q has data %q", name, lines[i+1])
		}
		names = append(names, name)
		i++
	}
	if len(names) < 3 || names[0] != "response.created" || names[len(names)-1] != "response.completed" {
		t.Fatalf("events %v", names)
	}
}

// A store that cannot be used is a 503 that says so without naming the
// store (its path, or its database's host, user and name).
func TestResponsesStoreDownIsA503NamingNothing(t *testing.T) {
	f := newFake()
	dir := t.TempDir()
	st, err := memory.Open(memory.StoreConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ts := startResponses(t, f, st)
	_ = st.Close()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/responses/resp_1", ""},
		{http.MethodPost, "/v1/responses", `{"model":"tiny","input":"hi","previous_response_id":"resp_1"}`},
	} {
		resp, b := do(t, ts, c.method, c.path, c.body)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"memory_store_unavailable"`) || strings.Contains(string(b), dir) {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, b)
		}
	}
}
