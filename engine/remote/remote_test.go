package remote

import (
	"strings"
	"testing"
)

func TestStatusText(t *testing.T) {
	for _, tc := range []struct {
		typ, msg, want string
	}{
		{"", "", "llamaserver: POST u: 503 Service Unavailable"},
		{"t_x", "", "llamaserver: POST u: 503 Service Unavailable (t_x)"},
		{"", "m", "llamaserver: POST u: 503 Service Unavailable: m"},
		{"t_x", "m", "llamaserver: POST u: 503 Service Unavailable (t_x): m"},
	} {
		if got := StatusText("llamaserver", "POST u", 503, tc.typ, tc.msg); got != tc.want {
			t.Errorf("StatusText(%q, %q) = %q, want %q", tc.typ, tc.msg, got, tc.want)
		}
	}
}

func TestClientMessage(t *testing.T) {
	const tail = "; the gateway's log has its message under this request's X-Request-Id"
	for _, tc := range []struct {
		typ, want string
	}{
		{"", "the backend answered 400 Bad Request" + tail},
		{"exceed_context_size_error", "the backend answered 400 Bad Request (exceed_context_size_error)" + tail},
		{"Not An Identifier", "the backend answered 400 Bad Request" + tail},
		{strings.Repeat("a", 41), "the backend answered 400 Bad Request" + tail},
	} {
		if got := ClientMessage(400, tc.typ); got != tc.want {
			t.Errorf("ClientMessage(%q) = %q, want %q", tc.typ, got, tc.want)
		}
	}
}

func TestSnippet(t *testing.T) {
	long := strings.Repeat("x", MaxErrorText-1) + "é" // the last character cut in two
	for _, tc := range []struct {
		name, body, want string
	}{
		{"trimmed", "  <html>  \n", "<html>"},
		{"at the bound", strings.Repeat("y", MaxErrorText), strings.Repeat("y", MaxErrorText)},
		{"cut", long, strings.Repeat("x", MaxErrorText-1) + "\uFFFD…"},
		{"invalid", "a\xffb", "a\uFFFDb"},
	} {
		if got := Snippet([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: Snippet = %q, want %q", tc.name, got, tc.want)
		}
	}
}
