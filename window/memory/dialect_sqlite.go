package memory

import (
	"context"
	"database/sql"
	"fmt"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// sqliteDialect is the store in one SQLite file that one process owns. Its
// schema version is PRAGMA user_version. Version 1 (no user_version) filed
// turns by position alone, first writer winning; its turns cannot be placed
// on a chain, so migrating keeps them in turns_v1, never served, and
// deleted with their conversation.
var sqliteDialect = &dialect{
	name:      "sqlite",
	forUpdate: "",
	text:      func(s string) any { return s },
	steps: []step{
		stmts(), // version 1 had no user_version: step 2 tells it by its tables
		sqliteVersion2,
		stmts(`ALTER TABLE conversations ADD COLUMN rev INTEGER NOT NULL DEFAULT 0`),
		responsesStep("INTEGER", "TEXT", "INTEGER"),
		stmts(`ALTER TABLE conversations ADD COLUMN ` + responsesDeletedColumn + ` INTEGER NOT NULL DEFAULT 0`),
	},
	version: func(ctx context.Context, tx *sql.Tx) (int, error) {
		var v int
		err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
		return v, err
	},
	setVersion: func(ctx context.Context, tx *sql.Tx, v int) error {
		_, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v))
		return err
	},
	dropLegacy: func(ctx context.Context, tx *sql.Tx, conv int64) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'turns_v1'`).Scan(&n); err != nil || n == 0 {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM turns_v1 WHERE conv = ?`, conv)
		return err
	},
}

// sqliteVersion2 files turns by chain; a version 1 file's turns are kept
// aside in turns_v1.
func sqliteVersion2(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'turns'`).Scan(&n); err != nil {
		return err
	}
	if n > 0 { // version 1
		if err := stmts(
			`ALTER TABLE turns RENAME TO turns_v1`,
			`DROP TABLE IF EXISTS turns_fts`,
			`ALTER TABLE conversations ADD COLUMN used INTEGER NOT NULL DEFAULT 0`,
		)(ctx, tx); err != nil {
			return err
		}
	}
	return stmts(`
CREATE TABLE IF NOT EXISTS conversations (
	id     INTEGER PRIMARY KEY,
	tenant TEXT NOT NULL,
	name   TEXT NOT NULL,
	used   INTEGER NOT NULL DEFAULT 0,
	UNIQUE (tenant, name)
);
CREATE TABLE IF NOT EXISTS turns (
	id     INTEGER PRIMARY KEY,
	conv   INTEGER NOT NULL REFERENCES conversations (id),
	pos    INTEGER NOT NULL,
	chain  INTEGER NOT NULL,
	parent INTEGER NOT NULL,
	role   TEXT NOT NULL,
	text   TEXT NOT NULL,
	handle TEXT NOT NULL,
	at     INTEGER NOT NULL,
	UNIQUE (conv, pos, chain)
);
CREATE INDEX IF NOT EXISTS conversations_used ON conversations (used);`)(ctx, tx)
}
