package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/cmd/kvwin/config"
)

func modelIDs(t *testing.T, a *app.App) []string {
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	getJSON(t, a.URL()+"/v1/models", &list)
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestReloadKeepsStreamsInFlight: a reload that adds a model serves it at
// once, while a stream started before it ends normally on the old
// configuration; an invalid reload changes nothing.
func TestReloadKeepsStreamsInFlight(t *testing.T) {
	var first app.Config
	a := apptest.Start(t, func(f *app.Config) {
		f.Models = []config.Model{{Name: "a", Model: f.Model, Slots: 1, Ctx: 4096}}
		f.Model = ""
		first = *f
	})
	body, _ := json.Marshal(map[string]any{"model": "a", "messages": apptest.Msgs("user", "count"), "max_tokens": 1500,
		"stream": true, "stream_options": map[string]any{"include_usage": true}, "temperature": 0, "ignore_eos": true})
	resp, err := http.Post(a.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && strings.HasPrefix(sc.Text(), ":") { // the opening comment
	}
	if !strings.HasPrefix(sc.Text(), "data: ") {
		t.Fatalf("stream did not start: %d %q", resp.StatusCode, sc.Text())
	}

	bad := first
	bad.Models = append(bad.Models, config.Model{Name: "a", Model: first.Models[0].Model})
	if err := a.Reload(bad); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Fatalf("invalid reload: %v", err)
	}
	if ids := modelIDs(t, a); strings.Join(ids, ",") != "a" {
		t.Fatalf("after an invalid reload: %v", ids)
	}

	next := first
	next.Models = append(append([]config.Model{}, first.Models...), config.Model{Name: "b", Model: first.Models[0].Model, Slots: 1, Ctx: 1024})
	if err := a.Reload(next); err != nil {
		t.Fatal(err)
	}
	if ids := modelIDs(t, a); strings.Join(ids, ",") != "a,b" {
		t.Fatalf("after the reload: %v", ids)
	}
	if turn := apptest.Post(t, a, map[string]any{"model": "b", "messages": apptest.Msgs("user", "hi"), "max_tokens": 2}); turn.Status != 200 {
		t.Fatalf("new model: %d %s", turn.Status, turn.Body)
	}

	// The stream started before the reload ends as any stream does.
	var last, usage string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			if strings.Contains(line, `"usage":{`) {
				usage = line
			}
			last = line
		}
	}
	if last != "data: [DONE]" || !strings.Contains(usage, `"completion_tokens":1500`) {
		t.Fatalf("stream ended with %q (usage %q)", last, usage)
	}
}
