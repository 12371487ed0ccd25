package app_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/window/memory/pgtest"
)

// A conversation or response name with a NUL byte or invalid UTF-8 — which
// PostgreSQL's text cannot hold and SQLite can — is a 400 naming the field
// in each route's own error shape, on SQLite and on PostgreSQL alike:
// never a 200 whose turns are silently not stored (unstored_turns_total
// stays 0, no conversation row is made), a silent store:false or a 503
// with the store up. A good name then works, so the store was up.
func TestNamesNoStoreCanKeepAreA400(t *testing.T) {
	const (
		nul     = "conv\x00x"
		badUTF8 = "conv\xffx"
	)
	chat := func(extra string) string {
		return `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1` + extra + `}`
	}
	messages := `{"model":"kvwin-tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	ollama := `{"model":"kvwin-tiny","stream":false,"messages":[{"role":"user","content":"hi"}],"options":{"num_predict":1}}`
	responses := func(extra string) string {
		return `{"input":"hi","max_output_tokens":16` + extra + `}`
	}
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dsn := ""
			if store == "postgres" {
				dsn = pgtest.Schema(t)
			}
			a := apptest.Start(t, func(f *app.Config) { f.Window, f.WindowBudget, f.MemoryStore = "memory", 1024, dsn })
			for _, tc := range []struct {
				name, method, path, body string
				header                   string // X-Conversation-Id
				shape                    string // openai, anthropic, ollama
				param                    string
			}{
				{"chat prompt_cache_key NUL", "POST", "/v1/chat/completions", chat(`,"prompt_cache_key":"conv\u0000x"`), "", "openai", "prompt_cache_key"},
				{"chat header invalid UTF-8", "POST", "/v1/chat/completions", chat(""), badUTF8, "openai", "X-Conversation-Id"},
				{"completions prompt_cache_key NUL", "POST", "/v1/completions", `{"prompt":"hi","max_tokens":1,"prompt_cache_key":"\u0000"}`, "", "openai", "prompt_cache_key"},
				{"messages header invalid UTF-8", "POST", "/v1/messages", messages, badUTF8, "anthropic", "X-Conversation-Id"},
				{"ollama chat header invalid UTF-8", "POST", "/api/chat", ollama, badUTF8, "ollama", "X-Conversation-Id"},
				{"responses prompt_cache_key NUL", "POST", "/v1/responses", responses(`,"prompt_cache_key":"conv\u0000x"`), "", "openai", "prompt_cache_key"},
				{"responses header invalid UTF-8", "POST", "/v1/responses", responses(""), badUTF8, "openai", "X-Conversation-Id"},
				{"responses previous_response_id NUL", "POST", "/v1/responses", responses(`,"previous_response_id":"resp_\u0000"`), "", "openai", "previous_response_id"},
				{"get response NUL", "GET", "/v1/responses/" + url.PathEscape(nul), "", "", "openai", "id"},
				{"delete response invalid UTF-8", "DELETE", "/v1/responses/" + url.PathEscape(badUTF8), "", "", "openai", "id"},
				{"input items NUL", "GET", "/v1/responses/" + url.PathEscape(nul) + "/input_items", "", "", "openai", "id"},
				{"delete conversation NUL", "DELETE", "/kvwin/v1/conversations/" + url.PathEscape(nul), "", "", "openai", "id"},
				{"delete conversation invalid UTF-8", "DELETE", "/kvwin/v1/conversations/" + url.PathEscape(badUTF8), "", "", "openai", "id"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					var headers map[string]string
					if tc.header != "" {
						headers = map[string]string{"X-Conversation-Id": tc.header}
					}
					ctype := ""
					if tc.body != "" {
						ctype = "application/json"
					}
					status, _, body := send(t, tc.method, a.URL()+tc.path, ctype, tc.body, headers)
					if status != 400 {
						t.Fatalf("%d %s, want 400", status, body)
					}
					if msg := errorMessage(t, tc.shape, body); !strings.Contains(msg, tc.param) {
						t.Fatalf("%s error %q does not name %s", tc.shape, msg, tc.param)
					}
					if tc.shape == "openai" {
						if e := apptest.DecodeError(t, []byte(body)).Error; e.Param != tc.param || e.Code != "invalid_encoding" {
							t.Fatalf("error %+v, want param %s, code invalid_encoding", e, tc.param)
						}
					}
				})
			}
			if v := metricValue(t, a, "kvwin_memory_store_unstored_turns_total"); v > 0 {
				t.Fatalf("kvwin_memory_store_unstored_turns_total %v: a turn was dropped", v)
			}
			if dsn != "" {
				var n int
				if err := pgtest.Open(t, dsn).QueryRow(`SELECT count(*) FROM conversations`).Scan(&n); err != nil || n != 0 {
					t.Fatalf("%d conversations stored (%v), want none", n, err)
				}
			}
			status, _, body := send(t, "POST", a.URL()+"/v1/responses", "application/json", responses(`,"prompt_cache_key":"conv-ok"`), nil)
			var r struct{ Store bool }
			if status != 200 || json.Unmarshal([]byte(body), &r) != nil || !r.Store {
				t.Fatalf("a good name: %d %s, want 200 and stored", status, body)
			}
		})
	}
}

// errorMessage is the message of an error body in shape.
func errorMessage(t *testing.T, shape, body string) string {
	t.Helper()
	var v struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%s error body %q: %v", shape, body, err)
	}
	var msg string
	switch shape {
	case "ollama":
		if json.Unmarshal(v.Error, &msg) != nil {
			t.Fatalf("not Ollama's {\"error\": \"…\"}: %s", body)
		}
	default:
		var e struct{ Type, Message string }
		if json.Unmarshal(v.Error, &e) != nil || e.Type != "invalid_request_error" || (shape == "anthropic") != (v.Type == "error") {
			t.Fatalf("not %s's error shape: %s", shape, body)
		}
		msg = e.Message
	}
	return msg
}
