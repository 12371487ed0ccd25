package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"kvwin/engine"
	"kvwin/engine/enginetest"
	"kvwin/kvcache"
	"kvwin/web/core"
)

// Keys of the auth tests.
const (
	aliceKey = "alice-key-0123456789"
	bobKey   = "bob-key-0123456789ab"
	adminKey = "admin-key-0123456789"
)

// fakeRegistry is a RegistryView with nothing held.
type fakeRegistry struct{}

func (fakeRegistry) Snapshot() kvcache.Stats { return kvcache.Stats{} }

// fakeForget records what DELETE asked for; it knows one conversation per
// tenant, "c1" of alice.
type fakeForget struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeForget) Forget(_ context.Context, tenant, conversation string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, tenant+"/"+conversation)
	return tenant == "alice" && conversation == "c1", nil
}

// keyedConfig is a server with two tenants and an admin.
func keyedConfig(forget Forgetter) Config {
	return Config{
		APIKeys:  map[string]string{aliceKey: "alice", bobKey: "bob"},
		AdminKey: adminKey, Registry: fakeRegistry{}, Metrics: prometheus.NewRegistry(), Forget: forget,
	}
}

// send sends one request with headers; an empty content type sends none.
func send(t *testing.T, ts *httptest.Server, method, path, body string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func jsonWith(key string, more ...string) map[string]string {
	h := map[string]string{"Content-Type": "application/json"}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	for i := 0; i+1 < len(more); i += 2 {
		h[more[i]] = more[i+1]
	}
	return h
}

// TestAuthRules: who may call what, which tenant each request acts as, and
// the error shape of each route's API.
func TestAuthRules(t *testing.T) {
	chat := `{` + hi + `}`
	tests := []struct {
		name       string
		method     string
		path, body string
		headers    map[string]string
		status     int
		code       string // OpenAI error code, or "" for a success or another shape
		tenant     string // the backend's request's tenant, on success of a generation
	}{
		{"no key", "POST", chatPath, chat, jsonWith(""), 401, core.CodeInvalidAPIKey, ""},
		{"wrong key", "POST", chatPath, chat, jsonWith("not-a-key-0123456789"), 401, core.CodeInvalidAPIKey, ""},
		{"not a bearer", "POST", chatPath, chat, jsonWith("", "Authorization", "Basic "+aliceKey), 401, core.CodeInvalidAPIKey, ""},
		{"tenant key", "POST", chatPath, chat, jsonWith(aliceKey), 200, "", "alice"},
		{"tenant cannot pick a tenant", "POST", chatPath, chat, jsonWith(aliceKey, HeaderTenant, "bob"), 200, "", "alice"},
		{"admin names a tenant", "POST", chatPath, chat, jsonWith(adminKey, HeaderTenant, "bob"), 200, "", "bob"},
		{"admin alone", "POST", chatPath, chat, jsonWith(adminKey), 200, "", AdminTenant},
		{"admin names an invalid tenant", "POST", chatPath, chat, jsonWith(adminKey, HeaderTenant, "a/b"), 400, core.CodeInvalidValue, ""},
		{"registry without key", "GET", "/kvwin/v1/registry", "", nil, 401, core.CodeInvalidAPIKey, ""},
		{"registry with a tenant key", "GET", "/kvwin/v1/registry", "", jsonWith(bobKey), 403, core.CodeForbidden, ""},
		{"registry with the admin key", "GET", "/kvwin/v1/registry", "", jsonWith(adminKey), 200, "", ""},
		{"metrics with a tenant key", "GET", "/metrics", "", jsonWith(aliceKey), 403, core.CodeForbidden, ""},
		{"metrics with the admin key", "GET", "/metrics", "", jsonWith(adminKey), 200, "", ""},
		{"health is open", "GET", "/health", "", nil, 200, "", ""},
		{"an unknown path reveals nothing without a key", "GET", "/secret", "", nil, 401, core.CodeInvalidAPIKey, ""},
		{"models needs a key", "GET", "/v1/models", "", nil, 401, core.CodeInvalidAPIKey, ""},
		{"text/plain from a page", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "text/plain", "Origin", "https://evil.example"), 415, core.CodeUnsupportedMedia, ""},
		{"a form from a page", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site"), 415, core.CodeUnsupportedMedia, ""},
		{"no content type from a page", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "", "Referer", "https://evil.example/x"), 415, core.CodeUnsupportedMedia, ""},
		{"curl -d without a content type", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "application/x-www-form-urlencoded"), 200, "", "alice"},
		{"text/plain from a client", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "text/plain"), 200, "", "alice"},
		{"typed into the address bar", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "text/plain", "Sec-Fetch-Site", "none"), 200, "", "alice"},
		{"json with a charset", "POST", chatPath, chat, jsonWith(aliceKey, "Content-Type", "application/json; charset=utf-8"), 200, "", "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
			ts := startServer(t, f, keyedConfig(nil), nil)
			resp, body := send(t, ts, tt.method, tt.path, tt.body, tt.headers)
			if tt.code != "" {
				typ := core.TypeInvalidRequest
				switch tt.status {
				case 403:
					typ = core.TypePermission
				}
				wantError(t, resp, body, tt.status, typ, tt.code)
			} else if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if strings.Contains(string(body), aliceKey) || strings.Contains(string(body), adminKey) {
				t.Errorf("a key is echoed in the answer: %s", body)
			}
			reqs := f.Requests()
			switch {
			case tt.tenant == "" && len(reqs) > 0:
				t.Errorf("the backend was called: %+v", reqs)
			case tt.tenant != "" && (len(reqs) != 1 || reqs[0].Tenant != tt.tenant):
				t.Errorf("backend requests %+v, want one of tenant %q", reqs, tt.tenant)
			}
		})
	}
}

// TestAuthErrorShapeFollowsTheRouteAPI: node routes answer in llama-server's
// shape and Ollama routes in Ollama's, whoever rejects them.
func TestAuthErrorShapeFollowsTheRouteAPI(t *testing.T) {
	ts := startServer(t, newFake(), keyedConfig(nil), nil)
	resp, body := send(t, ts, "POST", "/completion", `{"prompt":"x"}`, jsonWith(""))
	var node struct {
		Error struct {
			Code int    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	if resp.StatusCode != 401 || json.Unmarshal(body, &node) != nil || node.Error.Code != 401 || node.Error.Type != "authentication_error" {
		t.Errorf("node route: %d %s", resp.StatusCode, body)
	}
	for _, tt := range []struct {
		key, ctype string
		status     int
	}{{"", "application/json", 401}, {aliceKey, "text/plain", 415}} {
		resp, body = send(t, ts, "POST", "/api/chat", `{}`, jsonWith(tt.key, "Content-Type", tt.ctype, "Origin", "https://evil.example"))
		var ollama struct {
			Error string `json:"error"`
		}
		if resp.StatusCode != tt.status || json.Unmarshal(body, &ollama) != nil || ollama.Error == "" {
			t.Errorf("Ollama route: %d %s, want %d and {\"error\": \"…\"}", resp.StatusCode, body, tt.status)
		}
	}
}

// TestNoKeysEverythingOpen: without keys, Authorization is ignored, every
// request is tenant default, and admin routes are open.
func TestNoKeysEverythingOpen(t *testing.T) {
	f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
	ts := startServer(t, f, Config{Registry: fakeRegistry{}}, nil)
	resp, body := send(t, ts, "POST", chatPath, `{`+hi+`}`, jsonWith("whatever", HeaderTenant, "bob"))
	if resp.StatusCode != 200 || len(f.Requests()) != 1 || f.Requests()[0].Tenant != DefaultTenant {
		t.Fatalf("status %d %s; requests %+v", resp.StatusCode, body, f.Requests())
	}
	if resp, body := send(t, ts, "GET", "/kvwin/v1/registry", "", nil); resp.StatusCode != 200 {
		t.Fatalf("registry: %d %s", resp.StatusCode, body)
	}
}

func TestKeyringRejectsWeakOrSharedKeys(t *testing.T) {
	tests := []struct {
		name  string
		keys  map[string]string
		admin string
	}{
		{"short key", map[string]string{"short": "alice"}, ""},
		{"key with a space", map[string]string{"0123456789 0123456789": "alice"}, ""},
		{"bad tenant name", map[string]string{aliceKey: "al/ice"}, ""},
		{"admin key shared", map[string]string{aliceKey: "alice"}, aliceKey},
		{"short admin key", nil, "short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(Config{APIKeys: tt.keys, AdminKey: tt.admin}, newFake(), nil); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestHostCheck(t *testing.T) {
	tests := []struct {
		name    string
		listen  string
		allowed []string
		host    string
		status  int
	}{
		{"loopback listener, its address", "127.0.0.1:8080", nil, "127.0.0.1:8080", 200},
		{"loopback listener, localhost", "127.0.0.1:8080", nil, "localhost:8080", 200},
		{"loopback listener, IPv6 loopback", "127.0.0.1:8080", nil, "[::1]:8080", 200},
		{"loopback listener, a rebinding name", "127.0.0.1:8080", nil, "evil.example:8080", 403},
		{"loopback listener, an allowed name", "127.0.0.1:8080", []string{"kv.internal"}, "kv.internal:8080", 200},
		{"public listener, any host", "0.0.0.0:8080", nil, "anything.example", 200},
		{"public listener with allowed hosts", "0.0.0.0:8080", []string{"kv.example:8080"}, "kv.example:8080", 200},
		{"public listener, another host", "0.0.0.0:8080", []string{"kv.example:8080"}, "evil.example", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, newFake(), Config{ListenAddr: tt.listen, AllowedHosts: tt.allowed}, nil)
			resp, body := send(t, ts, "GET", "/v1/models", "", map[string]string{"Host": tt.host})
			if tt.status == 403 {
				wantError(t, resp, body, 403, core.TypePermission, core.CodeForbiddenHost)
			} else if resp.StatusCode != tt.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		})
	}
}

func TestCORS(t *testing.T) {
	ts := startServer(t, newFake(), Config{CORSOrigins: []string{"https://app.example"}}, nil)
	preflight := func(origin string) (*http.Response, []byte) {
		return send(t, ts, "OPTIONS", chatPath, "", map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"})
	}
	resp, body := preflight("https://app.example")
	h := resp.Header
	if resp.StatusCode != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("allowed preflight: %d %v %s", resp.StatusCode, h, body)
	}
	resp, body = preflight("https://evil.example")
	wantError(t, resp, body, 403, core.TypePermission, core.CodeForbidden)
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("a foreign origin's preflight got CORS headers")
	}
	resp, _ = send(t, ts, "GET", "/v1/models", "", map[string]string{"Origin": "https://app.example"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), HeaderCachedTokens) {
		t.Fatalf("allowed origin: %v", resp.Header)
	}
	resp, _ = send(t, ts, "GET", "/v1/models", "", map[string]string{"Origin": "https://evil.example"})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("foreign origin: %d %v", resp.StatusCode, resp.Header)
	}
	// Without --cors-origin nothing is granted.
	bare := startServer(t, newFake(), Config{}, nil)
	resp, _ = send(t, bare, "OPTIONS", chatPath, "", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
	if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("no origins configured: %d %v", resp.StatusCode, resp.Header)
	}
}

// slotsFake reports slots of two tenants.
type slotsFake struct {
	*fakeBackend
	enginetest.SlotList
}

// newSlotsFake gives f slotsFake's slots.
func newSlotsFake(f *fakeBackend) slotsFake {
	return slotsFake{f, enginetest.SlotList{B: f, List: []engine.SlotState{
		{ID: 0, Context: 512, Tokens: 40, Tenant: "alice"}, {ID: 1, Context: 512, Tokens: 90, Tenant: "bob"}, {ID: 2, Context: 512}}}}
}

func TestSlotsShowOnlyTheCallersSlots(t *testing.T) {
	f := newFake()
	s, err := New(keyedConfig(nil), newSlotsFake(f), nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, tt := range []struct {
		name    string
		headers map[string]string
		ids     []int
	}{
		{"alice", jsonWith(aliceKey), []int{0}},
		{"bob", jsonWith(bobKey), []int{1}},
		{"admin naming alice", jsonWith(adminKey, HeaderTenant, "alice"), []int{0}},
		{"admin", jsonWith(adminKey), []int{0, 1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := send(t, ts, "GET", "/slots", "", tt.headers)
			var slots []engine.SlotState
			if resp.StatusCode != 200 || json.Unmarshal(body, &slots) != nil {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			var ids []int
			for _, s := range slots {
				ids = append(ids, s.ID)
			}
			if len(ids) != len(tt.ids) || strings.Contains(string(body), "tenant") {
				t.Fatalf("slots %v (%s), want %v", ids, body, tt.ids)
			}
			for i := range ids {
				if ids[i] != tt.ids[i] {
					t.Fatalf("slots %v, want %v", ids, tt.ids)
				}
			}
		})
	}
}

func TestDeleteConversation(t *testing.T) {
	forget := &fakeForget{}
	ts := startServer(t, newFake(), keyedConfig(forget), nil)
	tests := []struct {
		name, path string
		key        string
		status     int
		call       string // what Forget was asked, "" for nothing
	}{
		{"owner", "/kvwin/v1/conversations/c1", aliceKey, 204, "alice/c1"},
		{"another tenant's id is another conversation", "/kvwin/v1/conversations/c1", bobKey, 404, "bob/c1"},
		{"unknown id", "/kvwin/v1/conversations/nope", aliceKey, 404, "alice/nope"},
		{"admin with a tenant", "/kvwin/v1/conversations/c1?tenant=alice", adminKey, 204, "alice/c1"},
		{"admin without a tenant", "/kvwin/v1/conversations/c1", adminKey, 400, ""},
		{"no key", "/kvwin/v1/conversations/c1", "", 401, ""},
		{"a tenant cannot name another", "/kvwin/v1/conversations/c1?tenant=alice", bobKey, 404, "bob/c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forget.mu.Lock()
			forget.calls = nil
			forget.mu.Unlock()
			resp, body := send(t, ts, "DELETE", tt.path, "", jsonWith(tt.key))
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status == 404 {
				wantError(t, resp, body, 404, core.TypeInvalidRequest, core.CodeConversationNotFound)
			}
			forget.mu.Lock()
			calls := strings.Join(forget.calls, ",")
			forget.mu.Unlock()
			if calls != tt.call {
				t.Fatalf("Forget got %q, want %q", calls, tt.call)
			}
		})
	}
}

// TestPropsSayWhetherTheCallerMayNameTenants: a gateway learns from /props
// whether the node keeps the tenants it names apart: only with keys, and
// only for the admin key.
func TestPropsSayWhetherTheCallerMayNameTenants(t *testing.T) {
	keyed := startServer(t, newFake(), keyedConfig(nil), nil)
	open := startServer(t, newFake(), Config{}, nil)
	for _, tt := range []struct {
		name string
		ts   *httptest.Server
		key  string
		want bool
	}{
		{"admin key", keyed, adminKey, true},
		{"tenant key", keyed, aliceKey, false},
		{"no keys configured", open, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := send(t, tt.ts, "GET", "/props", "", jsonWith(tt.key))
			var p struct {
				KvwinTenants bool `json:"kvwin_tenants"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(body, &p) != nil || p.KvwinTenants != tt.want {
				t.Fatalf("%d %s, want kvwin_tenants %v", resp.StatusCode, body, tt.want)
			}
		})
	}
}
