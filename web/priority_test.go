package web

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"kvwin/engine/queue"
	"kvwin/engine/wire"
	"kvwin/web/core"
)

// batchKey is a key whose class is batch (keyedPolicyConfig).
const batchKey = "carol-key-0123456789"

// keyedPolicyConfig is keyedConfig plus carol, whose key is batch with
// weight 3.
func keyedPolicyConfig() Config {
	cfg := keyedConfig(nil)
	cfg.APIKeys[batchKey] = "carol"
	cfg.KeyPolicies = map[string]KeyPolicy{batchKey: {Class: queue.Batch, Weight: 3}}
	return cfg
}

// TestPriorityClass: a request gets its key's class and weight; it may
// lower its class with X-Kvwin-Priority, never raise it; only the admin
// key's X-Kvwin-Weight counts; a value that is not a class is 400.
func TestPriorityClass(t *testing.T) {
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
	ts := startServer(t, f, keyedPolicyConfig(), nil)
	tests := []struct {
		name       string
		headers    map[string]string
		status     int
		class      queue.Class
		weight     float64
		wantInBody string
	}{
		{"a key's default", jsonWith(aliceKey), 200, queue.Interactive, 0, ""},
		{"lowered", jsonWith(aliceKey, wire.HeaderPriority, "batch"), 200, queue.Batch, 0, ""},
		{"any case and space", jsonWith(aliceKey, wire.HeaderPriority, "  BATCH "), 200, queue.Batch, 0, ""},
		{"a batch key", jsonWith(batchKey), 200, queue.Batch, 3, ""},
		{"raising keeps the key's class", jsonWith(batchKey, wire.HeaderPriority, "interactive"), 200, queue.Batch, 3, ""},
		{"a tenant's weight header is ignored", jsonWith(aliceKey, wire.HeaderWeight, "100"), 200, queue.Interactive, 0, ""},
		{"the admin's weight header counts", jsonWith(adminKey, HeaderTenant, "bob", wire.HeaderWeight, "2.5"), 200, queue.Interactive, 2.5, ""},
		{"the admin may say batch", jsonWith(adminKey, HeaderTenant, "bob", wire.HeaderPriority, "batch"), 200, queue.Batch, 0, ""},
		{"not a class", jsonWith(aliceKey, wire.HeaderPriority, "realtime"), 400, 0, 0, `"param":"X-Kvwin-Priority"`},
		{"a hostile class", jsonWith(aliceKey, wire.HeaderPriority, strings.Repeat("\u00ff", 4000)), 400, 0, 0, `"code":"invalid_value"`},
		{"an admin weight out of range", jsonWith(adminKey, wire.HeaderWeight, "1e9"), 400, 0, 0, `"param":"X-Kvwin-Weight"`},
		{"an admin weight not a number", jsonWith(adminKey, wire.HeaderWeight, "NaN"), 400, 0, 0, `"param":"X-Kvwin-Weight"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.Requests())
			resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, tt.headers)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status != 200 {
				if !strings.Contains(string(body), tt.wantInBody) || len(body) > 1024 {
					t.Errorf("body %.300s: want %s, bounded", body, tt.wantInBody)
				}
				if len(f.Requests()) != before {
					t.Error("a refused request reached the backend")
				}
				return
			}
			reqs := f.Requests()
			got := reqs[len(reqs)-1]
			if got.Class != tt.class || got.Weight != tt.weight {
				t.Errorf("backend got class %v weight %v, want %v and %v", got.Class, got.Weight, tt.class, tt.weight)
			}
		})
	}
}

// clock is a test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestTokensPerMinute: a key of 10 tokens a minute whose first answer used
// 11 (3 prompt, 8 generated) is 429 on every API, each in its shape with
// Retry-After the seconds until its bucket holds a token again (2 tokens
// at 10 a minute: 12 s); another tenant is not limited; once the time has
// passed it is served again.
func TestTokensPerMinute(t *testing.T) {
	f := newFake().Script("stop", engineTimings(3, 0, 8), firstEvent(3, 0), textEvent("x"))
	cfg := keyedConfig(nil)
	cfg.KeyPolicies = map[string]KeyPolicy{aliceKey: {TokensPerMinute: 10}}
	s, err := New(cfg, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	s.now = clk.Now
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() { f.Release() })

	if resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(aliceKey)); resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	apis := []struct {
		name, path, body string
		headers          map[string]string
		check            func(body []byte) bool
	}{
		{"OpenAI", chatPath, `{` + hi + `}`, jsonWith(aliceKey), func(b []byte) bool {
			var e core.ErrorBody
			return json.Unmarshal(b, &e) == nil && e.Error.Type == "rate_limit_error" && e.Error.Code == "rate_limit_exceeded" && strings.Contains(e.Error.Message, "10 tokens per minute")
		}},
		{"Anthropic", "/v1/messages", `{"model":"tiny","max_tokens":5,` + hi + `}`, jsonWith("", "x-api-key", aliceKey, "anthropic-version", "2023-06-01"), func(b []byte) bool {
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			return json.Unmarshal(b, &e) == nil && e.Type == "error" && e.Error.Type == "rate_limit_error" && e.Error.Message != ""
		}},
		{"Ollama", "/api/chat", `{"model":"tiny",` + hi + `}`, jsonWith(aliceKey), func(b []byte) bool {
			var e map[string]any
			return json.Unmarshal(b, &e) == nil && len(e) == 1 && strings.Contains(e["error"].(string), "tokens per minute")
		}},
		{"llama-server", "/completion", `{"prompt":"x"}`, jsonWith(aliceKey), func(b []byte) bool {
			var e struct {
				Error struct {
					Code          int
					Type, Message string
				}
			}
			return json.Unmarshal(b, &e) == nil && e.Error.Code == 429 && e.Error.Type == "unavailable_error" && e.Error.Message != ""
		}},
	}
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			resp, body := send(t, ts, "POST", api.path, api.body, api.headers)
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "12" || !api.check(body) {
				t.Errorf("%d Retry-After %q %s: want 429, Retry-After 12, the API's error shape", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
		})
	}
	if resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(bobKey)); resp.StatusCode != 200 {
		t.Errorf("another tenant: %d %s", resp.StatusCode, body)
	}
	if resp, _ := send(t, ts, "GET", "/v1/models", "", jsonWith(aliceKey)); resp.StatusCode != 200 {
		t.Errorf("a route that generates nothing: %d, want it not limited", resp.StatusCode)
	}
	clk.add(11 * time.Second)
	// 11 s refilled 1.83 tokens of the 2 needed: 0.17 more take 1 s.
	if resp, _ := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(aliceKey)); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("after 11 s: %d Retry-After %q, want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clk.add(2 * time.Second)
	if resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith(aliceKey)); resp.StatusCode != 200 {
		t.Errorf("after 13 s: %d %s, want served", resp.StatusCode, body)
	}
}

// TestKeyOptions: the keys file's options after TENANT=KEY.
func TestKeyOptions(t *testing.T) {
	tests := []struct {
		in      string
		want    KeyPolicy
		wantErr string
	}{
		{"", KeyPolicy{}, ""},
		{"class=batch weight=2 tpm=60000", KeyPolicy{Class: queue.Batch, Weight: 2, TokensPerMinute: 60000}, ""},
		{"class=Interactive", KeyPolicy{}, ""},
		{"weight=0.5", KeyPolicy{Weight: 0.5}, ""},
		{"class=urgent", KeyPolicy{}, "class"},
		{"weight=0", KeyPolicy{}, "weight"},
		{"weight=-1", KeyPolicy{}, "weight"},
		{"weight=Inf", KeyPolicy{}, "weight"},
		{"tpm=0", KeyPolicy{}, "tpm"},
		{"tpm=1.5", KeyPolicy{}, "tpm"},
		{"class=batch class=batch", KeyPolicy{}, "twice"},
		{"colour=red", KeyPolicy{}, "want class="},
	}
	for _, tt := range tests {
		got, err := ParseKeyOptions(strings.Fields(tt.in))
		switch {
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("%q: %+v, %v; want %+v", tt.in, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want one naming %q", tt.in, err, tt.wantErr)
		}
	}
}
