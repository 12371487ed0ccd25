package app_test

import (
	"bytes"
	"encoding/json"
	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"net/http"
	"slices"
	"testing"
)

// A gateway over two kvwin nodes answers the node routes its router
// delegates: /tokenize and /detokenize as a node does, /slots with every
// node's slots numbered across the fleet, including the one a generation
// just used.
func TestGatewayAnswersTokenizeAndSlots(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 2, "prefix")
	call := func(a *app.App, method, path string, body any, out any) {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, _ := http.NewRequest(method, a.URL()+path, rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: status %d", method, path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}

	text := map[string]any{"content": "Hello <|im_start|> world", "add_special": true}
	var fromGateway, fromNode struct{ Tokens []int }
	call(gw, "POST", "/tokenize", text, &fromGateway)
	call(nodes[1], "POST", "/tokenize", text, &fromNode)
	if len(fromGateway.Tokens) < 5 || !slices.Equal(fromGateway.Tokens, fromNode.Tokens) {
		t.Fatalf("gateway tokens %v, node's %v", fromGateway.Tokens, fromNode.Tokens)
	}
	var detok struct{ Content string }
	call(gw, "POST", "/detokenize", map[string]any{"tokens": fromGateway.Tokens[1:]}, &detok)
	if detok.Content != "Hello <|im_start|> world" {
		t.Fatalf("detokenized %q", detok.Content)
	}

	tr := apptest.Post(t, gw, map[string]any{"model": "kvwin-tiny", "messages": apptest.Msgs("user", apptest.Words(4, 100)), "max_tokens": 4, "temperature": 0})
	if tr.Status != 200 {
		t.Fatalf("chat: %d %s", tr.Status, tr.Body)
	}
	var slots []struct {
		ID      int `json:"id"`
		NCtx    int `json:"n_ctx"`
		NTokens int `json:"n_tokens"`
	}
	call(gw, "GET", "/slots", nil, &slots)
	if len(slots) != 4 {
		t.Fatalf("%d slots, want 2 nodes × 2", len(slots))
	}
	holding := 0
	for i, s := range slots {
		if s.ID != i || s.NCtx != 4096 {
			t.Fatalf("slot %d: %+v", i, s)
		}
		if s.NTokens >= tr.Prompt {
			holding++
		}
	}
	if holding != 1 {
		t.Fatalf("%d slots hold the %d-token prompt, want 1: %+v", holding, tr.Prompt, slots)
	}
}
