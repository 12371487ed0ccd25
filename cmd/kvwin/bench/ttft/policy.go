package ttft

import (
	"fmt"
	"strings"
)

// Policy is a way of sending a growing conversation, as the harness
// compares them.
type Policy string

// The policies of one run. All but FullNoCache are kvwin window policies,
// sent as the X-Kvwin-Window-Policy header.
const (
	// FullNoCache resends the whole history and asks the server to
	// recompute all of it (policy full, "cache_prompt": false): the naive
	// client against a server without prefix caching.
	FullNoCache Policy = "full-nocache"
	// Full resends the whole history with prefix caching.
	Full    Policy = "full"
	Sliding Policy = "sliding"
	Sink    Policy = "sink"
	Memory  Policy = "memory"
)

// Policies returns every policy in the order a run compares them.
func Policies() []Policy {
	return []Policy{FullNoCache, Full, Sliding, Sink, Memory}
}

// ParsePolicies parses names (each may itself be a comma-separated list),
// rejecting unknown names and duplicates.
func ParsePolicies(names []string) ([]Policy, error) {
	var out []Policy
	seen := map[Policy]bool{}
	for _, list := range names {
		for name := range strings.SplitSeq(list, ",") {
			p := Policy(strings.TrimSpace(name))
			if !p.known() {
				return nil, fmt.Errorf("ttft: unknown policy %q (want some of %v)", p, Policies())
			}
			if seen[p] {
				return nil, fmt.Errorf("ttft: policy %q given twice", p)
			}
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ttft: no policy given")
	}
	return out, nil
}

func (p Policy) known() bool {
	for _, q := range Policies() {
		if p == q {
			return true
		}
	}
	return false
}

// Window is the window policy the server is asked for.
func (p Policy) Window() string {
	if p == FullNoCache {
		return string(Full)
	}
	return string(p)
}

// Cuts reports whether the policy bounds the window by the budget: a
// server runs full and full-nocache with a budget of its whole context.
func (p Policy) Cuts() bool { return p.Window() != string(Full) }

// cachePrompt is the request's cache_prompt field: false only for
// FullNoCache.
func (p Policy) cachePrompt() bool { return p != FullNoCache }
