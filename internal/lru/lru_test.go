package lru

import (
	"fmt"
	"testing"
)

// TestLRUBoundsBytes: the least recently used go until the held bytes are
// within the bound, counting a value's growth (resize); the newest stays
// even alone over the bound.
func TestLRUBoundsBytes(t *testing.T) {
	type val struct{ n int64 }
	size := func(v *val) int64 { return v.n }
	tests := []struct {
		name string
		run  func(l *Map[string, *val])
		held []string // most recent first
		used int64
	}{
		{"within the bound", func(l *Map[string, *val]) {
			l.Put("a", &val{40})
			l.Put("b", &val{60})
		}, []string{"b", "a"}, 100},
		{"the least recently used goes", func(l *Map[string, *val]) {
			l.Put("a", &val{40})
			l.Put("b", &val{40})
			l.Get("a")
			l.Put("c", &val{40})
		}, []string{"c", "a"}, 80},
		{"growth evicts the least recently used", func(l *Map[string, *val]) {
			b := &val{40}
			l.Put("a", &val{40})
			l.Put("b", b)
			b.n = 70
			l.Resize("b")
		}, []string{"b"}, 70},
		{"one over the bound is held alone", func(l *Map[string, *val]) {
			l.Put("a", &val{40})
			l.Put("big", &val{500})
		}, []string{"big"}, 500},
		{"remove gives its bytes back", func(l *Map[string, *val]) {
			l.Put("a", &val{40})
			l.Put("b", &val{40})
			l.Remove("a")
		}, []string{"b"}, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New[string](100, size)
			tt.run(l)
			var held []string
			for e := l.order.Front(); e != nil; e = e.Next() {
				held = append(held, e.Value.(*item[string, *val]).key)
			}
			if fmt.Sprint(held) != fmt.Sprint(tt.held) || l.Bytes() != tt.used || len(l.items) != len(held) {
				t.Fatalf("held %v (%d bytes, %d in the map), want %v (%d bytes)", held, l.Bytes(), len(l.items), tt.held, tt.used)
			}
		})
	}
}
