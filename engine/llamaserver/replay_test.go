package llamaserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"kvwin/engine"
)

// Replays of bodies recorded from real llama-server builds
// (testdata/llama-server-*/, each with a manifest.json of its exchanges
// and a README.md saying how it was recorded). Every expectation is read
// from the recorded answer itself, so a build recorded later is replayed
// by the same tests.

// exchange is one entry of a manifest.json.
type exchange struct {
	Name        string `json:"name"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	Request     string `json:"request"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Response    string `json:"response"`
}

// builds lists the recorded builds: their testdata folders.
func builds(t *testing.T) []string {
	dirs, err := filepath.Glob(filepath.Join("testdata", "llama-server-*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no recorded builds under testdata: %v", err)
	}
	for i, d := range dirs {
		dirs[i] = filepath.Base(d)
	}
	return dirs
}

func manifest(t *testing.T, build string) []exchange {
	var out []exchange
	if err := json.Unmarshal(fixture(filepath.Join(build, "manifest.json")), &out); err != nil {
		t.Fatalf("%s/manifest.json: %v", build, err)
	}
	return out
}

// recordedFinal is the final object of a recorded /completion answer (the
// last data line of a stream), and the text of the whole answer.
func recordedFinal(t *testing.T, body []byte, stream bool) (final map[string]any, text string) {
	t.Helper()
	lines := []string{string(body)}
	if stream {
		lines = nil
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, "data: "); ok {
				lines = append(lines, v)
			}
		}
	}
	for _, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("recorded chunk %q: %v", l, err)
		}
		if c, ok := obj["content"].(string); ok && (stream || obj["stop"] == true) {
			text += c
		}
		final = obj
	}
	return final, text
}

// serverReuse is what a recorded final object says was reused, as the
// server counts it: timings.cache_n, else tokens_evaluated −
// timings.prompt_n.
func serverReuse(final map[string]any) (prompt, cached int) {
	prompt = int(final["tokens_evaluated"].(float64))
	tm := final["timings"].(map[string]any)
	if c, ok := tm["cache_n"].(float64); ok {
		return prompt, int(c)
	}
	return prompt, prompt - int(tm["prompt_n"].(float64))
}

// TestReplayCompletions: every recorded /completion answer, replayed to
// the request it answered, gives the server's counts exactly: the
// prompt, the reuse (a second identical request reports what the server
// reused), the tokens generated and the text.
func TestReplayCompletions(t *testing.T) {
	for _, build := range builds(t) {
		for _, ex := range manifest(t, build) {
			if ex.Path != "/completion" || ex.Status != http.StatusOK {
				continue
			}
			t.Run(build+"/"+ex.Name, func(t *testing.T) {
				stream := strings.HasPrefix(ex.ContentType, "text/event-stream")
				body := fixture(filepath.Join(build, ex.Response))
				var in struct {
					Prompt   []int `json:"prompt"`
					IDSlot   int   `json:"id_slot"`
					NPredict int   `json:"n_predict"`
					NProbs   int   `json:"n_probs"`
				}
				if err := json.Unmarshal(fixture(filepath.Join(build, ex.Request)), &in); err != nil {
					t.Fatal(err)
				}
				f := startFake(t, &fakeServer{props: filepath.Join(build, "props.response.json"), completion: func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", ex.ContentType)
					_, _ = w.Write(body)
				}})
				b := f.backend(t, Config{})
				req := engine.Request{Tokens: in.Prompt, MaxTokens: in.NPredict, Slot: in.IDSlot, Logprobs: in.NProbs > 0, TopLogprobs: in.NProbs}
				var first engine.Timings
				res, err := b.Generate(context.Background(), req, func(ev engine.Event) error {
					if ev.First {
						first = ev.Timings
					}
					return nil
				})
				if p := b.Info(); in.IDSlot >= p.Slots {
					// A slot the server does not have: refused before
					// sending (a server may wrap it around, or wait forever).
					if !errors.Is(err, engine.ErrInvalidRequest) || len(f.requests("/completion")) != 0 {
						t.Errorf("slot %d of %d: %v, %d requests sent; want it refused before sending", in.IDSlot, p.Slots, err, len(f.requests("/completion")))
					}
					return
				}
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
				final, text := recordedFinal(t, body, stream)
				prompt, cached := serverReuse(final)
				if got := res.Timings; got.PromptTokens != prompt || got.CachedTokens != cached || prompt != len(in.Prompt) {
					t.Errorf("result: %d prompt, %d cached; the server: %d (of %d sent), %d", got.PromptTokens, got.CachedTokens, prompt, len(in.Prompt), cached)
				}
				if first.PromptTokens != prompt || first.CachedTokens != cached {
					t.Errorf("first event: %d prompt, %d cached; the server: %d, %d", first.PromptTokens, first.CachedTokens, prompt, cached)
				}
				if n := int(final["tokens_predicted"].(float64)); res.Timings.GeneratedTokens != n || res.Text != text {
					t.Errorf("generated %d tokens, %q; the server %d, %q", res.Timings.GeneratedTokens, res.Text, n, text)
				}
				if in.NProbs > 0 && len(res.Logprobs) != res.Timings.GeneratedTokens {
					t.Errorf("%d log-probabilities for %d tokens", len(res.Logprobs), res.Timings.GeneratedTokens)
				}
				if strings.HasSuffix(ex.Name, "_2") && cached == 0 {
					t.Errorf("the recorded repeat reused nothing: not the fixture the test needs")
				}
			})
		}
	}
}

// TestReplayChatUsage: the counts of the OpenAI route's recorded answers
// (usage, timings) are read as the adapter reads a chunk's: the reuse is
// prompt_tokens_details.cached_tokens where present, else cache_n, else
// usage.prompt_tokens − timings.prompt_n.
func TestReplayChatUsage(t *testing.T) {
	for _, build := range builds(t) {
		for _, ex := range manifest(t, build) {
			if ex.Path != "/v1/chat/completions" || ex.Status != http.StatusOK || strings.HasPrefix(ex.ContentType, "text/event-stream") {
				continue
			}
			t.Run(build+"/"+ex.Name, func(t *testing.T) {
				body := fixture(filepath.Join(build, ex.Response))
				var c chunk
				if err := json.Unmarshal(body, &c); err != nil {
					t.Fatal(err)
				}
				got, ok := c.promptSide()
				var raw struct {
					Usage struct {
						PromptTokens        int `json:"prompt_tokens"`
						PromptTokensDetails *struct {
							CachedTokens int `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
					Timings struct {
						PromptN int  `json:"prompt_n"`
						CacheN  *int `json:"cache_n"`
					} `json:"timings"`
				}
				_ = json.Unmarshal(body, &raw)
				want := raw.Usage.PromptTokens - raw.Timings.PromptN
				switch {
				case raw.Timings.CacheN != nil:
					want = *raw.Timings.CacheN
				case raw.Usage.PromptTokensDetails != nil:
					want = raw.Usage.PromptTokensDetails.CachedTokens
				}
				if !ok || got.PromptTokens != raw.Usage.PromptTokens || got.CachedTokens != want {
					t.Errorf("read %d prompt, %d cached (ok %v); the server: %d, %d", got.PromptTokens, got.CachedTokens, ok, raw.Usage.PromptTokens, want)
				}
			})
		}
	}
}

// TestReplayMetadata: recorded /props, /slots (served or not) and the
// context-size error read as the adapter needs them.
func TestReplayMetadata(t *testing.T) {
	for _, build := range builds(t) {
		t.Run(build, func(t *testing.T) {
			var props struct {
				TotalSlots int `json:"total_slots"`
				DGS        struct {
					NCtx int `json:"n_ctx"`
				} `json:"default_generation_settings"`
			}
			if err := json.Unmarshal(fixture(filepath.Join(build, "props.response.json")), &props); err != nil {
				t.Fatal(err)
			}
			for _, ex := range manifest(t, build) {
				switch {
				case ex.Path == "/props":
					f := startFake(t, &fakeServer{props: filepath.Join(build, ex.Response)})
					p, err := f.backend(t, Config{}).LoadProps(context.Background())
					if err != nil || p.Slots != props.TotalSlots || p.ContextSlot != props.DGS.NCtx {
						t.Errorf("%s: %+v, %v", ex.Name, p, err)
					}
				case ex.Path == "/slots" && ex.Status == http.StatusNotImplemented:
					f := startFake(t, &fakeServer{props: filepath.Join(build, "props.response.json"), slots: "501"})
					if _, err := f.backend(t, Config{}).ReadSlots(context.Background()); !errors.Is(err, engine.ErrNotSupported) {
						t.Errorf("%s: %v, want not supported", ex.Name, err)
					}
					var env struct {
						Error errorObject `json:"error"`
					}
					if json.Unmarshal(fixture(filepath.Join(build, ex.Response)), &env) != nil || env.Error.status() != http.StatusNotImplemented {
						t.Errorf("%s: the recorded answer is not a 501 error object", ex.Name)
					}
				case ex.Path == "/slots":
					var raw []map[string]any
					_ = json.Unmarshal(fixture(filepath.Join(build, ex.Response)), &raw)
					f := startFake(t, &fakeServer{props: filepath.Join(build, "props.response.json"), slots: filepath.Join(build, ex.Response)})
					got, err := f.backend(t, Config{}).ReadSlots(context.Background())
					if err != nil || len(got) != len(raw) {
						t.Fatalf("%s: %d slots, %v; recorded %d", ex.Name, len(got), err, len(raw))
					}
					counts := false
					for _, s := range raw {
						_, ok := s["n_prompt_tokens"]
						counts = counts || ok
					}
					for i, s := range got {
						prompt, hasPrompt := raw[i]["prompt"].(string)
						n, hasCount := raw[i]["n_prompt_tokens"].(float64)
						switch {
						case !hasPrompt && !hasCount && counts:
							// A server that counts leaves the count out of a
							// slot that served nothing: it holds nothing.
							if s.Count != 0 {
								t.Errorf("slot %d: count %d, want 0 (it served nothing)", i, s.Count)
							}
						case s.Processing:
						case hasPrompt && prompt != "":
							if len(s.Tokens) == 0 || s.Count != len(s.Tokens) && !hasCount {
								t.Errorf("slot %d: %d tokens, count %d, of a prompt of %d bytes", i, len(s.Tokens), s.Count, len(prompt))
							}
						case hasCount:
							if s.Count != int(n) {
								t.Errorf("slot %d: count %d, the server %v", i, s.Count, n)
							}
						}
					}
				case ex.Path == "/completion" && ex.Status == http.StatusBadRequest:
					body := fixture(filepath.Join(build, ex.Response))
					var in struct {
						Prompt []int `json:"prompt"`
					}
					_ = json.Unmarshal(fixture(filepath.Join(build, ex.Request)), &in)
					err := decodeError("POST /completion", ex.Status, body, len(in.Prompt), props.DGS.NCtx)
					var tooLong *engine.ContextLengthError
					if !errors.As(err, &tooLong) || tooLong.PromptTokens == 0 || tooLong.Limit == 0 {
						t.Errorf("%s: %v, want a context-length error", ex.Name, err)
					}
				}
			}
		})
	}
}
