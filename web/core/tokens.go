package core

// tokenArray reads a prompt of token ids, `[1, 2, 3]`, without
// encoding/json: a gateway sends a node every token of a conversation each
// turn, and decoding 7,000 ids reflectively (after a failed attempt to
// read them as strings) cost the node 0.8 ms a turn. It takes only the
// plain shape - integers without fraction or exponent that fit an int,
// separated by commas and JSON whitespace - and reports false for anything
// else (null elements, 1.0, a missing comma, an empty array), which Prompt
// then reads with encoding/json, so its results and errors are unchanged.
func tokenArray(b []byte) ([]int, bool) {
	// A digit or a comma is at least two bytes per id: one allocation.
	ids := make([]int, 0, commas(b)+1)
	if !eachToken(b, func(id int) { ids = append(ids, id) }) {
		return nil, false
	}
	return ids, true
}

// IsTokenArray reports whether b is a prompt of token ids in the plain
// shape Prompt reads without encoding/json: a node's DecodeFast takes
// such a prompt (DecodeRaw). It keeps no id: Prompt reads them after.
func IsTokenArray(b []byte) bool { return eachToken(b, nil) }

// eachToken walks b as tokenArray's plain shape, giving emit (if set) each
// id in order; false at the first byte outside the shape.
func eachToken(b []byte, emit func(int)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return false
	}
	for {
		i = skipSpace(b, i+1)
		id, next, ok := plainInt(b, i)
		if !ok {
			return false
		}
		if emit != nil {
			emit(id)
		}
		i = skipSpace(b, next)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
		case ']':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// commas counts the commas in b: an array's elements, less one.
func commas(b []byte) int {
	n := 0
	for _, c := range b {
		if c == ',' {
			n++
		}
	}
	return n
}

// plainInt reads the JSON number at b[i:] if it is an integer without
// fraction or exponent that fits an int (64 bits), as encoding/json would
// store it; ok is false otherwise.
func plainInt(b []byte, i int) (v, next int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start >= 18 { // 19 digits may overflow: leave them to encoding/json
			return 0, 0, false
		}
		u = u*10 + uint64(b[i]-'0')
	}
	switch {
	case i == start, b[start] == '0' && i-start > 1: // no digits, or a leading zero
		return 0, 0, false
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, 0, false
	}
	if neg {
		return -int(u), i, true
	}
	return int(u), i, true
}
