package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// Bodies recorded from real llama-server builds, replayed to a gateway:
// engine/llamaserver/testdata/llama-server-*/ (manifest.json lists each
// build's exchanges; README.md says how they were recorded).
const recordings = "../../../engine/llamaserver/testdata"

// recorded is one recorded /completion exchange.
type recorded struct {
	prompt      []int
	contentType string
	body        []byte
	used        bool
}

// replayer is a llama-server made of one build's recordings: /props as
// recorded, /tokenize by the test model's vocabulary (byte b is token b;
// <|endoftext|>, the BOS, <|im_start|> and <|im_end|> are 256–258, as the
// recorded /tokenize answers say), and /completion the recorded answer of
// the first unused recorded request with the same prompt (so a second
// identical request gets the recorded second answer).
type replayer struct {
	dir         string
	completions []*recorded
	mu          sync.Mutex
	got         [][]int // prompts received
}

func loadRecording(t *testing.T, build string) *replayer {
	t.Helper()
	dir := filepath.Join(recordings, build)
	var manifest []struct {
		Path, Request, Response string
		Status                  int
		ContentType             string `json:"content_type"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || json.Unmarshal(data, &manifest) != nil {
		t.Fatalf("%s: manifest: %v", build, err)
	}
	rp := &replayer{dir: dir}
	for _, ex := range manifest {
		if ex.Path != "/completion" || ex.Status != 200 {
			continue
		}
		var in struct {
			Prompt []int `json:"prompt"`
		}
		req, _ := os.ReadFile(filepath.Join(dir, ex.Request))
		body, err := os.ReadFile(filepath.Join(dir, ex.Response))
		if err != nil || json.Unmarshal(req, &in) != nil {
			t.Fatalf("%s: %s: %v", build, ex.Request, err)
		}
		rp.completions = append(rp.completions, &recorded{prompt: in.Prompt, contentType: ex.ContentType, body: body})
	}
	return rp
}

// replayVocab is the test model's vocabulary as the recorded servers
// tokenized: bytes as themselves, BOS and ChatML's markers from 256.
var replayVocab = byteVocab{bos: 256, base: 0, specials: map[string]int{"<|endoftext|>": 256, "<|im_start|>": 257, "<|im_end|>": 258}}

// messages are the chat messages of a recorded ChatML prompt.
func (rp *replayer) messages(prompt []int) []map[string]string {
	var msgs []map[string]string
	var cur []byte
	in := false
	for _, id := range prompt {
		switch {
		case id == 257:
			in, cur = true, nil
		case id == 258 && in:
			role, content, _ := strings.Cut(string(cur), "\n")
			msgs = append(msgs, map[string]string{"role": role, "content": content})
			in = false
		case in && id < 256:
			cur = append(cur, byte(id))
		}
	}
	return msgs
}

func (rp *replayer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	reply := func(status int, ct string, data []byte) {
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = w.Write(data)
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /props":
		data, _ := os.ReadFile(filepath.Join(rp.dir, "props.response.json"))
		reply(200, "application/json", data)
	case "GET /health":
		reply(200, "application/json", []byte(`{"status":"ok"}`))
	case "GET /slots":
		reply(501, "application/json", []byte(`{"error":{"code":501,"message":"This server does not support slots endpoint. Start it with `+"`--slots`"+`","type":"not_supported_error"}}`))
	case "POST /tokenize":
		var in struct {
			Content      string `json:"content"`
			AddSpecial   bool   `json:"add_special"`
			ParseSpecial *bool  `json:"parse_special"`
		}
		_ = json.Unmarshal(body, &in)
		data, _ := json.Marshal(map[string]any{"tokens": replayVocab.encode(in.Content, in.AddSpecial, in.ParseSpecial == nil || *in.ParseSpecial)})
		reply(200, "application/json", data)
	case "POST /completion":
		var in struct {
			Prompt []int `json:"prompt"`
		}
		_ = json.Unmarshal(body, &in)
		rp.mu.Lock()
		rp.got = append(rp.got, in.Prompt)
		var found *recorded
		for _, c := range rp.completions {
			if !c.used && slices.Equal(c.prompt, in.Prompt) {
				found, c.used = c, true
				break
			}
		}
		rp.mu.Unlock()
		if found == nil {
			reply(500, "application/json", []byte(`{"error":{"code":500,"message":"no recorded answer to this prompt","type":"server_error"}}`))
			return
		}
		reply(200, found.contentType, found.body)
	default:
		http.NotFound(w, r)
	}
}

// serverCount is the reuse a recorded answer reports, as the server
// counts it: timings.cache_n, else tokens_evaluated − timings.prompt_n.
func serverCount(t *testing.T, c *recorded) int {
	t.Helper()
	body := string(c.body)
	if strings.HasPrefix(c.contentType, "text/event-stream") {
		lines := strings.Split(strings.TrimSpace(body), "\n")
		body = strings.TrimPrefix(lines[len(lines)-1], "data: ")
	}
	var final struct {
		TokensEvaluated int `json:"tokens_evaluated"`
		Timings         struct {
			CacheN  *int `json:"cache_n"`
			PromptN int  `json:"prompt_n"`
		} `json:"timings"`
	}
	if err := json.Unmarshal([]byte(body), &final); err != nil {
		t.Fatal(err)
	}
	if final.Timings.CacheN != nil {
		return *final.Timings.CacheN
	}
	return final.TokensEvaluated - final.Timings.PromptN
}

// TestGatewayReplaysRecordedBuilds: a second identical request reports the
// reused tokens exactly (the recorded server's count), through
// /v1/chat/completions and /api/chat of a gateway, for every recorded
// build; the gateway sends the recorded prompt and finds no count
// impossible.
func TestGatewayReplaysRecordedBuilds(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(recordings, "llama-server-*"))
	if len(dirs) == 0 {
		t.Fatal("no recorded builds")
	}
	for _, dir := range dirs {
		build := filepath.Base(dir)
		for _, route := range []string{"/v1/chat/completions", "/api/chat"} {
			t.Run(build+route, func(t *testing.T) {
				rp := loadRecording(t, build)
				// The first recorded prompt that was sent twice.
				var first, second *recorded
				for i, a := range rp.completions {
					for _, b := range rp.completions[i+1:] {
						if first == nil && slices.Equal(a.prompt, b.prompt) {
							first, second = a, b
						}
					}
				}
				if first == nil {
					t.Fatal("no recorded prompt was sent twice")
				}
				srv := httptest.NewServer(rp)
				t.Cleanup(srv.Close)
				log := newLogSink()
				gw := apptest.Start(t, func(f *app.Config) {
					f.Backends, f.Route = []string{"llamaserver=" + srv.URL}, "prefix"
					f.LogFormat, f.LogOutput = app.LogJSON, log
				})
				msgs := rp.messages(first.prompt)
				n := 8
				body := map[string]any{"messages": msgs, "max_tokens": n, "temperature": 0, "stream": false}
				if route == "/api/chat" {
					body = map[string]any{"model": gwModel(t, gw), "messages": msgs, "stream": false, "options": map[string]any{"num_predict": n, "temperature": 0}}
				}
				for turn, rec := range []*recorded{first, second} {
					resp, out := postTo(t, gw, route, body)
					if resp.StatusCode != 200 {
						t.Fatalf("turn %d: %d %s (the gateway sent %v)", turn+1, resp.StatusCode, out, rp.got)
					}
					want := serverCount(t, rec)
					cached, _ := strconv.Atoi(resp.Header.Get("X-Kvwin-Cached-Tokens"))
					if cached != want {
						t.Errorf("turn %d: X-Kvwin-Cached-Tokens %d, the server counted %d", turn+1, cached, want)
					}
					if route == "/v1/chat/completions" {
						var r apptest.ChatReply
						if err := json.Unmarshal(out, &r); err != nil {
							t.Fatal(err)
						}
						if got := r.Usage.PromptTokensDetails.CachedTokens; got == nil || *got != want || r.Usage.PromptTokens != len(rec.prompt) {
							t.Errorf("turn %d: usage %+v, the server counted %d of %d", turn+1, r.Usage, want, len(rec.prompt))
						}
					}
				}
				if want := serverCount(t, second); want == 0 {
					t.Errorf("the recorded repeat reused nothing")
				}
				if bad := log.find(map[string]any{"msg": "backend reported usage that cannot be true; replaced by the gateway's own count"}); len(bad) > 0 {
					t.Errorf("the gateway found the recorded counts impossible: %v", bad)
				}
			})
		}
	}
}

// gwModel is the model a gateway serves.
func gwModel(t *testing.T, gw *app.App) string {
	t.Helper()
	resp, err := http.Get(gw.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) == 0 {
		t.Fatalf("models: %v %+v", err, models)
	}
	return models.Data[0].ID
}
