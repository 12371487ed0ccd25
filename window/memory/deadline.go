package memory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Deadlines (a shared database). Every statement's answer must start, and
// keep coming, within StoreConfig.Timeout (answerConn): a database that
// stops answering (stopped, its machine frozen, a network that drops
// packets with the connections open) is noticed within the timeout by the
// first statement waiting on it, which then fails with ErrTimeout and
// marks the store down (health.go). Marking it down ends every call then
// waiting on the database at once (each runs under the store's epoch, see
// bounded), and every call after it fails at once with the same error,
// until the reconnect loop finds the database answering again within the
// same timeout. So a call waits on a database that does not answer for at
// most the timeout, a request (whose calls come one after another) as
// much, and a chat is then served without memory (window.Result.Degraded)
// and a previous_response_id continuation is a 503, as when the database
// refuses connections. A SQLite file has no such deadline: it is local,
// and its lock waits are bounded by BusyTimeout.

// DefaultTimeout is StoreConfig.Timeout's default: the connect timeout a
// database URL gets when it sets none (connectTimeout), so "the database
// does not answer" means one thing for a new connection and an open one.
// It bounds silence, not work: a healthy statement answers in
// milliseconds (each of an ingest's inserts, one by one; the first rows of
// a branch's load), so 5 s is far outside anything but a hung database or
// a row lock held that long by another replica's write (an ingest of some
// 70,000 turns at once, docs/memory-store.md), and short enough that a
// turn served without memory still answers its client.
const DefaultTimeout = connectTimeout

// ErrTimeout: the database did not answer a statement within the store's
// timeout. It wraps ErrUnavailable: callers degrade as for a database that
// is down.
var ErrTimeout = fmt.Errorf("%w: no answer within its timeout", ErrUnavailable)

// errStoreDown is the cause of an epoch that ended because the store was
// marked down.
var errStoreDown = errors.New("memory store marked down")

// bounded runs op with ctx ended also when the store is marked down (by op
// itself or by any other call): a call waiting on a database another call
// found silent ends at once, with the store's fault.
func (s *Store) bounded(ctx context.Context, op func(ctx context.Context) error) error {
	s.fmu.Lock()
	epoch := s.epoch
	s.fmu.Unlock()
	if epoch == nil { // SQLite
		return op(ctx)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(epoch, func() { cancel(errStoreDown) })
	defer func() { stop(); cancel(nil) }()
	err := op(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errStoreDown) {
		if fault := s.usable(); fault != nil {
			return fault
		}
	}
	return err
}

// timeout checks and defaults cfg.Timeout.
func (cfg *StoreConfig) timeout() error {
	if cfg.Timeout < 0 {
		return fmt.Errorf("memory store: timeout %v must not be negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	return nil
}

// pingTimeout is how long the reconnect loop's ping may go unanswered: the
// store's timeout, so the database is up when it answers as a statement
// needs it to.
func (s *Store) pingTimeout() time.Duration { return s.cfg.Timeout }
