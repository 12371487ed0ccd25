package route

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// countingProxy stands between the bench's gateway and one backend and
// sums what the backend says it computed: timings.prompt_n of the final
// object of every /completion answer (streamed or not), the count every
// llama-server build and kvwin node reports, whatever the gateway makes of
// it. Everything else passes through unchanged.
type countingProxy struct {
	url      string
	srv      *http.Server
	done     chan struct{}
	computed atomic.Int64 // prompt tokens computed, summed over answers
	answers  atomic.Int64 // /completion answers with a final object
}

// startCountingProxy proxies target on a free loopback port until ctx
// ends or stop is called.
func startCountingProxy(ctx context.Context, target string) (*countingProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // streams pass at once: the gateway times first tokens
	// A connection per request: the June 2025 build closes a keep-alive
	// connection after a few requests, and a request written into one it
	// is closing fails (broken pipe) and would take the backend for down.
	rp.Transport = &http.Transport{DisableKeepAlives: true, Proxy: nil}
	direct := rp.Director
	rp.Director = func(req *http.Request) {
		direct(req)
		// As the adapter's own requests are: replayable, so a request
		// sent on a keep-alive connection the server had just closed is
		// sent again instead of failing (and the backend being taken for
		// down).
		if req.Body != nil && req.Body != http.NoBody {
			data, err := io.ReadAll(req.Body)
			req.Body.Close()
			if err == nil {
				req.Body = io.NopCloser(bytes.NewReader(data))
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
				req.ContentLength = int64(len(data))
			}
		}
		req.Header["X-Idempotency-Key"] = nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		fmt.Fprintf(os.Stderr, "\nproxy to %s: %s %s: %v\n", target, r.Method, r.URL.Path, err)
		w.WriteHeader(http.StatusBadGateway)
	}
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path == "/completion" && resp.StatusCode == http.StatusOK {
			resp.Body = &countingBody{rc: resp.Body, p: p}
		}
		return nil
	}
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln) // http.ErrServerClosed once stopped
	}()
	return p, nil
}

// stop closes the proxy and waits for it.
func (p *countingProxy) stop() {
	_ = p.srv.Close()
	<-p.done
}

// countingBody passes a /completion answer through, scanning it for the
// final object's timings.prompt_n.
type countingBody struct {
	rc   io.ReadCloser
	p    *countingProxy
	mu   sync.Mutex
	buf  bytes.Buffer // the answer's bytes not yet scanned as lines
	seen bool         // the final object was counted
}

func (b *countingBody) Read(out []byte) (int, error) {
	n, err := b.rc.Read(out)
	b.mu.Lock()
	b.buf.Write(out[:n])
	b.scan(err != nil)
	b.mu.Unlock()
	return n, err
}

func (b *countingBody) Close() error { return b.rc.Close() }

// scan counts the final object among the complete lines buffered (all of
// them at the end of the body: a whole JSON answer has no newline to end
// it).
func (b *countingBody) scan(end bool) {
	for {
		data := b.buf.Bytes()
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if end && len(data) > 0 {
				b.count(data)
				b.buf.Reset()
			}
			return
		}
		b.count(data[:i])
		b.buf.Next(i + 1)
	}
}

// count reads one line: an SSE data line or a JSON answer.
func (b *countingBody) count(line []byte) {
	line = bytes.TrimSpace(line)
	line = bytes.TrimPrefix(line, []byte("data:"))
	line = bytes.TrimSpace(line)
	if b.seen || len(line) == 0 || line[0] != '{' || !strings.Contains(string(line), `"stop"`) {
		return
	}
	var c struct {
		Stop    bool `json:"stop"`
		Timings *struct {
			PromptN int `json:"prompt_n"`
		} `json:"timings"`
	}
	if json.Unmarshal(line, &c) != nil || !c.Stop || c.Timings == nil {
		return
	}
	b.seen = true
	b.p.computed.Add(int64(c.Timings.PromptN))
	b.p.answers.Add(1)
}
