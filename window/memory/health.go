package memory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A PostgreSQL store survives its database going away. While the database
// cannot be reached (an error classified ErrUnavailable, or a statement it
// left unanswered for the store's timeout: ErrTimeout, see deadline.go),
// every call fails at once with that error instead of waiting on a
// connection, and a goroutine pings the database every reconnectInterval;
// when it answers within the timeout (and the schema is migrated, if Open
// could not) the store serves again.
// Nothing is half-written meanwhile: every write is one transaction. A
// SQLite store has no such state: its file is there or Open failed.

// reconnectInterval is how often a store whose database is down tries it:
// once a second keeps a blip's degraded time near the blip's own, at the
// cost of one connection attempt a second per replica while it lasts.
const reconnectInterval = time.Second

// openShared opens the PostgreSQL store and migrates its schema; a
// database that cannot be reached leaves the store degraded.
func (s *Store) openShared() error {
	s.d = postgresDialect
	s.path = redact(s.cfg.URL)
	s.epoch, s.endEpoch = context.WithCancel(context.Background())
	db, err := openPostgres(s.cfg.URL, s.cfg.Timeout, func(err error) { s.markDown(s.classify(err)) })
	if err != nil {
		return err
	}
	// Each request takes a connection for a statement or a transaction at
	// a time; 8 per replica keeps three replicas far below PostgreSQL's
	// default max_connections (100).
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s.db = db
	if err := s.prepare(context.Background()); err != nil && !errors.Is(err, ErrUnavailable) {
		return err
	}
	s.done.Add(1)
	go s.reconnectLoop()
	return nil
}

// prepare migrates the schema if that has not been done yet; an
// unreachable database is recorded as the store's fault.
func (s *Store) prepare(ctx context.Context) error {
	s.fmu.Lock()
	ready := s.ready
	s.fmu.Unlock()
	if !ready {
		mctx, cancel := context.WithTimeout(ctx, 2*connectTimeout)
		err := s.classify(s.d.migrate(mctx, s.db))
		cancel()
		if s.down(ctx, err) {
			s.markDown(err)
		}
		if err != nil {
			return err
		}
	}
	s.fmu.Lock()
	s.ready = true
	s.fmu.Unlock()
	return nil
}

// usable returns nil if the store may be used now: open, and (PostgreSQL)
// its database not known to be down.
func (s *Store) usable() error {
	if s.isClosed() {
		return ErrClosed
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.fault == nil && !s.ready {
		return fmt.Errorf("memory store %s: %w: its schema is not migrated yet", s.path, ErrUnavailable)
	}
	return s.fault
}

// Health returns why the store cannot be used now (ErrUnavailable: its
// database is down, or ErrClosed), nil when it can. It reads state the
// store's calls and its reconnect loop keep; it does not touch the
// database.
func (s *Store) Health() error { return s.usable() }

// classify wraps err with the store error it amounts to.
func (s *Store) classify(err error) error { return classify(s.path, err) }

// down reports whether err says the shared database cannot be reached now
// (not a request that went away).
func (s *Store) down(ctx context.Context, err error) bool {
	return err != nil && s.d.shared && errors.Is(err, ErrUnavailable) && ctx.Err() == nil &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// retry runs op, and once more if it failed because the database could not
// be reached: a pooled connection that broke (a database restarted, a
// proxy that cut it) fails one statement, and the retry takes a fresh one.
// Every op is idempotent (turns are unique by chain, a delete of what is
// gone finds nothing). A second such failure marks the store down: calls
// then fail at once until the reconnect loop finds the database again.
//
// Both attempts run under one deadline (bounded): a database that does not
// answer is not tried again.
func (s *Store) retry(ctx context.Context, op func(ctx context.Context) error) error {
	return s.bounded(ctx, func(ctx context.Context) error {
		err := op(ctx)
		if !s.down(ctx, err) {
			return err
		}
		if err = op(ctx); s.down(ctx, err) {
			s.markDown(err)
		}
		return err
	})
}

// markDown records err as why the store cannot be used, and ends the
// calls waiting on the database now (bounded).
func (s *Store) markDown(err error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.fault == nil {
		s.fault = err
		s.endEpoch()
		s.epoch, s.endEpoch = context.WithCancel(context.Background())
		if s.cfg.wentDown != nil {
			s.cfg.wentDown()
		}
	}
}

// reconnectLoop pings the database every reconnectInterval until Close:
// while it is up, so a replica that serves no request (and makes no call)
// still finds it silent or gone within the timeout and a second, and
// /health says so; while it is down, to clear the fault once it answers.
// One round trip a second per replica, none per turn.
func (s *Store) reconnectLoop() {
	defer s.done.Done()
	tick := time.NewTicker(reconnectInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.fmu.Lock()
		down := s.fault != nil || !s.ready
		s.fmu.Unlock()
		// Twice the timeout: a silent database fails the ping by the
		// connection's own deadline (answerConn), which marks it down.
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.pingTimeout())
		err := s.classify(s.db.PingContext(ctx))
		if !down {
			// A refusal marks the store down only when a second ping is
			// refused too, as retry does for calls (a blip that cut pooled
			// connections is not an outage); silence marks it at once.
			if s.down(ctx, err) {
				if err = s.classify(s.db.PingContext(ctx)); s.down(ctx, err) {
					s.markDown(err)
				}
			}
			cancel()
			continue
		}
		cancel()
		if err != nil {
			continue
		}
		s.fmu.Lock()
		s.fault = nil
		s.fmu.Unlock()
		if err := s.prepare(context.Background()); err != nil {
			continue // recorded again if the database went away once more
		}
		if s.cfg.reconnected != nil {
			s.cfg.reconnected()
		}
	}
}
