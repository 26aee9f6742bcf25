// Package pgengine is idemgate's Postgres driver, on pgx: its Store
// implements both core.Store (claims, tombstones, audit, River job reads)
// and package store's interfaces (tokens, orders, seeding, domain rows) on
// one pool, and domain writes join the gate transaction (Tx) they are
// given. It also owns the pool's configuration (pool.go), the migrations
// (migrations/ and migrate.go, under an advisory lock) and River's
// riverpgxv5 driver.
//
// Errors are translated at the boundary: no rows is vocab.ErrNotFound, a
// unique violation vocab.ErrAlreadyExists, an unreachable database
// vocab.ErrUnavailable (see Unavailable).
//
// queries.go holds all the SQL, in Go, rather than sqlc output: the
// claim statements share one column list and a clock-override expression
// (computed), which sqlc, taking each query as written, cannot share; and
// the SQLite twin needs text-time helpers, on sqlc support its docs call beta.
package pgengine

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/internal/enginesql"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Store is the Postgres engine on a pool: a core.Store and every
// interface of package store.
type Store struct {
	executor
	pool *pgxpool.Pool
}

var (
	_ engine.Store     = (*Store)(nil)
	_ core.Savepointer = (*Tx)(nil)
	_ core.Pipeliner   = (*Tx)(nil)
)

// New returns a Store on pool. It panics if pool is nil.
func New(pool *pgxpool.Pool) *Store {
	if pool == nil {
		panic("pgengine.New: pool is nil")
	}
	return &Store{executor: executor{q: pool}, pool: pool}
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Begin starts a READ COMMITTED transaction.
func (s *Store) Begin(ctx context.Context) (core.Tx, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, translate(err)
	}
	return &Tx{executor: executor{q: tx}, tx: tx}, nil
}

// BeginRead starts a READ ONLY transaction (api.ReadBeginner): a write
// through it fails with SQLSTATE 25006.
func (s *Store) BeginRead(ctx context.Context) (core.Tx, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, translate(err)
	}
	return &Tx{executor: executor{q: tx}, tx: tx}, nil
}

// Tx is a Postgres gate.Tx, and the gate.Tx effects see.
type Tx struct {
	executor
	tx pgx.Tx
}

// Commit commits the transaction.
func (t *Tx) Commit(ctx context.Context) error { return translate(t.tx.Commit(ctx)) }

// Rollback rolls the transaction back; after Commit it is a no-op.
func (t *Tx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return translate(err)
}

// DriverTx returns the pgx.Tx, for River's InsertTx and JobCompleteTx
// (jobs.DriverTx).
func (t *Tx) DriverTx() pgx.Tx { return t.tx }

// Savepoint implements core.Savepointer.
func (t *Tx) Savepoint(ctx context.Context) error { return t.exec(ctx, sqlSavepoint) }

// RollbackToSavepoint implements core.Savepointer.
func (t *Tx) RollbackToSavepoint(ctx context.Context) error {
	return t.exec(ctx, sqlRollbackToSavepoint)
}

func (t *Tx) exec(ctx context.Context, sql string) error {
	_, err := t.tx.Exec(ctx, sql)
	return translate(err)
}

// Exec implements gate.Tx.
func (t *Tx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// QueryRow implements gate.Tx.
func (t *Tx) QueryRow(ctx context.Context, query string, args ...any) core.Row {
	return toolRow{t.tx.QueryRow(ctx, query, args...)}
}

// Query implements gate.Tx.
func (t *Tx) Query(ctx context.Context, query string, args ...any) (core.Rows, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return toolRows{rows}, nil
}

// Engine implements gate.Tx.
func (t *Tx) Engine() string { return core.Postgres }

// EngineTx is gate.EngineTx's way in: the pgx.Tx effects run in, whose
// Commit and Rollback are refused (the gate ends the transaction).
func (t *Tx) EngineTx() any { return effectTx{t.tx} }

// effectTx is the pgx.Tx an effect gets: the transaction's statements and
// nested transactions (savepoints), but not its end.
type effectTx struct{ pgx.Tx }

// errEffectEnd is effectTx's Commit and Rollback.
var errEffectEnd = errors.New("pgengine: an effect's transaction is committed or rolled back by the gate, not by the effect")

func (effectTx) Commit(context.Context) error   { return errEffectEnd }
func (effectTx) Rollback(context.Context) error { return errEffectEnd }

// toolRows are a gate.Rows: pgx's rows, whose Close reports their error.
type toolRows struct{ pgx.Rows }

func (r toolRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

// toolRow is a gate.Row: no row is vocab.ErrNotFound.
type toolRow struct{ row pgx.Row }

func (r toolRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return vocab.ErrNotFound
	}
	return err
}

// querier is what a pool and a transaction have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// executor runs the gate's statements on a pool or in a transaction.
type executor struct {
	q querier
}

// errs tells pgx's errors apart for translate.
var errs = enginesql.Errors{NoRows: pgx.ErrNoRows, Duplicate: uniqueViolation, Unavailable: Unavailable}

// translate maps the driver's errors to domain's sentinels (see
// enginesql.Errors.Translate).
func translate(err error) error { return errs.Translate(err) }

// uniqueViolation reports a unique violation and names its constraint.
func uniqueViolation(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return pgErr.ConstraintName, true
	}
	return "", false
}

// Unavailable reports whether err means the database cannot be reached or
// is not accepting work right now (a retryable condition), as opposed to a
// statement error.
func Unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || // connection exception
			strings.HasPrefix(pgErr.Code, "57P") || // admin shutdown, crash shutdown, cannot connect now
			pgErr.Code == "53300" // too many connections
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded)
}

// list runs a query on q and scans its rows with scan.
func list[T any](ctx context.Context, q querier, scan func(enginesql.Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out, err := enginesql.Collect(rows, scan)
	return out, translate(err)
}
