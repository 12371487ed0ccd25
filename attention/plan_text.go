package attention

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteText renders the plan as the aligned text `kvwin gguf inspect`
// prints after the model's shape. It returns the first write error.
func (p Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "vram           %s, %d slot(s), %s KV cache\n", FormatSize(p.VRAM), p.Slots, p.CacheType)
	how := "as given"
	if p.WeightEstimated {
		how = "estimated from params and file type"
	}
	fmt.Fprintf(&b, "weights        %s (%.2f bits/weight, %s)\n", FormatSize(p.WeightBytes), p.BitsPerWeight, how)
	fmt.Fprintf(&b, "reserve        %s (runtime, logits and activations of a 512-token batch; assumes flash attention)\n", FormatSize(p.ReserveBytes))
	if !p.Fits {
		fmt.Fprintf(&b, "kv cache       none: weights and reserve need %s, more than the VRAM\n", FormatSize(p.WeightBytes+p.ReserveBytes))
	} else {
		fmt.Fprintf(&b, "kv cache       %s = %s tokens at %s/token\n", FormatSize(p.KVBytes), group(p.TokensTotal), FormatSize(uint64(p.KVBytesPerToken)))
		fmt.Fprintf(&b, "per slot       %s tokens", group(p.TokensPerSlot))
		switch {
		case p.TrainedContext > 0 && p.UsablePerSlot < p.TokensPerSlot:
			fmt.Fprintf(&b, " (trained context %s: usable %s)", group(p.TrainedContext), group(p.UsablePerSlot))
		case p.TrainedContext > 0:
			fmt.Fprintf(&b, " (trained context %s)", group(p.TrainedContext))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "crossover      %s tokens (prefill from empty: attention FLOPs = weights FLOPs)\n", group(p.Crossover))
	b.WriteString("prefill from an empty cache:\n")
	b.WriteString("        tokens         FLOPs  attention")
	timed := len(p.Prefill) > 0 && p.Prefill[0].Seconds > 0
	if timed {
		b.WriteString("   at the given FLOP/s")
	}
	b.WriteString("\n")
	for _, pt := range p.Prefill {
		fmt.Fprintf(&b, "    %10s  %12.3g  %8.1f%%", group(pt.Tokens), pt.FLOPs, 100*pt.AttentionShare)
		if timed {
			fmt.Fprintf(&b, "   %10.3g s", pt.Seconds)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// group writes n with thousands separators: 131072 → "131,072".
func group(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
