package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go"
	oopt "github.com/openai/openai-go/option"
	oai3 "github.com/openai/openai-go/v3"
	oopt3 "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// keepAliveWatch is an http.RoundTripper that closes seen once the bodies
// it carried held n keep-alives (SSE comments or Anthropic's pings).
type keepAliveWatch struct {
	n    int
	mu   sync.Mutex
	got  int
	once sync.Once
	seen chan struct{}
}

func (w *keepAliveWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = watchedBody{ReadCloser: resp.Body, w: w}
	}
	return resp, err
}

type watchedBody struct {
	io.ReadCloser
	w *keepAliveWatch
}

func (b watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	k := bytes.Count(p[:n], []byte(": keep-alive\n")) + bytes.Count(p[:n], []byte("event: ping\n"))
	b.w.mu.Lock()
	b.w.got += k
	if b.w.got >= b.w.n {
		b.w.once.Do(func() { close(b.w.seen) })
	}
	b.w.mu.Unlock()
	return n, err
}

// TestSDKsReadKeepAlives: the official SDKs (openai-go v1 and v3,
// anthropic-sdk-go v2) read a stream that opened and kept alive while the
// engine's only slot was held, then answered: the keep-alives break no
// decoder (openai-go v1 fails on an SSE comment followed by a blank line).
func TestSDKsReadKeepAlives(t *testing.T) {
	a := apptest.Start(t, func(f *app.Config) { f.Slots, f.Ctx, f.StreamKeepAlive = 1, 4096, 10*time.Millisecond })
	sdks := []struct {
		name   string
		stream func(ctx context.Context, hc *http.Client) (text string, err error)
	}{
		{"openai-go v1 chat", func(ctx context.Context, hc *http.Client) (string, error) {
			c := openai.NewClient(oopt.WithBaseURL(a.URL()+"/v1/"), oopt.WithAPIKey("unused"), oopt.WithHTTPClient(hc), oopt.WithMaxRetries(0))
			s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "kvwin-tiny", MaxTokens: openai.Int(4),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
			var text string
			for s.Next() {
				for _, ch := range s.Current().Choices {
					text += ch.Delta.Content
				}
			}
			return text, s.Err()
		}},
		{"openai-go v3 responses", func(ctx context.Context, hc *http.Client) (string, error) {
			c := oai3.NewClient(oopt3.WithBaseURL(a.URL()+"/v1/"), oopt3.WithAPIKey("unused"), oopt3.WithHTTPClient(hc), oopt3.WithMaxRetries(0))
			s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "kvwin-tiny", MaxOutputTokens: oai3.Int(16), Input: textInput("hi")})
			var text string
			for s.Next() {
				text += s.Current().Delta
			}
			return text, s.Err()
		}},
		{"anthropic-sdk-go v2 messages", func(ctx context.Context, hc *http.Client) (string, error) {
			c := anthropic.NewClient(aopt.WithBaseURL(a.URL()+"/"), aopt.WithAPIKey("unused"), aopt.WithHTTPClient(hc), aopt.WithMaxRetries(0))
			s := c.Messages.NewStreaming(ctx, greeting(4))
			var msg anthropic.Message
			for s.Next() {
				if err := msg.Accumulate(s.Current()); err != nil {
					return "", err
				}
			}
			return textOf(&msg), s.Err()
		}},
	}
	for _, sdk := range sdks {
		t.Run(sdk.name, func(t *testing.T) {
			cancelHog, hogDone := streamUntilFirstChunk(t, a) // holds the only slot
			defer func() { cancelHog(); <-hogDone }()
			w := &keepAliveWatch{n: 3, seen: make(chan struct{})}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			go func() {
				select {
				case <-w.seen:
					cancelHog() // the slot frees: the first token comes
				case <-ctx.Done():
				}
			}()
			text, err := sdk.stream(ctx, &http.Client{Transport: w})
			if err != nil || text == "" {
				t.Fatalf("text %q, err %v", text, err)
			}
			select {
			case <-w.seen:
			default:
				t.Fatal("the answer came without keep-alives before it")
			}
		})
	}
}
