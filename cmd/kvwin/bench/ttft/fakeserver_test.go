package ttft

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// fakeServer speaks the part of kvwin's chat API the runner uses: a
// streamed chat completion with the X-Kvwin-* headers, an OpenAI error for
// a window policy it does not know, and the window header for the policies
// it does. It records every request.
type fakeServer struct {
	policies   []string // known policies; others get 400
	noWindow   bool     // never send X-Kvwin-Window (a server without the window layer)
	stepsAt    []int    // requests (1-based) at which the step count grows
	failStream int      // request at which the stream carries an error, 0 for none

	mu       sync.Mutex
	requests []fakeRequest
	prev     []Message // the previous request's messages, for the cached count
	step     int
}

type fakeRequest struct {
	policy string
	body   chatBody
	raw    map[string]any
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var req fakeRequest
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.Unmarshal(raw, &req.body)
	_ = json.Unmarshal(raw, &req.raw)
	req.policy = r.Header.Get(headerPolicy)
	f.requests = append(f.requests, req)
	n := len(f.requests)
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, "wrong route", http.StatusNotFound)
		return
	}
	if !slices.Contains(f.policies, req.policy) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"unknown window policy %q","type":"invalid_request_error","code":"invalid_value"}}`, req.policy)
		return
	}
	count, _ := ChatMLCounter(1)
	prompt := count(req.body.Messages)
	cached := 0
	if req.body.CachePrompt && len(f.prev) > 0 && len(f.prev) <= len(req.body.Messages) &&
		slices.Equal(f.prev, req.body.Messages[:len(f.prev)]) {
		cached = count(f.prev) - 11 // all but the previous generation prompt
	}
	f.prev = req.body.Messages
	if slices.Contains(f.stepsAt, n) {
		f.step++
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set(headerPromptTokens, strconv.Itoa(prompt))
	h.Set(headerCachedTokens, strconv.Itoa(cached))
	h.Set(headerPromptMs, strconv.FormatFloat(0.25*float64(prompt-cached), 'f', 3, 64))
	if !f.noWindow {
		h.Set(headerWindow, fmt.Sprintf("policy=%s; kept_tokens=%d; evicted_turns=0; packet_turns=0; step=%d", req.policy, prompt, f.step))
	}
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
	if n == f.failStream {
		fmt.Fprint(w, "data: {\"error\":{\"message\":\"engine closed\"}}\n\n")
		return
	}
	for range 2 {
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"xy\"}}]}\n\n")
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
}

func (f *fakeServer) recorded(t *testing.T) []fakeRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}
