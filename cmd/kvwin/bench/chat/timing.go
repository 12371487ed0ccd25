package chat

import (
	"fmt"
	"strconv"
	"strings"
)

// PhaseOrder is the order a turn's Server-Timing phases happen in (kvwin's
// core.PhaseNames), the order benches print them in.
var PhaseOrder = []string{"read", "window", "render", "tokenize", "queue", "prefill", "first_token", "decode", "total"}

// ServerTiming reads a Server-Timing header's durations by metric name
// (`name;dur=1.23, other;dur=4`); metrics without a duration are left out.
func ServerTiming(v string) map[string]float64 {
	out := map[string]float64{}
	for _, metric := range strings.Split(v, ",") {
		params := strings.Split(metric, ";")
		name := strings.TrimSpace(params[0])
		if name == "" {
			continue
		}
		for _, p := range params[1:] {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "dur") {
				continue
			}
			if d, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64); err == nil {
				out[name] = d
			}
		}
	}
	return out
}

// PhaseText is the phases of p in PhaseOrder, as " | read 0.05 window
// 0.08 …" for a progress line; empty without phases.
func PhaseText(p map[string]float64) string {
	if len(p) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" |")
	for _, name := range PhaseOrder {
		if d, ok := p[name]; ok {
			fmt.Fprintf(&b, " %s %.2f", name, d)
		}
	}
	return b.String()
}
