package core

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// readBody reads every byte whatever length the client declared, and
// presizes no more than presized.
func TestReadBodyWhateverTheDeclaredLength(t *testing.T) {
	for _, n := range []int{0, 1, 100, presized - 1, presized, presized + 1, 3*presized + 7} {
		body := bytes.Repeat([]byte("abcdefg"), n/7+1)[:n]
		for _, declared := range []int64{-1, 0, 1, int64(n), int64(n) + 1, int64(n) * 2, 1 << 40} {
			got, err := readBody(iotest.HalfReader(bytes.NewReader(body)), declared, 1<<30)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes declared as %d: got %d bytes, %v", n, declared, len(got), err)
			}
			if n < presized && int64(n) < declared && declared <= 1<<30 && cap(got) > presized {
				t.Fatalf("%d bytes declared as %d: buffer of %d", n, declared, cap(got))
			}
		}
	}
	if _, err := readBody(iotest.ErrReader(io.ErrUnexpectedEOF), 10, 100); err != io.ErrUnexpectedEOF {
		t.Fatalf("error %v", err)
	}
}

// A body longer than presized, as declared, is read into a buffer that
// doubles toward the declared length: one growth for a body under twice
// presized, ending at the declared length and the one byte the read of
// the end needs.
func TestReadBodyGrowsToTheDeclaredLength(t *testing.T) {
	n := presized + presized/2
	body := bytes.Repeat([]byte("x"), n)
	got, err := readBody(iotest.HalfReader(bytes.NewReader(body)), int64(n), 1<<30)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
	if cap(got) != n+1 {
		t.Fatalf("buffer of %d for %d bytes declared", cap(got), n)
	}
	r := bytes.NewReader(body)
	allocs := testing.AllocsPerRun(20, func() { r.Reset(body); _, _ = readBody(r, int64(n), 1<<30) })
	if allocs > 2 {
		t.Fatalf("%.0f allocations to read %d bytes declared; want 2 (presized, then the rest)", allocs, n)
	}
}
