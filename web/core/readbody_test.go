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
