package web

import (
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"kvwin/web/core"
)

// trafficSize is how many recent generations the server remembers for
// GET /kvwin/v1/traffic (the dashboard's chart and conversation list).
const trafficSize = 256

// TrafficTurn is one finished generation as the dashboard shows it.
type TrafficTurn struct {
	Time         time.Time `json:"time"`
	Route        string    `json:"route"`
	Model        string    `json:"model"`
	Backend      string    `json:"backend"`
	Tenant       string    `json:"tenant"`
	Conversation string    `json:"conversation,omitempty"`
	Stream       bool      `json:"stream"`
	PromptTokens int       `json:"prompt_tokens"`
	CachedTokens int       `json:"cached_tokens"`
	Generated    int       `json:"generated_tokens"`
	TTFTSeconds  float64   `json:"ttft_seconds"`
	Seconds      float64   `json:"seconds"`
	Error        string    `json:"error,omitempty"`
	// Window is the chat's window layout; nil for requests without one.
	Window *core.WindowLayout `json:"window,omitempty"`
}

// traffic is a ring of the latest turns. Safe for concurrent use; reads
// return copies.
type traffic struct {
	mu    sync.Mutex
	turns []TrafficTurn
	next  int
	full  bool
}

func newTraffic() *traffic { return &traffic{turns: make([]TrafficTurn, trafficSize)} }

func (t *traffic) add(turn TrafficTurn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.turns[t.next] = turn
	t.next = (t.next + 1) % len(t.turns)
	t.full = t.full || t.next == 0
}

// recent returns the turns oldest first.
func (t *traffic) recent() []TrafficTurn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]TrafficTurn{}, t.turns[:t.next]...)
	}
	return append(append([]TrafficTurn{}, t.turns[t.next:]...), t.turns[:t.next]...)
}

// serveTraffic serves GET /kvwin/v1/traffic: the latest generations,
// oldest first.
func (s *Server) serveTraffic(c *gin.Context) {
	core.WriteJSON(c.Writer, http.StatusOK, map[string]any{"turns": s.traffic.recent()})
}
