package memory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// answerConn is a connection to the shared database on which every read
// and every write must make progress within wait: a statement whose answer
// does not start (or stalls) for that long fails, and so does a connection
// whose server does not answer its start-up. A database that is stopped
// with its connections open, or whose machine froze, or a network that
// drops packets, is then noticed in wait, not when the kernel gives up on
// the connection (never, for a stopped process: its kernel still answers
// TCP). A statement that runs long while it streams its rows, or a
// transaction of many statements, is not cut: each answer resets the wait.
//
// pgx sets deadlines of its own on the connection (to end a statement
// whose context ended); answerConn keeps them and applies the earlier of
// theirs and its own, so both work. Safe for the concurrent reads and
// writes pgx makes.
type answerConn struct {
	net.Conn
	wait   time.Duration
	silent func(error) // called with the error when wait passed without an answer

	mu     sync.Mutex
	rd, wd time.Time // the read and write deadlines pgx set (zero: none)
}

var _ net.Conn = (*answerConn)(nil)

// errNoAnswer is wrapped by a read or write that waited the full wait.
var errNoAnswer = errors.New("no answer from the database")

// noAnswerError is a net.Error that times out, as pgx expects of a
// deadline, wrapping errNoAnswer and the connection's own error.
type noAnswerError struct {
	wait time.Duration
	err  error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("%v within %v: %v", errNoAnswer, e.wait, e.err)
}
func (e *noAnswerError) Unwrap() []error { return []error{errNoAnswer, e.err} }
func (e *noAnswerError) Timeout() bool   { return true }
func (e *noAnswerError) Temporary() bool { return false }

// dialAnswering wraps dial so its connections are answerConns.
func dialAnswering(dial func(ctx context.Context, network, addr string) (net.Conn, error), wait time.Duration, silent func(error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &answerConn{Conn: c, wait: wait, silent: silent}, nil
	}
}

func (c *answerConn) Read(p []byte) (int, error) {
	own := c.arm(&c.rd, c.Conn.SetReadDeadline)
	n, err := c.Conn.Read(p)
	return n, c.check(err, own, &c.rd)
}

func (c *answerConn) Write(p []byte) (int, error) {
	own := c.arm(&c.wd, c.Conn.SetWriteDeadline)
	n, err := c.Conn.Write(p)
	return n, c.check(err, own, &c.wd)
}

// SetDeadline records pgx's deadline for reads and writes and applies it.
func (c *answerConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd, c.wd = t, t
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline records pgx's read deadline and applies it.
func (c *answerConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline records pgx's write deadline and applies it.
func (c *answerConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wd = t
	return c.Conn.SetWriteDeadline(t)
}

// arm applies the earlier of pgx's deadline (*theirs) and wait from now,
// and returns the latter. Under mu, so a deadline pgx sets meanwhile is
// applied after it and wins.
func (c *answerConn) arm(theirs *time.Time, apply func(time.Time) error) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	own := time.Now().Add(c.wait)
	d := own
	if !theirs.IsZero() && theirs.Before(own) {
		d = *theirs
	}
	_ = apply(d)
	return own
}

// check turns a deadline that was answerConn's own (not pgx's) into a
// noAnswerError, and reports it.
func (c *answerConn) check(err error, own time.Time, theirs *time.Time) error {
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	c.mu.Lock()
	t := *theirs
	c.mu.Unlock()
	if !t.IsZero() && t.Before(own) {
		return err // pgx ended it: its context ended
	}
	err = &noAnswerError{wait: c.wait, err: err}
	c.silent(err)
	return err
}
