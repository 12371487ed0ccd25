package chat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWords(t *testing.T) {
	for _, n := range []int{0, 1, 7, 200} {
		a, b := Words(3, n), Words(3, n)
		if len(a) != n || a != b {
			t.Fatalf("Words(3, %d) = %q, then %q: want %d bytes, the same twice", n, a, b, n)
		}
	}
	if Words(3, 200) == Words(4, 200) {
		t.Fatal("seeds 3 and 4 drew the same text")
	}
}

func TestDelta(t *testing.T) {
	tests := []struct {
		data, text string
		ok         bool
	}{
		{`{"choices":[{"delta":{"content":"ab"}}]}`, "ab", true},
		{`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`, "ab", true},
		{`{"choices":[{"delta":{}}]}`, "", true},
		{`{"error":{"message":"boom"}}`, "", false},
		{`not json`, "", false},
	}
	for _, tt := range tests {
		if text, ok := Delta(tt.data); text != tt.text || ok != tt.ok {
			t.Errorf("Delta(%s) = %q, %v; want %q, %v", tt.data, text, ok, tt.text, tt.ok)
		}
	}
}

// A server that closes a connection after its first request (as
// llama-server did after about 100) costs no turn: the next
// request, written into the closed connection, is sent again on a new one.
func TestPostSurvivesAClosedKeptAliveConnection(t *testing.T) {
	var served atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				b, _ := io.ReadAll(req.Body)
				served.Add(1)
				// Kept alive as far as the client knows; closed, unread,
				// once the next request starts on it.
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
				c.Read(make([]byte, 1))
			}()
		}
	}()
	hc := &http.Client{}
	body := bytes.Repeat([]byte("x"), 256<<10) // larger than the socket buffers: the write fails
	for i := range 5 {
		resp, _, err := Post(context.Background(), hc, "http://"+ln.Addr().String(), http.Header{"Content-Type": {"text/plain"}}, body)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(got, body) {
			t.Fatalf("request %d: %d bytes back", i, len(got))
		}
	}
	if n := served.Load(); n != 5 {
		t.Fatalf("served %d requests, want 5", n)
	}
}

// ReadStream skips comments (keep-alives), joins deltas, reads past
// [DONE], and names an in-stream error by its message.
func TestReadStream(t *testing.T) {
	chunk := func(s string) string { return `data: {"choices":[{"delta":{"content":"` + s + `"}}]}` + "\n\n" }
	st, err := ReadStream(strings.NewReader(": keep-alive\n: keep-alive\n"+chunk("a")+chunk("b")+"data: [DONE]\n\n"), time.Now())
	if err != nil || !st.Done || st.Text != "ab" || st.TTFT <= 0 {
		t.Fatalf("%+v, %v", st, err)
	}
	st, err = ReadStream(strings.NewReader(chunk("a")), time.Now())
	if err != nil || st.Done || st.Text != "a" {
		t.Fatalf("no [DONE]: %+v, %v", st, err)
	}
	_, err = ReadStream(strings.NewReader(chunk("a")+`data: {"error":{"message":"engine closed"}}`+"\n\n"), time.Now())
	var se *StreamError
	if !errors.As(err, &se) || err.Error() != "in-stream error: engine closed" {
		t.Fatalf("error event: %v", err)
	}
	if st, _ := ReadStream(strings.NewReader(": keep-alive\n"), time.Now()); st.TTFT != 0 {
		t.Fatalf("a comment counted as the first token: %v", st.TTFT)
	}
}
