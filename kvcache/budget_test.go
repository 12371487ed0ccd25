package kvcache

import (
	"errors"
	"testing"
)

func TestBudgetCapacityBlocks(t *testing.T) {
	// Bytes per token of the test model's shape: 2 · 4 layers · 2 KV heads ·
	// 64 head dim · 2 bytes (F16) = 2,048.
	const bpt = 2 * 4 * 2 * 64 * 2
	for _, tc := range []struct {
		name  string
		b     Budget
		block int
		want  int
		err   error
	}{
		{"configured count wins", Budget{Blocks: 777, Context: 2048, Slots: 2}, 16, 777, nil},
		{"context × slots", Budget{Context: 2048, Slots: 2}, 16, 256, nil},
		{"partial block does not count", Budget{Context: 100, Slots: 1}, 16, 6, nil},
		{"capped by KV bytes", Budget{Context: 8192, Slots: 4, BytesPerToken: bpt, MaxBytes: 8 << 20}, 16, 256, nil},
		{"cap above need changes nothing", Budget{Context: 2048, Slots: 2, BytesPerToken: bpt, MaxBytes: 1 << 30}, 16, 256, nil},
		{"bytes alone", Budget{BytesPerToken: bpt, MaxBytes: 4 << 20}, 64, 32, nil},
		{"nothing", Budget{}, 16, 0, ErrInvalidConfig},
		{"cap without bytes per token", Budget{Context: 10, Slots: 1, MaxBytes: 100}, 16, 0, ErrInvalidConfig},
		{"negative", Budget{Context: -1, Slots: 1}, 16, 0, ErrInvalidConfig},
		{"zero block", Budget{Context: 64, Slots: 1}, 0, 0, ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.b.CapacityBlocks(tc.block)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Fatalf("capacity %d, want %d", got, tc.want)
			}
		})
	}
}
