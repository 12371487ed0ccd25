package llamaserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// llama-server streams /completion as server-sent events:
//
//	data: {"content":"Hello","tokens":[9707],"stop":false,…}\n\n
//	…
//	data: {"content":"","stop":true,"stop_type":"eos","timings":{…},…}\n\n
//
// and ends the body after the final object, without a [DONE] line (its
// OpenAI routes send one; it is understood here too). An error after the
// first chunk arrives as `data: {"error":{…}}` (older servers: `error: {…}`).
// Lines starting with ":" are keep-alive comments.

// errLineCut says the body ended inside a line: the stream was cut.
var errLineCut = errors.New("the stream ended in the middle of a line")

// errLineLong says a line is longer than the reader's limit. The line is
// not read to its end: a server sending one huge chunk costs the gateway
// the limit, not the chunk.
var errLineLong = errors.New("a chunk is longer than the limit")

// lineReader reads the lines of an SSE body, none longer than max bytes.
// Not safe for concurrent use.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, min(64<<10, max+2)), max: max}
}

// next returns the next line without its end of line. The slice is valid
// until the next call. At the end of the body it returns io.EOF, or
// errLineCut if the body ended inside a line.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		l.buf = append(l.buf, frag...)
		if len(bytes.TrimRight(l.buf, "\r\n")) > l.max {
			return nil, fmt.Errorf("%w of %d bytes", errLineLong, l.max)
		}
		switch {
		case err == nil:
			return bytes.TrimRight(l.buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(l.buf) > 0:
			return nil, errLineCut
		default:
			return nil, err
		}
	}
}

// field splits an SSE line into its field name and value ("data", `{…}`).
// Comments and blank lines have no name.
func field(line []byte) (name string, value []byte) {
	if len(line) == 0 || line[0] == ':' {
		return "", nil
	}
	k, v, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return string(line), nil
	}
	return string(k), bytes.TrimSpace(v)
}
