package app_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// liveDialect is one streaming route as a client sees it line by line:
// what the first line of its opening is, how many keep-alives the opening
// itself holds, which lines are keep-alives and which mean a first token.
type liveDialect struct {
	name, path, body string
	opening          string // the stream's first line
	openingKeeps     int    // keep-alive lines within the opening
	keep, token      func(line string) bool
}

func liveDialects(ask string) []liveDialect {
	msgs := `"messages":[{"role":"user","content":"` + ask + `"}]`
	comment := func(l string) bool { return l == ": keep-alive" }
	data := func(l string) bool { return strings.HasPrefix(l, "data: ") }
	event := func(skip ...string) func(string) bool {
		return func(l string) bool {
			name, ok := strings.CutPrefix(l, "event: ")
			return ok && !strings.Contains(" "+strings.Join(skip, " ")+" ", " "+name+" ")
		}
	}
	empty := func(l string) bool {
		return strings.Contains(l, `"done":false`) && (strings.Contains(l, `"content":""`) || strings.Contains(l, `"response":""`))
	}
	ndjson := func(l string) bool { return l != "" && !empty(l) }
	return []liveDialect{
		{"chat", "/v1/chat/completions", `{"model":"kvwin-tiny",` + msgs + `,"max_tokens":4,"stream":true}`, ": keep-alive", 1, comment, data},
		{"completions", "/v1/completions", `{"prompt":"` + ask + `","max_tokens":4,"stream":true}`, ": keep-alive", 1, comment, data},
		{"responses", "/v1/responses", `{"model":"kvwin-tiny","input":"` + ask + `","max_output_tokens":16,"stream":true,"store":false}`,
			"event: response.created", 0, comment, event("response.created", "response.in_progress")},
		{"messages", "/v1/messages", `{"model":"kvwin-tiny","max_tokens":4,"stream":true,` + msgs + `}`,
			"event: message_start", 1, func(l string) bool { return l == "event: ping" }, event("message_start", "ping")},
		{"ollama chat", "/api/chat", `{"model":"kvwin-tiny",` + msgs + `,"options":{"num_predict":4}}`, `{"model":"kvwin-tiny"`, 1, empty, ndjson},
		{"ollama generate", "/api/generate", `{"model":"kvwin-tiny","prompt":"` + ask + `","options":{"num_predict":4}}`, `{"model":"kvwin-tiny"`, 1, empty, ndjson},
		{"node completion", "/completion", `{"prompt":"` + ask + `","n_predict":4,"stream":true}`, ": keep-alive", 1, comment, data},
	}
}

// TestStreamOpensAndKeepsAliveWhileQueued: with the engine's only slot held
// by another request and a small keep-alive interval, a streamed request
// of every dialect receives its status, its opening and at least two
// keep-alives before its first token, and then its answer; a request the
// window refuses still gets its 400 status. No time is asserted: the held
// slot is what keeps the first token away.
func TestStreamOpensAndKeepsAliveWhileQueued(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.StreamKeepAlive = 1, 4096, 10*time.Millisecond })
	for i, d := range liveDialects("hello there") {
		t.Run(d.name, func(t *testing.T) {
			cancelHog, hogDone := streamUntilFirstChunk(t, a) // holds the only slot
			defer func() { cancelHog(); <-hogDone }()

			too := liveDialects(apptest.Words(i, 6000))[i] // over the context: the window refuses it
			if resp := postStream(t, a.URL()+too.path, too.body); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("a prompt over the window: status %d, want 400", resp.StatusCode)
			}

			resp := postStream(t, a.URL()+d.path, d.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			opened, keeps := false, 0
			for !opened || keeps < d.openingKeeps+2 {
				line := nextLine(t, sc)
				switch {
				case line == "":
				case !opened && !strings.HasPrefix(line, d.opening):
					t.Fatalf("the stream opens with %q, want %q", line, d.opening)
				case d.keep(line):
					opened, keeps = true, keeps+1
				case !opened:
					opened = true
				case d.token(line):
					t.Fatalf("a first token (%q) while the slot is held", line)
				}
			}
			cancelHog()
			<-hogDone
			for line := nextLine(t, sc); !d.token(line) || d.keep(line); line = nextLine(t, sc) {
			}
		})
	}
}

// postStream posts body and returns the response once its headers came;
// a generous deadline guards against a hang.
func postStream(t *testing.T, url, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// nextLine is the stream's next line; the stream ending is a failure.
func nextLine(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("the stream ended: %v", sc.Err())
	}
	return sc.Text()
}
