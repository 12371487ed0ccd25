package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kvwin/engine"
)

// toolTemplateFake is a backend whose chat template renders tools.
type toolTemplateFake struct {
	*fakeBackend
	renders bool
}

func (f toolTemplateFake) TemplateTools() bool { return f.renders }

// With a backend whose template renders tools, the tools go to it as
// Request.Tools and the messages stay the client's; otherwise they are
// described in a system message, as before.
func TestToolsGoToATemplateThatRendersThem(t *testing.T) {
	body := `{"model":"tiny","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
	for _, renders := range []bool{true, false} {
		f := newFake().Script("stop", engineTimings(3, 0, 1), firstEvent(3, 0), textEvent("x"))
		s, err := New(Config{}, toolTemplateFake{f, renders}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return time.Unix(testCreated, 0) }
		ts := httptest.NewServer(s.Handler())
		resp, out := do(t, ts, http.MethodPost, chatPath, body)
		f.Release()
		ts.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		req := f.Requests()[0]
		if renders {
			tool, _ := req.Tools[0].(json.RawMessage)
			if len(req.Tools) != 1 || string(tool) != `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}` || len(req.Messages) != 1 || req.Messages[0].Role != engine.RoleUser {
				t.Fatalf("template renders tools: got tools %v, messages %+v", req.Tools, req.Messages)
			}
			continue
		}
		if req.Tools != nil || len(req.Messages) != 2 || req.Messages[0].Role != engine.RoleSystem || !strings.Contains(req.Messages[0].Content, "get_weather") {
			t.Fatalf("template does not render tools: got tools %v, messages %+v", req.Tools, req.Messages)
		}
	}
}
