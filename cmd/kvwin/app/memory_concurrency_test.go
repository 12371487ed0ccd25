package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/engine/wire"
	"kvwin/window/memory"
)

// Eight named conversations, five turns each, all at once under the memory
// window: every turn the window evicted is in the store afterwards, counted
// in the SQLite file itself once the server has stopped. (Concurrent
// ingests used to fail with SQLITE_BUSY, and those turns were not stored
// until a later request resent them.)
func TestConcurrentConversationsStoreEveryEvictedTurn(t *testing.T) {
	const convs, turns = 8, 5
	f := apptest.Flags(t)
	f.Window, f.WindowBudget, f.Slots, f.Ctx = "memory", 512, 4, 1024
	a, stop := apptest.Run(t, f)
	defer stop()

	evicted := make([]int, convs) // evicted_turns of each conversation's last turn
	errs := make(chan error, convs)
	var wg sync.WaitGroup
	for c := 0; c < convs; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			msgs := apptest.Msgs("system", "You are terse.")
			for i := 0; i < turns; i++ {
				msgs = append(msgs, apptest.Msgs("user", fmt.Sprintf("conversation %d turn %d: %s", c, i, apptest.Words(100*c+i, 150)))...)
				h, answer, err := chat(a.URL(), fmt.Sprintf("conv-%d", c), msgs)
				if err != nil {
					errs <- fmt.Errorf("conversation %d turn %d: %w", c, i, err)
					return
				}
				evicted[c] = wire.ParseWindow(h.Get(wire.HeaderWindow)).EvictedTurns
				msgs = append(msgs, apptest.Msgs("assistant", answer)...)
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// No ingest failed, and /metrics says so.
	resp, err := http.Get(a.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte("\nkvwin_memory_store_errors_total 0\n")) {
		t.Fatalf("/metrics has no kvwin_memory_store_errors_total 0:\n%s", metrics)
	}
	stop()

	st, err := memory.Open(memory.StoreConfig{Dir: filepath.Join(f.DataDir, "memory")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	total := 0
	for c := 0; c < convs; c++ {
		got, err := st.Turns(context.Background(), memory.Key{Tenant: "default", Conversation: fmt.Sprintf("conv-%d", c)})
		if err != nil {
			t.Fatal(err)
		}
		if evicted[c] == 0 {
			t.Fatalf("conversation %d evicted nothing: the budget does not exercise the store", c)
		}
		if len(got) != evicted[c] {
			t.Errorf("conversation %d: %d turns stored, its last window evicted %d", c, len(got), evicted[c])
		}
		total += len(got)
	}
	t.Logf("%d conversations stored %d evicted turns", convs, total)
}

// chat posts one greedy, short, non-streamed turn of a named conversation
// and returns the response headers and the answer's text.
func chat(base, conversation string, msgs []map[string]string) (http.Header, string, error) {
	b, _ := json.Marshal(map[string]any{"model": "kvwin-tiny", "messages": msgs, "max_tokens": 4, "temperature": 0, "seed": 1})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Conversation-Id", conversation)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var reply apptest.ChatReply
	if err := json.Unmarshal(body, &reply); err != nil || len(reply.Choices) != 1 {
		return nil, "", fmt.Errorf("reply %s: %v", body, err)
	}
	return resp.Header, reply.Choices[0].Message.Content, nil
}
