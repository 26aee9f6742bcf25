// Package enginetest runs a test on both engines: it gives each run a
// fresh, migrated database (internal/pgtest on Postgres, internal/sqlitetest
// on SQLite) with the few direct reads and writes that such tests share.
// Queries take $1, $2, … placeholders on both engines.
package enginetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
)

// Engines are the engines, as config.Config.Driver names them.
var Engines = []string{config.DriverPostgres, config.DriverSQLite}

// Run runs fn as one parallel subtest per engine, named after it.
func Run(t *testing.T, fn func(t *testing.T, engine string)) {
	t.Helper()
	for _, engine := range Engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			fn(t, engine)
		})
	}
}

// Store is what both engines' stores are.
type Store interface {
	core.Store
	store.Tokens
	store.Seeder
}

// DB is a test database on one engine.
type DB struct {
	Engine string
	// URL is its DATABASE_URL.
	URL string
	// Path is the SQLite file; empty on Postgres.
	Path string
	// Pool is set on Postgres, SQL on SQLite.
	Pool *pgxpool.Pool
	SQL  *sql.DB
	// Store is the engine's store on it.
	Store Store
}

// Options are the options of New.
type Options struct {
	// MaxConns caps the Postgres pool (pgtest.Options.MaxConns).
	MaxConns int32
}

// New returns a fresh, migrated database on engine for t; nil opts means
// defaults.
func New(t testing.TB, engine string, opts *Options) *DB {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	switch engine {
	case config.DriverPostgres:
		url, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: opts.MaxConns})
		return &DB{Engine: engine, URL: url, Pool: pool, Store: pgengine.New(pool)}
	case config.DriverSQLite:
		path, db := sqlitetest.NewDB(t)
		return &DB{Engine: engine, URL: "sqlite:" + path, Path: path, SQL: db, Store: sqliteengine.New(db)}
	}
	t.Fatalf("enginetest: unknown engine %q", engine)
	return nil
}

// Time is t as the engine stores it, for a query's argument.
func (d *DB) Time(t time.Time) any {
	if d.SQL != nil {
		return sqliteengine.FormatTime(t)
	}
	return t
}

// Exec runs a statement.
func (d *DB) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	var err error
	if d.SQL != nil {
		_, err = d.SQL.ExecContext(context.Background(), query, args...)
	} else {
		_, err = d.Pool.Exec(context.Background(), query, args...)
	}
	if err != nil {
		t.Fatalf("enginetest: %s: %v", query, err)
	}
}

// Count runs a query answering one integer.
func (d *DB) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	var err error
	if d.SQL != nil {
		err = d.SQL.QueryRowContext(context.Background(), query, args...).Scan(&n)
	} else {
		err = d.Pool.QueryRow(context.Background(), query, args...).Scan(&n)
	}
	if err != nil {
		t.Fatalf("enginetest: %s: %v", query, err)
	}
	return n
}

// Rows runs a query and returns each row as text, its values separated by
// "|": for comparisons of the same rows before and after.
func (d *DB) Rows(t testing.TB, query string, args ...any) []string {
	t.Helper()
	var rows [][]any
	var err error
	if d.SQL != nil {
		rows, err = sqlRows(d.SQL, query, args...)
	} else {
		rows, err = pgRows(d.Pool, query, args...)
	}
	if err != nil {
		t.Fatalf("enginetest: %s: %v", query, err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		vals := make([]string, len(r))
		for i, v := range r {
			vals[i] = fmt.Sprint(v)
		}
		out = append(out, strings.Join(vals, "|"))
	}
	return out
}

func pgRows(pool *pgxpool.Pool, query string, args ...any) ([][]any, error) {
	rows, err := pool.Query(context.Background(), query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

func sqlRows(db *sql.DB, query string, args ...any) ([][]any, error) {
	rows, err := db.QueryContext(context.Background(), query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}
