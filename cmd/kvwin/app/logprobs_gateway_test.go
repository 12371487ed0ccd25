package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/ollama/ollamatest"
	"kvwin/engine/wire"
)

// chatLogprob is one token of an OpenAI chat answer's logprobs.content.
type chatLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	} `json:"top_logprobs"`
}

// chatAnswer is what a chat request with logprobs returned: the text, its
// tokens' logprobs, and the backend that served it.
type chatAnswer struct {
	content  string
	logprobs []chatLogprob
	backend  string
}

// postChat sends body to base's chat route and reads the answer, streamed
// or not as body says, joining a stream's deltas and logprobs.
func postChat(t *testing.T, base string, body map[string]any) chatAnswer {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: status %d: %s", base, resp.StatusCode, data)
	}
	out := chatAnswer{backend: resp.Header.Get("X-Kvwin-Backend")}
	type choice struct {
		Message  struct{ Content string } `json:"message"`
		Delta    struct{ Content string } `json:"delta"`
		Logprobs *struct {
			Content []chatLogprob `json:"content"`
		} `json:"logprobs"`
	}
	if stream, _ := body["stream"].(bool); !stream {
		var r struct{ Choices []choice }
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.Choices[0].Logprobs == nil {
			t.Fatalf("%s: no logprobs object", base)
		}
		out.content, out.logprobs = r.Choices[0].Message.Content, r.Choices[0].Logprobs.Content
		return out
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var content strings.Builder
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []choice
			Error   *struct{ Message string }
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("bad SSE data %q: %v", line, err)
		}
		if ch.Error != nil {
			t.Fatalf("in-stream error: %s", ch.Error.Message)
		}
		for _, c := range ch.Choices {
			content.WriteString(c.Delta.Content)
			if c.Logprobs != nil {
				out.logprobs = append(out.logprobs, c.Logprobs.Content...)
			}
		}
	}
	out.content = content.String()
	out.backend = wire.GenerationOf(resp).Backend // a stream's trailer
	return out
}

// checkLogprobs checks an answer's logprobs against the node's own: the
// same tokens, log-probabilities within 1e-4, top alternatives of each,
// the chosen token among them, and the tokens spelling the text.
func checkLogprobs(t *testing.T, got, want chatAnswer, top int) {
	t.Helper()
	if len(want.logprobs) == 0 {
		t.Fatal("the node itself reported no logprobs")
	}
	if got.content != want.content || len(got.logprobs) != len(want.logprobs) {
		t.Fatalf("gateway: %q with %d logprobs; node: %q with %d", got.content, len(got.logprobs), want.content, len(want.logprobs))
	}
	var spelled []byte
	for i, g := range got.logprobs {
		w := want.logprobs[i]
		if g.Token != w.Token || math.Abs(g.Logprob-w.Logprob) > 1e-4 || g.Logprob > 0 {
			t.Fatalf("token %d: gateway %q %v, node %q %v", i, g.Token, g.Logprob, w.Token, w.Logprob)
		}
		if len(g.TopLogprobs) != top || len(w.TopLogprobs) != top {
			t.Fatalf("token %d: %d top logprobs through the gateway, %d from the node, want %d", i, len(g.TopLogprobs), len(w.TopLogprobs), top)
		}
		chosen := false
		for j, alt := range g.TopLogprobs {
			if alt.Token != w.TopLogprobs[j].Token || math.Abs(alt.Logprob-w.TopLogprobs[j].Logprob) > 1e-4 {
				t.Fatalf("token %d, top %d: gateway %q %v, node %q %v", i, j, alt.Token, alt.Logprob, w.TopLogprobs[j].Token, w.TopLogprobs[j].Logprob)
			}
			chosen = chosen || (alt.Token == g.Token && math.Abs(alt.Logprob-g.Logprob) <= 1e-4)
		}
		if !chosen {
			t.Fatalf("token %d: chosen %q (%v) not among its top %d %+v", i, g.Token, g.Logprob, top, g.TopLogprobs)
		}
		for _, c := range g.Bytes {
			spelled = append(spelled, byte(c))
		}
	}
	if string(spelled) != got.content {
		t.Fatalf("the tokens' bytes spell %q, the text is %q", spelled, got.content)
	}
}

// A gateway over a kvwin node forwards log-probabilities: a chat request
// with logprobs and top_logprobs 3 returns, through the gateway, exactly
// the tokens and log-probabilities the node returns when asked directly
// (greedy, same seed), streamed and not; so does the legacy completions
// route.
func TestGatewayForwardsLogprobs(t *testing.T) {
	gw, nodes := apptest.StartFleet(t, 1, "prefix")
	node := nodes[0]
	const top = 3
	chat := func(stream bool) map[string]any {
		return map[string]any{"model": "kvwin-tiny", "messages": apptest.Msgs("system", apptest.Words(3, 200), "user", apptest.Words(4, 300)),
			"max_tokens": 12, "temperature": 0, "seed": 7, "logprobs": true, "top_logprobs": top, "stream": stream}
	}
	direct := postChat(t, node.URL(), chat(false))
	for _, stream := range []bool{false, true} {
		got := postChat(t, gw.URL(), chat(stream))
		if got.backend == "" || got.backend == "gateway" {
			t.Fatalf("X-Kvwin-Backend %q: not served by the node", got.backend)
		}
		checkLogprobs(t, got, direct, top)
		t.Logf("stream=%v: %d tokens, first %q %.4f (top %q %.4f), through the gateway as from the node",
			stream, len(got.logprobs), got.logprobs[0].Token, got.logprobs[0].Logprob, got.logprobs[0].TopLogprobs[1].Token, got.logprobs[0].TopLogprobs[1].Logprob)
	}

	// logprobs without top_logprobs: each token's own, no alternatives.
	body := chat(false)
	delete(body, "top_logprobs")
	own := postChat(t, gw.URL(), body)
	if len(own.logprobs) != len(direct.logprobs) || own.logprobs[0].Logprob != direct.logprobs[0].Logprob || len(own.logprobs[0].TopLogprobs) != 0 {
		t.Fatalf("logprobs without top_logprobs: %+v", own.logprobs[:1])
	}

	// The legacy completions route: logprobs 2.
	completion := func(base string) (tokens []string, lps []float64, tops []map[string]float64) {
		b, _ := json.Marshal(map[string]any{"model": "kvwin-tiny", "prompt": apptest.Words(5, 200), "max_tokens": 8, "temperature": 0, "logprobs": 2})
		resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Choices []struct {
				Logprobs struct {
					Tokens        []string             `json:"tokens"`
					TokenLogprobs []float64            `json:"token_logprobs"`
					TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
			t.Fatalf("completions at %s: status %d, %v", base, resp.StatusCode, err)
		}
		l := r.Choices[0].Logprobs
		return l.Tokens, l.TokenLogprobs, l.TopLogprobs
	}
	gt, gl, gtop := completion(gw.URL())
	nt, nl, ntop := completion(node.URL())
	if len(nt) == 0 || strings.Join(gt, "") != strings.Join(nt, "") || len(gl) != len(nl) || len(gtop) != len(ntop) {
		t.Fatalf("completions: gateway %q %v, node %q %v", gt, gl, nt, nl)
	}
	for i := range nl {
		if math.Abs(gl[i]-nl[i]) > 1e-4 || len(gtop[i]) != 2 {
			t.Fatalf("completions token %d: gateway %v (top %v), node %v", i, gl[i], gtop[i], nl[i])
		}
	}
}

// A kvwin node's /completion answers n_probs in llama-server's shape:
// every streamed partial with text carries its tokens' entries (token,
// bytes, logprob, top_logprobs of n_probs), and an unsupported
// post_sampling_probs or an n_probs out of range is a 400 naming it.
func TestNodeCompletionProbabilities(t *testing.T) {
	node := apptest.Start(t, func(f *app.Config) { f.Slots = 1 })
	post := func(body map[string]any) *http.Response {
		b, _ := json.Marshal(body)
		resp, err := http.Post(node.URL()+"/completion", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	type entry struct {
		Token       string           `json:"token"`
		Bytes       []int            `json:"bytes"`
		Logprob     *float64         `json:"logprob"`
		TopLogprobs []map[string]any `json:"top_logprobs"`
	}
	resp := post(map[string]any{"prompt": apptest.Words(6, 100), "n_predict": 6, "temperature": 0, "n_probs": 2, "stream": true})
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	entries, textParts := 0, 0
	var firstLogprob *float64
	var spelled, text []byte
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ch struct {
			Content string  `json:"content"`
			Stop    bool    `json:"stop"`
			Probs   []entry `json:"completion_probabilities"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Stop && ch.Probs != nil {
			t.Fatalf("a stream's final object repeats the probabilities: %s", line)
		}
		text = append(text, ch.Content...)
		if ch.Content != "" {
			textParts++
		}
		for _, e := range ch.Probs {
			entries++
			if firstLogprob == nil {
				firstLogprob = e.Logprob
			}
			if e.Logprob == nil || *e.Logprob > 0 || len(e.TopLogprobs) != 2 || len(e.Bytes) == 0 {
				t.Fatalf("entry %+v: want a logprob, 2 top_logprobs and bytes", e)
			}
			for _, b := range e.Bytes {
				spelled = append(spelled, byte(b))
			}
		}
	}
	if entries != 6 || string(spelled) != string(text) {
		t.Fatalf("%d entries (want 6) spelling %q; text %q in %d parts", entries, spelled, text, textParts)
	}

	// Not streamed: every entry in the one object.
	var whole struct {
		Content string  `json:"content"`
		Probs   []entry `json:"completion_probabilities"`
	}
	if err := json.NewDecoder(post(map[string]any{"prompt": apptest.Words(6, 100), "n_predict": 6, "temperature": 0, "n_probs": 2}).Body).Decode(&whole); err != nil {
		t.Fatal(err)
	}
	if len(whole.Probs) != 6 || whole.Content != string(text) || *whole.Probs[0].Logprob != *firstLogprob {
		t.Fatalf("not streamed: %d entries for %q (streamed %q)", len(whole.Probs), whole.Content, text)
	}

	for _, bad := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"prompt": "hi", "n_probs": 21}, "n_probs"},
		{map[string]any{"prompt": "hi", "n_probs": -1}, "n_probs"},
		{map[string]any{"prompt": "hi", "n_probs": 2, "post_sampling_probs": true}, "post_sampling_probs"},
	} {
		resp := post(bad.body)
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), bad.param) {
			t.Fatalf("%v: status %d %s, want 400 naming %s", bad.body, resp.StatusCode, data, bad.param)
		}
	}
}

// Ollama (v0.9.6) has no log-probabilities. A gateway whose only backend
// is Ollama answers a request for them 400, naming logprobs, rather than
// an answer without them; a gateway over Ollama and a kvwin node sends
// every such request to the node, even when round-robin ranks Ollama
// first, and other requests still reach Ollama.
func TestGatewayLogprobsOverOllama(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := ollamatest.Start(t, ctx)
	spec := "ollama=" + base + "?model=" + ollamatest.TinyModel + "&name=ollama-a"
	msgs := apptest.Msgs("user", apptest.Words(7, 200))
	ask := map[string]any{"model": ollamatest.TinyModel, "messages": msgs, "max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 2}

	only := apptest.Start(t, func(f *app.Config) { f.Backends = []string{spec} })
	for _, stream := range []bool{false, true} {
		body := maps.Clone(ask)
		body["stream"] = stream
		tr := apptest.PostWith(t, only.URL(), nil, body)
		var e struct {
			Error struct{ Message, Type, Param, Code string }
		}
		if err := json.Unmarshal(tr.Body, &e); err != nil || tr.Status != http.StatusBadRequest || e.Error.Param != "logprobs" ||
			e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "logprobs") {
			t.Fatalf("stream=%v: status %d %s, want 400 naming logprobs", stream, tr.Status, tr.Body)
		}
		t.Logf("stream=%v over Ollama alone: %d %s", stream, tr.Status, bytes.TrimSpace(tr.Body))
	}

	node := apptest.Start(t, func(f *app.Config) { f.Slots = 2 })
	mixed := apptest.Start(t, func(f *app.Config) {
		f.Backends, f.Route = []string{spec, "llamaserver=" + node.URL()}, "round-robin"
	})
	// Round-robin ranks each backend first in turn: of two requests in a
	// row, one has Ollama first.
	for i := range 2 {
		a := postChat(t, mixed.URL(), ask)
		if a.backend == "ollama-a" || len(a.logprobs) == 0 {
			t.Fatalf("request %d: served by %q with %d logprobs", i, a.backend, len(a.logprobs))
		}
	}
	served := map[string]int{}
	for range 2 {
		plain := apptest.PostWith(t, mixed.URL(), nil, map[string]any{"model": ollamatest.TinyModel, "messages": msgs, "max_tokens": 4, "temperature": 0})
		if plain.Status != http.StatusOK {
			t.Fatalf("without logprobs: %d %s", plain.Status, plain.Body)
		}
		served[plain.Header.Get("X-Kvwin-Backend")]++
	}
	if served["ollama-a"] != 1 {
		t.Fatalf("without logprobs, served by %v: want Ollama once (it stays in the fleet)", served)
	}
}
