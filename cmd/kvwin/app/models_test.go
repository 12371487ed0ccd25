package app_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/cmd/kvwin/config"
	"kvwin/gguf"
)

// twoModels starts a server over two embedded test models of different
// shapes ("a": the default tiny model; "b": one layer, narrower), at most
// one loaded at a time unless mutate says otherwise.
func twoModels(t *testing.T, mutate func(*app.Config)) *app.App {
	t.Helper()
	small := gguf.DefaultTinyConfig()
	small.Layers, small.Embedding, small.FeedForward = 1, 64, 256
	pathB := filepath.Join(apptest.ModelDir(t), "kvwin-tiny-small.gguf")
	if err := gguf.WriteTiny(pathB, small); err != nil {
		t.Fatal(err)
	}
	return apptest.Start(t, func(f *app.Config) {
		f.Models = []config.Model{
			{Name: "a", Model: f.Model, Slots: 2, Ctx: 2048},
			{Name: "b", Model: pathB, Slots: 1, Ctx: 1024},
		}
		f.Model, f.MaxLoadedModels = "", 1
		if mutate != nil {
			mutate(f)
		}
	})
}

// loaded lists the models /api/ps reports loaded.
func loaded(t *testing.T, a *app.App) []string {
	var ps struct {
		Models []struct{ Name string } `json:"models"`
	}
	getJSON(t, a.URL()+"/api/ps", &ps)
	var names []string
	for _, m := range ps.Models {
		names = append(names, m.Name)
	}
	return names
}

// counter reads one sample of /metrics.
func counter(t *testing.T, a *app.App, name, model string) int {
	resp, err := http.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^%s\{model="%s"\} (\d+)`, name, model)).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func TestTwoModelsOneLoadedAtATime(t *testing.T) {
	a := twoModels(t, nil)

	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	getJSON(t, a.URL()+"/v1/models", &list)
	if len(list.Data) != 2 || list.Data[0].ID != "a" || list.Data[1].ID != "b" {
		t.Fatalf("/v1/models = %+v, want exactly a, b", list.Data)
	}
	var tags struct {
		Models []struct {
			Name string
			Size int64
		} `json:"models"`
	}
	getJSON(t, a.URL()+"/api/tags", &tags)
	if len(tags.Models) != 2 || tags.Models[0].Name != "a" || tags.Models[1].Name != "b" || tags.Models[0].Size == tags.Models[1].Size {
		t.Fatalf("/api/tags = %+v, want a and b of different sizes", tags.Models)
	}
	if got := loaded(t, a); len(got) != 0 {
		t.Fatalf("loaded before any request: %v", got)
	}
	if resp, err := http.Get(a.URL() + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health with no model loaded yet: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	for i, name := range []string{"a", "b", "a"} {
		turn := apptest.Post(t, a, map[string]any{"model": name, "messages": apptest.Msgs("user", apptest.Words(i, 40)), "max_tokens": 4, "temperature": 0})
		var reply struct{ Model string }
		if turn.Status != 200 || json.Unmarshal(turn.Body, &reply) != nil || reply.Model != name {
			t.Fatalf("turn %d for %s: status %d, body %s", i, name, turn.Status, turn.Body)
		}
		if got := loaded(t, a); !slices.Equal(got, []string{name}) {
			t.Fatalf("after a request for %s, loaded = %v", name, got)
		}
	}
	for _, c := range []struct {
		metric, model string
		want          int
	}{
		{"kvwin_model_loads_total", "a", 2}, {"kvwin_model_loads_total", "b", 1},
		{"kvwin_model_unloads_total", "a", 1}, {"kvwin_model_unloads_total", "b", 1},
	} {
		if got := counter(t, a, c.metric, c.model); got != c.want {
			t.Errorf("%s{model=%q} = %d, want %d", c.metric, c.model, got, c.want)
		}
	}

	var st app.Status
	getJSON(t, a.URL()+"/kvwin/v1/status", &st)
	if len(st.Models) != 2 || st.Models[0].State != "loaded" || st.Models[1].State != "idle" ||
		len(st.Backends) != 1 || st.Backends[0].Model != "a" || len(st.Backends[0].Slots) != 2 {
		t.Fatalf("status: %+v", st)
	}

	turn := apptest.Post(t, a, map[string]any{"model": "c", "messages": apptest.Msgs("user", "hi"), "max_tokens": 1})
	if e := apptest.DecodeError(t, turn.Body); turn.Status != 404 || e.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %d %s", turn.Status, turn.Body)
	}
}

// TestRequestsWaitForALoadingModel: concurrent first requests for one model
// load it once; all are answered.
func TestRequestsWaitForALoadingModel(t *testing.T) {
	a := twoModels(t, nil)
	var wg sync.WaitGroup
	status := make([]int, 3)
	for i := range status {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status[i] = apptest.Post(t, a, map[string]any{"model": "b", "messages": apptest.Msgs("user", apptest.Words(i, 20)), "max_tokens": 2}).Status
		}()
	}
	wg.Wait()
	if !slices.Equal(status, []int{200, 200, 200}) {
		t.Fatalf("statuses %v", status)
	}
	if got := counter(t, a, "kvwin_model_loads_total", "b"); got != 1 {
		t.Fatalf("b loaded %d times, want 1", got)
	}
}

// TestIdleModelUnloadsAfterTTL: a model idle past its ttl is unloaded; the
// next request loads it again.
func TestIdleModelUnloadsAfterTTL(t *testing.T) {
	a := twoModels(t, func(f *app.Config) { f.Models[1].TTL = config.Duration(50 * time.Millisecond) })
	if turn := apptest.Post(t, a, map[string]any{"model": "b", "messages": apptest.Msgs("user", "hello"), "max_tokens": 2}); turn.Status != 200 {
		t.Fatalf("status %d: %s", turn.Status, turn.Body)
	}
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for counter(t, a, "kvwin_model_unloads_total", "b") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("b still loaded: %v", loaded(t, a))
		}
		<-tick.C
	}
	if got := loaded(t, a); len(got) != 0 {
		t.Fatalf("loaded after ttl: %v", got)
	}
}

// TestRemoteModelEntry: a models entry with backends is served through a
// router under the entry's name, next to an embedded one.
func TestRemoteModelEntry(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots = 2 })
	a := apptest.Start(t, func(f *app.Config) {
		f.Models = []config.Model{{Name: "local", Model: f.Model}, {Name: "fleet", Backends: []string{"llamaserver=" + node.URL()}}}
		f.Model = ""
	})
	turn := apptest.Post(t, a, map[string]any{"model": "fleet", "messages": apptest.Msgs("user", apptest.Words(7, 30)), "max_tokens": 3})
	var reply struct{ Model string }
	if turn.Status != 200 || json.Unmarshal(turn.Body, &reply) != nil || reply.Model != "fleet" {
		t.Fatalf("fleet: %d %s", turn.Status, turn.Body)
	}
	if got := turn.Header.Get("X-Kvwin-Backend"); !strings.Contains(got, node.Addr()) {
		t.Fatalf("X-Kvwin-Backend = %q, want the node %s", got, node.Addr())
	}
	if got := loaded(t, a); !slices.Equal(got, []string{"fleet"}) {
		t.Fatalf("/api/ps = %v, want the remote model only (local not loaded)", got)
	}

	// Embeddings go to the model they name, loading it.
	resp, err := http.Post(a.URL()+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"local","input":["one","two"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var emb struct {
		Model string
		Data  []struct{ Embedding []float64 }
	}
	if err := json.NewDecoder(resp.Body).Decode(&emb); err != nil || resp.StatusCode != 200 || emb.Model != "local" || len(emb.Data) != 2 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings: %d %+v %v", resp.StatusCode, emb, err)
	}
}

// countReuses reads kvwin_engine_count_reuses_total of model's engine
// (any engine's for "").
func countReuses(t *testing.T, a *app.App, model string) int {
	t.Helper()
	series := `kvwin_engine_count_reuses_total\{[^}]*\}`
	if model != "" {
		series = `kvwin_engine_count_reuses_total\{[^}]*model="` + model + `"[^}]*\}`
	}
	v := sample(scrape(t, a), series)
	if v < 0 {
		t.Fatalf("no kvwin_engine_count_reuses_total for model %q in /metrics", model)
	}
	return int(v)
}

// TestCatalogModelCountsAHistoryInOneLookup: a model served from a
// models: config finds its engine's ConversationCounter (engine.Hold
// through the catalog entry), so a turn whose history is unchanged is
// counted from the lookup of that history, exactly as with --model;
// before, the entry hid the ability and every message was counted again
// (no lookup found anything).
func TestCatalogModelCountsAHistoryInOneLookup(t *testing.T) {
	reuses := map[string]int{}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *app.App
		model string
	}{
		{"models config", func(t *testing.T) *app.App { return twoModels(t, nil) }, "a"},
		{"--model", func(t *testing.T) *app.App { return apptest.Start(t, nil) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.start(t)
			model := cmp.Or(tc.model, "kvwin-tiny")
			msgs := []map[string]any{{"role": "user", "content": "Tell me about the river and the old mill by the bridge."}}
			turn := func() string {
				var r struct {
					Choices []struct{ Message struct{ Content string } }
				}
				postJSON(t, a.URL()+"/v1/chat/completions", map[string]any{"model": model, "messages": msgs, "max_tokens": 8}, &r)
				return r.Choices[0].Message.Content
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": turn()})
			before := countReuses(t, a, tc.model)
			msgs = append(msgs, map[string]any{"role": "user", "content": "And what happened to the miller's daughter?"})
			turn()
			reuses[tc.name] = countReuses(t, a, tc.model) - before
		})
	}
	if c, m := reuses["models config"], reuses["--model"]; c < 1 || c != m {
		t.Fatalf("the second turn's history was found in %d lookups through the catalog and %d with --model; want the same, at least 1", c, m)
	}
}
