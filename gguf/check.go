package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The decoder kvwin reads GGUF with (Ollama's fs/ggml) allocates whatever
// a length field in the file claims: a corrupt or hostile file that claims
// a string of 5 TB ends the process with an out-of-memory fatal error, which
// no recover catches. checkLayout walks the same structure first and checks
// every length and count against the bytes the file really has, so such a
// file is an error instead.
//
// The layout (GGUF v2 and v3; little-endian):
//
//	"GGUF" version:u32 tensors:u64 kvs:u64
//	kvs × { key:string type:u32 value }
//	tensors × { name:string dims:u32 dims×u64 type:u32 offset:u64 }
//
// where a string is len:u64 and len bytes, and an array value is
// elemType:u32 count:u64 and count values.

// errLayout marks a file whose structure does not fit in it.
var errLayout = errors.New("malformed gguf")

// GGUF value types.
const (
	typeUint8 = iota
	typeInt8
	typeUint16
	typeInt16
	typeUint32
	typeInt32
	typeFloat32
	typeBool
	typeString
	typeArray
	typeUint64
	typeInt64
	typeFloat64
)

// maxDims is GGML_MAX_DIMS: a tensor has at most four dimensions.
const maxDims = 4

// maxArrayDepth bounds arrays of arrays (no real file nests them deeper).
const maxArrayDepth = 4

// layoutReader reads the structure, counting what is left of the file.
type layoutReader struct {
	r    *bufio.Reader
	left int64 // bytes not read yet
}

// checkLayout checks the header, metadata and tensor table of a GGUF file
// of size bytes read from r. It reads no tensor data.
func checkLayout(r io.Reader, size int64) error {
	l := &layoutReader{r: bufio.NewReaderSize(r, 64<<10), left: size}
	magic, err := l.bytes(4)
	if err != nil {
		return err
	}
	if string(magic) != "GGUF" {
		return fmt.Errorf("%w: magic %q is not GGUF", errLayout, magic)
	}
	version, err := l.u32()
	if err != nil {
		return err
	}
	if version != 2 && version != 3 {
		return fmt.Errorf("%w: version %d (kvwin reads versions 2 and 3)", errLayout, version)
	}
	tensors, err := l.count(8 + 4 + 4 + 8) // the smallest tensor entry: empty name, no dims
	if err != nil {
		return fmt.Errorf("tensor count: %w", err)
	}
	kvs, err := l.count(8 + 4 + 1) // the smallest pair: empty key, one byte
	if err != nil {
		return fmt.Errorf("metadata count: %w", err)
	}
	for i := range kvs {
		if err := l.str(); err != nil {
			return fmt.Errorf("metadata %d key: %w", i, err)
		}
		typ, err := l.u32()
		if err != nil {
			return err
		}
		if err := l.value(typ, 0); err != nil {
			return fmt.Errorf("metadata %d value: %w", i, err)
		}
	}
	for i := range tensors {
		if err := l.str(); err != nil {
			return fmt.Errorf("tensor %d name: %w", i, err)
		}
		dims, err := l.u32()
		if err != nil {
			return err
		}
		if dims > maxDims {
			return fmt.Errorf("%w: tensor %d has %d dimensions (at most %d)", errLayout, i, dims, maxDims)
		}
		if err := l.skip(int64(dims)*8 + 4 + 8); err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	return nil
}

// value skips one value of type typ.
func (l *layoutReader) value(typ uint32, depth int) error {
	if n := fixedSize(typ); n > 0 {
		return l.skip(n)
	}
	switch typ {
	case typeString:
		return l.str()
	case typeArray:
		if depth >= maxArrayDepth {
			return fmt.Errorf("%w: arrays nested deeper than %d", errLayout, maxArrayDepth)
		}
		elem, err := l.u32()
		if err != nil {
			return err
		}
		min := fixedSize(elem)
		switch elem {
		case typeString:
			min = 8
		case typeArray:
			min = 4 + 8
		}
		if min == 0 {
			return fmt.Errorf("%w: array of unknown type %d", errLayout, elem)
		}
		n, err := l.count(min)
		if err != nil {
			return fmt.Errorf("array: %w", err)
		}
		if elem != typeString && elem != typeArray {
			return l.skip(int64(n) * min)
		}
		for range n {
			if err := l.value(elem, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%w: unknown value type %d", errLayout, typ)
}

// fixedSize is the size of a fixed-size value type, 0 for others.
func fixedSize(typ uint32) int64 {
	switch typ {
	case typeUint8, typeInt8, typeBool:
		return 1
	case typeUint16, typeInt16:
		return 2
	case typeUint32, typeInt32, typeFloat32:
		return 4
	case typeUint64, typeInt64, typeFloat64:
		return 8
	}
	return 0
}

// count reads a u64 count of items at least min bytes each, which must fit
// in what is left of the file.
func (l *layoutReader) count(min int64) (uint64, error) {
	n, err := l.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(l.left/min) {
		return 0, fmt.Errorf("%w: %d items of at least %d bytes in the %d bytes left", errLayout, n, min, l.left)
	}
	return n, nil
}

// str skips a string.
func (l *layoutReader) str() error {
	n, err := l.u64()
	if err != nil {
		return err
	}
	if n > uint64(l.left) {
		return fmt.Errorf("%w: a string of %d bytes in the %d bytes left", errLayout, n, l.left)
	}
	return l.skip(int64(n))
}

func (l *layoutReader) u32() (uint32, error) {
	b, err := l.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (l *layoutReader) u64() (uint64, error) {
	b, err := l.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// bytes reads n (at most 8) bytes.
func (l *layoutReader) bytes(n int) ([]byte, error) {
	if int64(n) > l.left {
		return nil, fmt.Errorf("%w: the file ends inside its header", errLayout)
	}
	var buf [8]byte
	if _, err := io.ReadFull(l.r, buf[:n]); err != nil {
		return nil, fmt.Errorf("%w: %w", errLayout, err)
	}
	l.left -= int64(n)
	return buf[:n], nil
}

// skip passes n bytes, which must be in the file.
func (l *layoutReader) skip(n int64) error {
	if n > l.left {
		return fmt.Errorf("%w: %d bytes needed, %d left", errLayout, n, l.left)
	}
	if _, err := l.r.Discard(int(n)); err != nil {
		return fmt.Errorf("%w: %w", errLayout, err)
	}
	l.left -= n
	return nil
}
