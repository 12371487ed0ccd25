package route

import "testing"

func TestOracle(t *testing.T) {
	tests := []struct {
		name          string
		prompts, held [][]int
		want          int
	}{
		{"first turn computes everything", [][]int{{1, 2, 3}}, [][]int{{1, 2, 3, 9}}, 3},
		{"the next turn reuses prompt and answer", [][]int{{1, 2, 3}, {1, 2, 3, 9, 4, 5}}, [][]int{{1, 2, 3, 9}, {1, 2, 3, 9, 4, 5, 8}}, 3 + 2},
		{"a sibling reuses the shared system prompt", [][]int{{1, 2, 3}, {1, 2, 7}}, [][]int{{1, 2, 3, 9}, {1, 2, 7, 9}}, 3 + 1},
		{"the best of every earlier turn", [][]int{{1, 2}, {5, 6}, {5, 6, 0, 1}}, [][]int{{1, 2, 3}, {5, 6, 0}, {5, 6, 0, 1}}, 2 + 2 + 1},
		{"a turn does not reuse its own answer", [][]int{{1, 2}, {4, 4}}, [][]int{{1, 2, 3}, {4, 4, 4}}, 2 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := oracle(tt.prompts, tt.held); got != tt.want {
				t.Fatalf("oracle = %d, want %d", got, tt.want)
			}
		})
	}
}
