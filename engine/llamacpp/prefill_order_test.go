package llamacpp

import (
	"slices"
	"testing"

	"github.com/ollama/ollama/llama"

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

// TestInteractivePrefillStepCarriesNoBatchPrompt: a prefill step that
// carries an interactive prompt's chunk carries no batch prompt's, even
// with room left, so the interactive prompt's last chunk does not wait for
// batch tokens; without an interactive prompt, batch prompts fill the room.
func TestInteractivePrefillStepCarriesNoBatchPrompt(t *testing.T) {
	b, err := llama.NewBatch(128, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	prefilling := func(c queue.Class, n int) *slot {
		return &slot{task: &task{req: engine.Request{Class: c}, prompt: make([]int, n), pending: -1}}
	}
	tests := []struct {
		name  string
		slots []*slot
		want  []int // tokens each entry of the step adds, in order
	}{
		{"interactive ends with room left", []*slot{prefilling(queue.Batch, 500), prefilling(queue.Interactive, 40)}, []int{40}},
		{"interactive fills the step", []*slot{prefilling(queue.Batch, 500), prefilling(queue.Interactive, 300)}, []int{128}},
		{"two interactive, then no batch", []*slot{prefilling(queue.Interactive, 30), prefilling(queue.Batch, 500), prefilling(queue.Interactive, 30)}, []int{30, 30}},
		{"batch only: they share the room", []*slot{prefilling(queue.Batch, 100), prefilling(queue.Batch, 500)}, []int{100, 28}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, s := range tt.slots {
				s.id, s.task.slot = i, i
			}
			l := &loop{batch: b, slots: tt.slots}
			b.Clear()
			entries, _ := l.addPrefill(nil, 128)
			var got []int
			for _, en := range entries {
				got = append(got, en.n)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("step adds %v, want %v", got, tt.want)
			}
		})
	}
}
