package attention

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrSize reports a byte size ParseSize cannot read.
var ErrSize = errors.New("attention: invalid size")

// sizeUnits maps a lower-cased unit to its bytes. Units with an i, and the
// bare letters K, M, G, T, are powers of 1024: the bare letters mean what
// they mean to ls -h, free -g and nvidia-smi, and GPU memory is binary (a
// "24 GB" card has 24 GiB). Units ending in B without an i are SI, powers
// of 1000, as the standard says; for VRAM they understate the card by about
// 7%, which errs on the safe side.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// ParseSize parses a byte size such as "24GiB", "24G", "8000MiB", "512MB",
// "1.5 GiB" or "1073741824": a non-negative number, optional spaces and an
// optional unit (case-insensitive; see sizeUnits for which are binary).
// Fractions round down to a whole byte.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	switch {
	case num == "":
		return 0, fmt.Errorf("%w %q: no number", ErrSize, s)
	case !ok:
		return 0, fmt.Errorf("%w %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, K, M, G, T, kB, MB, GB or TB)", ErrSize, s, t[i:])
	}
	if !strings.Contains(num, ".") {
		// Whole numbers parse exactly, beyond float64's 53 bits.
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w %q: %w", ErrSize, s, err)
		}
		if n > math.MaxUint64/uint64(mult) {
			return 0, fmt.Errorf("%w %q: overflows 64 bits", ErrSize, s)
		}
		return n * uint64(mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %w", ErrSize, s, err)
	}
	b := f * mult
	if b >= math.MaxUint64 {
		return 0, fmt.Errorf("%w %q: overflows 64 bits", ErrSize, s)
	}
	return uint64(b), nil
}

// FormatSize renders bytes in the largest binary unit that keeps the number
// at least 1, with one decimal: "24.0 GiB", "512.0 MiB", "100 B".
func FormatSize(b uint64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if b < 1<<10 {
		return fmt.Sprintf("%d B", b)
	}
	v, u := float64(b)/(1<<10), 0
	for v >= 1<<10 && u < len(units)-1 {
		v /= 1 << 10
		u++
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
