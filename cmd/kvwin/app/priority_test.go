package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// Keys of the priority test's tenants.
const (
	prioHoldKey  = "hold-key-0123456789"
	prioBulkKey  = "bulk-key-0123456789"
	prioAliceKey = "alice-key-0123456789"
	prioCarolKey = "carol-key-0123456789"
	prioAdminKey = "admin-key-0123456789"
)

// TestQueueOrderThroughServe: through a real kvwin serve with one slot, a
// tenant's request holds the slot while bulk (a batch key) queues two
// requests, then alice three and carol one (interactive keys), in that
// order. When the slot frees, the order the rest start in is the queue's:
// with --queue-order fair interactive goes first and carol's one request
// takes its turn after alice's first (deficit round-robin over tokens:
// each request costs its prompt and 1,500 tokens, more than a round's
// quantum of 1,024, so the first round credits nobody enough and alice,
// first in the ring, is served in the second; carol is next when alice's
// remaining credit does not cover her next request), then batch (with one
// slot no slot is reserved for interactive requests, so batch goes once no
// interactive request waits); with fifo, arrival order. The order is read
// from the first tokens, one at a time (each client leaves at its first
// token, freeing the slot).
func TestQueueOrderThroughServe(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys")
	lines := "hold=" + prioHoldKey + "\nbulk=" + prioBulkKey + " class=batch\nalice=" + prioAliceKey + "\ncarol=" + prioCarolKey + "\n"
	if err := os.WriteFile(keys, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	queued := []string{prioBulkKey, prioBulkKey, prioAliceKey, prioAliceKey, prioAliceKey, prioCarolKey}
	for _, tt := range []struct{ order, want string }{
		{app.QueueFair, "alice carol alice alice bulk bulk"},
		{app.QueueFIFO, "bulk bulk alice alice alice carol"},
	} {
		t.Run(tt.order, func(t *testing.T) {
			a := apptest.Start(t, func(f *app.Config) {
				// The context fits the holding request's long answer.
				f.Slots, f.Ctx, f.APIKeyFile, f.AdminKey, f.QueueOrder = 1, holdTokens+512, keys, prioAdminKey, tt.order
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard, not a measure
			defer cancel()
			holdStarted := make(chan string, 1)
			hold := firstToken(ctx, t, a, prioHoldKey, 0, holdTokens, true, holdStarted)
			select {
			case <-holdStarted:
			case <-ctx.Done():
				t.Fatal("the holding request got no first token")
			}
			starts := make(chan string, len(queued))
			for i, key := range queued {
				firstToken(ctx, t, a, key, i+1, 1500, false, starts)
				waitForWaiting(ctx, t, a, i+1)
			}
			hold() // the slot frees: the queue's order decides
			var got []string
			for range queued {
				select {
				case who := <-starts:
					got = append(got, who)
				case <-ctx.Done():
					t.Fatalf("started %v, then nothing", got)
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("started in the order %v, want %s", got, tt.want)
			}
		})
	}
}

// holdTokens is the holding request's answer: the test model writes a few
// thousand tokens a second, so the slot stays held until the test lets it
// go (it cancels the request), however slowly the others queue.
const holdTokens = 30000

// firstToken starts a streamed chat of key's tenant that may run to
// maxTokens (ignore_eos: the model's end of text frees no slot early). At
// its first token it sends its tenant on started, then leaves, freeing its
// slot (unless hold: then it reads on until stop): it sends before it
// leaves, so the order on started is the order requests took the one
// slot. stop leaves early.
func firstToken(ctx context.Context, t *testing.T, a *app.App, key string, seed, maxTokens int, hold bool, started chan<- string) (stop func()) {
	t.Helper()
	ctx, stop = context.WithCancel(ctx)
	body, _ := json.Marshal(map[string]any{"stream": true, "max_tokens": maxTokens, "temperature": 0, "ignore_eos": true,
		"messages": []map[string]string{{"role": "user", "content": apptest.Words(seed, 12)}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL()+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	tenant := strings.Split(key, "-")[0]
	go func() {
		defer stop()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("%s: %d %s", tenant, resp.StatusCode, b)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				started <- tenant
				break
			}
		}
		if hold {
			io.Copy(io.Discard, resp.Body) // until stop
		}
	}()
	return stop
}

// waitForWaiting waits until the engine has n requests waiting for its
// slot (vllm:num_requests_waiting), polling /metrics with the admin key.
func waitForWaiting(ctx context.Context, t *testing.T, a *app.App, n int) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+prioAdminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("waiting for %d queued requests: %v", n, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "vllm:num_requests_waiting{") {
				if v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64); int(v) >= n {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d requests never waited", n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
