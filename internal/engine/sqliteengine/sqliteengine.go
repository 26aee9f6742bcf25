// Package sqliteengine is idemgate's SQLite driver, on database/sql with
// the pure-Go modernc.org/sqlite driver, sharing its *sql.DB with River's
// riversqlite driver. Its Store implements both core.Store (claims,
// tombstones, audit, River job reads) and package store's interfaces
// (tokens, orders, seeding, domain rows); domain writes join the gate
// transaction (Tx) they are given. It also owns the migrations
// (migrations/ and migrate.go, one version at a time).
//
// Open the database with Open: it sets WAL, a busy timeout, foreign keys,
// BEGIN IMMEDIATE transactions and a single connection, which is what one
// writer per file needs (see Open).
//
// Times are TEXT in RFC 3339 UTC with milliseconds (TimeFormat), so that
// text order is time order; every comparison is made in SQL against
// strftime's 'now', the database's clock, unless a test passes Now. A
// token's ExpiresAt comes back truncated to the millisecond.
//
// Errors are translated at the boundary: no rows is vocab.ErrNotFound, a
// unique or primary key violation vocab.ErrAlreadyExists, a database that
// cannot be used vocab.ErrUnavailable (see Unavailable).
//
// queries.go holds all the SQL, in Go, rather than sqlc output: the
// statements are assembled from shared pieces (the claim column list and
// the clock and text-time helpers at, plus, computed), which sqlc, taking
// each query as written, cannot share; its docs list SQLite support as beta.
package sqliteengine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/vocab"
)

// querier is what a pool and a transaction have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Store is the SQLite engine on a database: a core.Store and every
// interface of package store. It keeps the gate's statements prepared: with
// one connection, every statement runs in series, and compiling one costs
// more than running it. Use one Store per database.
type Store struct {
	executor
	db *sql.DB
}

var (
	_ engine.Store     = (*Store)(nil)
	_ core.Savepointer = (*Tx)(nil)
)

// New returns a Store on db, which should come from Open (or at least use
// DSN's settings). It panics if db is nil.
func New(db *sql.DB) *Store {
	if db == nil {
		panic("sqliteengine.New: db is nil")
	}
	stmts := &stmtCache{db: db, m: map[string]*sql.Stmt{}, inFlight: map[string]bool{}}
	s := &Store{db: db}
	s.executor = executor{q: db, stmts: stmts, store: s}
	return s
}

// DB returns the store's database.
func (s *Store) DB() *sql.DB { return s.db }

// Close releases the store's prepared statements; the database stays open.
func (s *Store) Close() error { return s.stmts.close() }

// Begin starts a transaction. SQLite's transactions are serializable; with
// Open's DSN it begins IMMEDIATE, holding the write lock from the start.
func (s *Store) Begin(ctx context.Context) (core.Tx, error) {
	// Prepare what the transaction may run while the pool's connection is
	// free: inside it, the transaction holds the only one.
	s.stmts.prepareAll(ctx)
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// BeginRead starts a read-only transaction (api.ReadBeginner) on the one
// connection: query_only is set inside it and cleared before it ends, so
// a write through it fails with SQLITE_READONLY and the connection goes
// back to the pool writable. The transaction is not bound to ctx (its
// statements are): a cancelled request must not leave the connection
// read-only by a rollback that skipped the reset.
func (s *Store) BeginRead(ctx context.Context) (core.Tx, error) {
	tx, err := s.db.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, translate(err)
	}
	if _, err := tx.ExecContext(context.WithoutCancel(ctx), `PRAGMA query_only = 1`); err != nil {
		_ = tx.Rollback()
		return nil, translate(err)
	}
	return &readTx{Tx: &Tx{executor: executor{q: tx, tx: tx, stmts: s.stmts, store: s}, tx: tx}}, nil
}

// readTx is BeginRead's transaction: it ends by clearing query_only, then
// rolling back (a read has nothing to commit).
type readTx struct{ *Tx }

// Commit ends the read (a rollback: nothing was written).
func (t *readTx) Commit(ctx context.Context) error { return t.Rollback(ctx) }

// Rollback clears query_only and rolls the transaction back.
func (t *readTx) Rollback(context.Context) error {
	_, resetErr := t.tx.ExecContext(context.Background(), `PRAGMA query_only = 0`)
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		err = nil
	}
	if resetErr != nil && !errors.Is(resetErr, sql.ErrTxDone) {
		return translate(resetErr)
	}
	return translate(err)
}

// begin starts a transaction without preparing statements first.
func (s *Store) begin(ctx context.Context) (*Tx, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, translate(err)
	}
	return &Tx{executor: executor{q: tx, tx: tx, stmts: s.stmts, store: s}, tx: tx}, nil
}

// Tx is a SQLite gate.Tx, and the gate.Tx effects see.
type Tx struct {
	executor
	tx *sql.Tx
}

// Commit commits the transaction.
func (t *Tx) Commit(context.Context) error { return translate(t.tx.Commit()) }

// Rollback rolls the transaction back; after Commit it is a no-op.
func (t *Tx) Rollback(context.Context) error {
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return translate(err)
}

// DriverTx returns the *sql.Tx, for River's InsertTx and JobCompleteTx
// (jobs.DriverTx).
func (t *Tx) DriverTx() *sql.Tx { return t.tx }

// Savepoint implements core.Savepointer.
func (t *Tx) Savepoint(ctx context.Context) error { return t.exec(ctx, sqlSavepoint) }

// RollbackToSavepoint implements core.Savepointer.
func (t *Tx) RollbackToSavepoint(ctx context.Context) error {
	return t.exec(ctx, sqlRollbackToSavepoint)
}

func (t *Tx) exec(ctx context.Context, sql string) error {
	_, err := t.tx.ExecContext(ctx, sql)
	return translate(err)
}

// Exec implements gate.Tx.
func (t *Tx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow implements gate.Tx.
func (t *Tx) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	return toolRow{t.tx.QueryRowContext(ctx, query, args...)}
}

// Query implements gate.Tx.
func (t *Tx) Query(ctx context.Context, query string, args ...any) (core.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// Engine implements gate.Tx.
func (t *Tx) Engine() string { return core.SQLite }

// EngineTx is gate.EngineTx's way in: the *sql.Tx effects run in.
func (t *Tx) EngineTx() any { return t.tx }

// toolRow is a gate.Row: no row is vocab.ErrNotFound.
type toolRow struct{ row *sql.Row }

func (r toolRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return vocab.ErrNotFound
	}
	return err
}

// executor runs the gate's statements on the database or in a transaction.
type executor struct {
	q querier
	// tx is the transaction q is, or nil on the pool.
	tx    *sql.Tx
	stmts *stmtCache
	// store begins the transactions of writes that need one on the pool.
	store *Store
}

// stmt returns query prepared, or nil to run it unprepared. On the pool it
// prepares query if needed; in a transaction it uses the store's prepared
// statement (prepared before Begin) on the transaction's connection.
func (e executor) stmt(ctx context.Context, query string) *sql.Stmt {
	if e.tx == nil {
		return e.stmts.prepare(ctx, query)
	}
	if st := e.stmts.lookup(query); st != nil {
		return e.tx.StmtContext(ctx, st)
	}
	return nil
}

func (e executor) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if st := e.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return e.q.QueryRowContext(ctx, query, args...)
}

func (e executor) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := e.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return e.q.QueryContext(ctx, query, args...)
}

func (e executor) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := e.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return e.q.ExecContext(ctx, query, args...)
}

// errs tells database/sql's and SQLite's errors apart for translate.
var errs = enginesql.Errors{NoRows: sql.ErrNoRows, Duplicate: constraintViolation, Unavailable: Unavailable}

// translate maps the driver's errors to domain's sentinels (see
// enginesql.Errors.Translate).
func translate(err error) error { return errs.Translate(err) }

// constraintViolation reports a unique or primary key violation and
// SQLite's message naming it.
func constraintViolation(err error) (string, bool) {
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		switch sqliteErr.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return sqliteErr.Error(), true
		}
	}
	return "", false
}

// Unavailable reports whether err means the database cannot be used right
// now (a retryable condition: the write lock stayed busy past BusyTimeout,
// the file cannot be opened, the disk failed or is full, the deadline
// passed), as opposed to a statement error.
func Unavailable(err error) bool {
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		switch sqliteErr.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, driver.ErrBadConn)
}
