package kvcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
)

// FuzzDecodeSnapshot: whatever a snapshot file holds (a torn write, a bit
// flip, a hostile header), decoding it returns its tokens and state only if
// it verifies, else ErrSnapshotCorrupt or ErrSnapshotMismatch; never a
// panic, never an allocation the file's size does not justify. CI runs it
// for 30 s (.ci/fuzz).
func FuzzDecodeSnapshot(f *testing.F) {
	const fp = 42
	dir := f.TempDir()
	s, _, err := OpenStore(StoreConfig{Dir: dir, Fingerprint: fp})
	if err != nil {
		f.Fatal(err)
	}
	for i, tc := range []struct {
		tokens []int
		state  []byte
	}{
		{[]int{1, 2, 3}, []byte("kv state of three tokens")},
		{[]int{7}, bytes.Repeat([]byte{0xab, 0x01}, 300)},
		{[]int{-1, 1 << 30}, nil},
	} {
		done := make(chan SavedSnapshot, 1)
		if !s.Save(Owner{Tenant: "t", Conversation: "c"}, tc.tokens, tc.state, func(saved SavedSnapshot, err error) {
			if err != nil {
				f.Error(err)
			}
			done <- saved
		}) {
			f.Fatalf("seed %d: save dropped", i)
		}
		saved := <-done
		b, err := os.ReadFile(s.path(saved.ID))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s.Close()
	f.Add([]byte(snapMagic))
	dec, err := newSnapshotDecoder()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeSnapshot(dec, b, fp)
		if err != nil {
			if !errors.Is(err, ErrSnapshotCorrupt) && !errors.Is(err, ErrSnapshotMismatch) {
				t.Fatalf("error %v is neither corrupt nor mismatch", err)
			}
			return
		}
		h, _ := parseHead(b)
		if len(l.Tokens) != int(h.tokens) || uint64(len(l.State)) != h.state {
			t.Fatalf("decoded %d tokens and %d state bytes; the header says %d and %d", len(l.Tokens), len(l.State), h.tokens, h.state)
		}
	})
}

// A header claiming far more state than its compressed bytes can hold is
// refused before anything is allocated for it (a terabyte here): a flipped
// bit in the header's state size must not end the process.
func TestSnapshotClaimingAHugeStateIsCorrupt(t *testing.T) {
	b := make([]byte, snapHeader+4+8)
	copy(b, snapMagic)
	le := binary.LittleEndian
	le.PutUint64(b[8:], 42)     // fingerprint
	le.PutUint32(b[16:], 1)     // tokens
	le.PutUint64(b[20:], 1<<40) // state bytes
	le.PutUint64(b[28:], 8)     // compressed bytes
	dec, err := newSnapshotDecoder()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeSnapshot(dec, b, 42); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("err %v, want ErrSnapshotCorrupt", err)
	}
}
