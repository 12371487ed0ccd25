package memory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Every call of the store (Ingest, Search, Turns, Delete, each conversation
// an Expire deletes, and the stored responses' calls) runs under a deadline,
// StoreConfig.Timeout: a database that does not answer (stopped, its
// machine frozen, a network that drops packets with the connection still
// open) costs a call at most that long, never a request's whole life. A
// call the deadline ended wraps ErrTimeout; on a shared database it also
// marks the store down (see health.go), so every call after it fails at
// once with ErrUnavailable until the reconnect loop finds the database
// answering again within the same deadline. A chat is then served without
// memory (window.Result.Degraded) and a previous_response_id continuation
// is a 503, as when the database refuses connections.

// DefaultTimeout is StoreConfig.Timeout's default: the connect timeout a
// database URL gets when it sets none (connectTimeout), so "the database
// does not answer" means one thing whether it does not take a connection
// or does not answer on one. A healthy call is a few milliseconds (a branch
// of 100,000 stored turns loads in well under a second; see
// docs/memory-store.md), so 5 s is far outside anything but a hung
// database, and short enough that a turn served without memory still
// answers its client.
const DefaultTimeout = connectTimeout

// ErrTimeout: the store did not answer a call within its timeout. It wraps
// ErrUnavailable: callers degrade as for a database that is down.
var ErrTimeout = fmt.Errorf("%w: no answer within its timeout", ErrUnavailable)

// errNoAnswer is the cause of a call's context the store's own deadline
// ended (not the caller's).
var errNoAnswer = errors.New("memory store timeout")

// bounded runs op with ctx bounded by the store's timeout. If the timeout,
// not the caller, ended it, the error wraps ErrTimeout and a shared store
// is marked down.
func (s *Store) bounded(ctx context.Context, op func(ctx context.Context) error) error {
	bctx, cancel := context.WithTimeoutCause(ctx, s.cfg.Timeout, errNoAnswer)
	defer cancel()
	err := op(bctx)
	if err == nil || ctx.Err() != nil || !errors.Is(context.Cause(bctx), errNoAnswer) {
		return err
	}
	err = fmt.Errorf("memory store %s: %w (%v): %w", s.path, ErrTimeout, s.cfg.Timeout, err)
	if s.d.shared {
		s.markDown(err)
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

// pingTimeout bounds a reconnect loop's ping: the call deadline, so the
// database is back when it answers as a call needs it to.
func (s *Store) pingTimeout() time.Duration { return s.cfg.Timeout }
