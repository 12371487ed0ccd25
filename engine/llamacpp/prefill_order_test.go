package llamacpp

import (
	"slices"
	"testing"

	"kvwin/engine"
	"kvwin/engine/queue"
)

// TestPrefillOrder: a prefill step's room goes to the slots serving
// interactive requests first, then to batch ones, each in slot order;
// idle slots get none.
func TestPrefillOrder(t *testing.T) {
	serving := func(c queue.Class) *slot { return &slot{task: &task{req: engine.Request{Class: c}}} }
	idle := &slot{}
	tests := []struct {
		name  string
		slots []*slot
		want  []int
	}{
		{"batch in the lower slot, interactive above it", []*slot{serving(queue.Batch), serving(queue.Interactive)}, []int{1, 0}},
		{"interactive ones keep slot order, idle skipped", []*slot{serving(queue.Interactive), idle, serving(queue.Batch), serving(queue.Interactive)}, []int{0, 3, 2}},
		{"one class: slot order", []*slot{serving(queue.Batch), serving(queue.Batch)}, []int{0, 1}},
		{"all idle", []*slot{idle, idle}, []int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := prefillOrder(tt.slots); !slices.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}
