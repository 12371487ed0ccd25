package web

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// waitFor fails the test if ch is not closed within a generous deadline.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(3 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestClientDisconnectCancelsBackend: a client that leaves, mid-stream or
// while waiting for a non-streamed answer, cancels the backend's context,
// and a StreamFunc called after that returns an error.
func TestClientDisconnectCancelsBackend(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		body   string
		stream bool
	}{
		{"chat mid-stream", chatPath, `{"stream":true,` + hi + `}`, true},
		{"completions mid-stream", completionPath, `{"stream":true,"prompt":"p"}`, true},
		{"chat waiting", chatPath, `{` + hi + `}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.Events = []engine.Event{firstEvent(3, 0), textEvent("Hello")}
			f.Block = true
			ts := startServer(t, f, Config{}, nil)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			got := make(chan error, 1)
			go func() {
				resp, err := ts.Client().Do(req)
				if err != nil {
					got <- err
					return
				}
				defer resp.Body.Close()
				if !tt.stream {
					got <- nil // not reached: the backend never answers
					return
				}
				// Read until the generated text has arrived, then leave.
				r := bufio.NewReader(resp.Body)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						got <- err
						return
					}
					if strings.Contains(line, "Hello") {
						got <- nil
						return
					}
				}
			}()

			if tt.stream {
				select {
				case err := <-got:
					if err != nil {
						t.Fatalf("reading the stream: %v", err)
					}
				case <-time.After(3 * time.Minute):
					t.Fatal("timed out waiting for the first text chunk")
				}
			} else {
				waitFor(t, f.Started, "the backend to start")
			}
			cancel()
			waitFor(t, f.Cancelled, "the backend to see its context cancelled")
			if tt.stream {
				select {
				case err := <-f.LateErr:
					if err == nil {
						t.Error("the StreamFunc accepted an event after the client left")
					}
				case <-time.After(3 * time.Minute):
					t.Fatal("timed out waiting for the late event")
				}
			} else if err := <-got; !errors.Is(err, context.Canceled) {
				t.Errorf("client got %v, want context.Canceled", err)
			}
		})
	}
}

// TestErrorAfterFirstEvent: an error once the stream has started is sent
// in-stream, and the stream ends without [DONE].
func TestErrorAfterFirstEvent(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unavailable", engine.ErrUnavailable, `{"error":{"message":"backend unavailable","type":"server_error","code":"backend_unavailable"}}`},
		{"context length", &engine.ContextLengthError{PromptTokens: 9, Limit: 8},
			`{"error":{"message":"this model's context per slot is 8 tokens, but the prompt has 9 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`},
		{"other", errors.New("gpu fell off"), `{"error":{"message":"gpu fell off","type":"server_error","code":"internal_error"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.Events = []engine.Event{firstEvent(3, 1), textEvent("Hi")}
			f.ErrAfter = tt.err
			ts := startServer(t, f, Config{}, nil)
			resp, got := do(t, ts, http.MethodPost, chatPath, `{"stream":true,`+hi+`}`)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status = %d, want 200 (sent before the error)", resp.StatusCode)
			}
			want := sse(chunkHead+`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`) +
				sse(chunkHead+`"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`) +
				sse(tt.want)
			if string(got) != want {
				t.Errorf("stream =\n%s\nwant\n%s", got, want)
			}
			if resp.Trailer.Get(HeaderCachedTokens) != "1" {
				t.Errorf("trailer %s = %q, want 1", HeaderCachedTokens, resp.Trailer.Get(HeaderCachedTokens))
			}
		})
	}
}
