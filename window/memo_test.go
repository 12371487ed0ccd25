package window

import (
	"strings"
	"testing"

	"kvwin/window/memory"
)

// TestMemoBoundsBytes: the window's memos (packets, indexes) hold at most
// their bound in bytes, least recently used dropped first; one value over
// the bound is held alone; drop gives an owner's bytes back.
func TestMemoBoundsBytes(t *testing.T) {
	turn := func(pos int, n int) memory.Turn {
		return memory.Turn{Pos: pos, Role: "user", Text: strings.Repeat("word ", n/5)}
	}
	alice, bob := memory.Key{Tenant: "t", Conversation: "alice"}, memory.Key{Tenant: "t", Conversation: "bob"}
	t.Run("packets", func(t *testing.T) {
		p := Packet{Turns: []memory.Turn{turn(1, 1000)}}
		m := newMemo[uint64](3*packetBytes(p), packetBytes)
		for k := range uint64(10) {
			m.put(k, alice, p)
		}
		if n := m.count(alice); n != 3 || m.bytes() != 3*packetBytes(p) {
			t.Fatalf("%d packets, %d bytes held; want 3, %d", n, m.bytes(), 3*packetBytes(p))
		}
		if _, ok := m.get(0); ok {
			t.Error("the least recently used packet is still held")
		}
		m.put(100, bob, Packet{Turns: []memory.Turn{turn(1, 100000)}})
		if m.count(alice) != 0 || m.count(bob) != 1 {
			t.Errorf("a packet over the bound: alice %d, bob %d; want it held alone", m.count(alice), m.count(bob))
		}
		m.drop(bob)
		if m.bytes() != 0 {
			t.Errorf("%d bytes after drop", m.bytes())
		}
	})
	t.Run("indexes", func(t *testing.T) {
		var turns []memory.Turn
		for i := range 100 {
			turns = append(turns, turn(i, 200))
		}
		one := memory.NewIndex(turns...).Bytes()
		m := newMemo[uint64](2*one, (*memory.Index).Bytes)
		for k := range uint64(5) {
			m.put(k, alice, memory.NewIndex(turns...))
		}
		if n := m.count(alice); n != 2 || m.bytes() != 2*one {
			t.Fatalf("%d indexes, %d bytes held; want 2, %d", n, m.bytes(), 2*one)
		}
	})
}
