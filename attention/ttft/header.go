package ttft

import (
	"strconv"
	"strings"
)

// Response headers the runner reads (DESIGN.md, "HTTP").
const (
	headerPolicy       = "X-Kvwin-Window-Policy" // request: the policy of this request
	headerWindow       = "X-Kvwin-Window"
	headerPromptTokens = "X-Kvwin-Prompt-Tokens"
	headerCachedTokens = "X-Kvwin-Cached-Tokens"
	headerPromptMs     = "X-Kvwin-Prompt-Ms"
)

// WindowState is the X-Kvwin-Window response header:
// "policy=P; kept_tokens=N; evicted_turns=N; packet_turns=N; step=N".
type WindowState struct {
	// Present is false when the response had no such header: a server
	// without the window layer, which sends everything (step 0).
	Present      bool
	Policy       string
	KeptTokens   int
	EvictedTurns int
	PacketTurns  int
	// Step counts the conversation's eviction steps so far.
	Step int
}

// ParseWindowState parses the header value leniently, since it is read
// from servers of other versions: fields may come in any order, separated
// by ";" or ",", with or without spaces; unknown fields and values that are
// not numbers are ignored (a field left out reads as 0). An empty value is
// an absent header.
func ParseWindowState(v string) WindowState {
	var w WindowState
	if strings.TrimSpace(v) == "" {
		return w
	}
	w.Present = true
	fields := strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' })
	for _, f := range fields {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if key == "policy" {
			w.Policy = val
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil {
			continue
		}
		switch key {
		case "kept_tokens":
			w.KeptTokens = n
		case "evicted_turns":
			w.EvictedTurns = n
		case "packet_turns":
			w.PacketTurns = n
		case "step":
			w.Step = n
		}
	}
	return w
}
