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

// maxLineBytes bounds one SSE line. A final chunk repeats the prompt as text
// (llama-server's "prompt" field), so a long conversation makes a long line.
const maxLineBytes = 64 << 20

// errLineCut says the body ended inside a line: the stream was cut.
var errLineCut = errors.New("the stream ended in the middle of a line")

// lineReader reads the lines of an SSE body. Not safe for concurrent use.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line without its end of line. The slice is valid
// until the next call. At the end of the body it returns io.EOF, or
// errLineCut if the body ended inside a line.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		l.buf = append(l.buf, frag...)
		if len(l.buf) > maxLineBytes {
			return nil, fmt.Errorf("a line is longer than %d bytes", maxLineBytes)
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
