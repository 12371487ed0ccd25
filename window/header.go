package window

import "fmt"

// Header formats the X-Kvwin-Window response header:
// "policy=P; kept_tokens=N; evicted_turns=N; packet_turns=N; step=N".
func (r Result) Header() string {
	return fmt.Sprintf("policy=%s; kept_tokens=%d; evicted_turns=%d; packet_turns=%d; step=%d",
		r.Policy, r.KeptTokens, r.Evicted(), r.PacketTurns, r.Step)
}
