package memory

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// dialect is what differs between the databases the store runs on: SQLite
// (one process owns the file) and PostgreSQL (several gateway replicas
// share it). The store's statements are written once, with ? placeholders
// and portable SQL (INSERT … ON CONFLICT DO NOTHING, RETURNING); rebind
// turns them into the dialect's. What cannot be portable (DDL types, how
// the schema version is kept, row locks, how text is stored) is a field.
//
// To add tables: append a step to both dialects' steps; every statement
// against them goes through rebind.
type dialect struct {
	name string
	// numbered: placeholders are $1, $2… (PostgreSQL), not ?.
	numbered bool
	// shared: other processes write the same database, so the in-memory
	// state of a conversation is checked against its row (id, rev) on every
	// use, and writes need not be serialized in this process.
	shared bool
	// forUpdate ends a SELECT that must lock the row it reads until the
	// transaction ends ("" where the whole database is one writer).
	forUpdate string
	// text is the argument a turn's text is stored as: PostgreSQL's text
	// type refuses NUL bytes a JSON string may hold, so it is bytea there.
	text func(string) any
	// steps are the schema's migrations in order: step i brings the
	// schema from version i to i+1.
	steps []step
	// version reads the schema version (0: none), in tx.
	version func(ctx context.Context, tx *sql.Tx) (int, error)
	// setVersion records v, in tx.
	setVersion func(ctx context.Context, tx *sql.Tx, v int) error
	// lock serializes migrations across processes until tx ends (nil: the
	// file lock already does).
	lock func(ctx context.Context, tx *sql.Tx) error
	// dropLegacy deletes conv's rows from tables of older schemas, in tx
	// (nil: none).
	dropLegacy func(ctx context.Context, tx *sql.Tx, conv int64) error
}

// step is one schema migration, run inside the migration's transaction.
type step func(ctx context.Context, tx *sql.Tx) error

// stmts is a step of plain statements.
func stmts(qs ...string) step {
	return func(ctx context.Context, tx *sql.Tx) error {
		for _, q := range qs {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}
}

// rebind rewrites q's ? placeholders for d. A ? inside a quoted literal is
// left alone; the store's statements pass every value as an argument.
func (d *dialect) rebind(q string) string {
	if !d.numbered || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// migrate brings the schema to len(d.steps) in one transaction, under
// d.lock: several replicas starting at once run it one after another, and
// each after the first finds nothing to do.
func (d *dialect) migrate(ctx context.Context, db *sql.DB) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d.lock != nil {
		if err := d.lock(ctx, tx); err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
	}
	v, err := d.version(ctx, tx)
	if err != nil {
		return err
	}
	if v > len(d.steps) {
		return fmt.Errorf("schema version %d is newer than this kvwin's %d", v, len(d.steps))
	}
	if v == len(d.steps) {
		return tx.Rollback()
	}
	for i := v; i < len(d.steps); i++ {
		if err := d.steps[i](ctx, tx); err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
	}
	if err := d.setVersion(ctx, tx, len(d.steps)); err != nil {
		return err
	}
	return tx.Commit()
}
