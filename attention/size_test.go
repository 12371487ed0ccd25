package attention

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"24GiB", 24 << 30, true},
		{"24G", 24 << 30, true},
		{"24Gi", 24 << 30, true},
		{"24 GiB", 24 << 30, true},
		{" 24gib ", 24 << 30, true},
		{"8000MiB", 8000 << 20, true},
		{"512MB", 512_000_000, true},
		{"24GB", 24_000_000_000, true},
		{"1.5GiB", 3 << 29, true},
		{"0.5K", 512, true},
		{"1kB", 1000, true},
		{"2T", 2 << 40, true},
		{"1TB", 1e12, true},
		{"1073741824", 1 << 30, true},
		{"100B", 100, true},
		{"1.9B", 1, true}, // fractions of a byte round down
		{"18446744073709551615", 1<<64 - 1, true},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1GiB", 0, false},
		{"24XB", 0, false},
		{"24 G B", 0, false},
		{"1.2.3G", 0, false},
		{".G", 0, false},
		{"1e9", 0, false},
		{"16777216TiB", 0, false}, // 2^64 bytes
		{"18446744073709551616", 0, false},
		{"17179869184.5GiB", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.ok && (err != nil || got != tc.want) {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			if !tc.ok && !errors.Is(err, ErrSize) {
				t.Fatalf("ParseSize(%q) = %d, %v; want ErrSize", tc.in, got, err)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{131072, "128.0 KiB"},
		{512 << 20, "512.0 MiB"},
		{24 << 30, "24.0 GiB"},
		{3 << 29, "1.5 GiB"},
		{1<<64 - 1, "16.0 EiB"},
	}
	for _, tc := range tests {
		if got := FormatSize(tc.in); got != tc.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
