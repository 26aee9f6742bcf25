package pgengine

import (
	"context"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
)

// Driver is the Postgres engine.Driver on a pool.
type Driver struct {
	pool   *pgxpool.Pool
	store  *Store
	pooled bool
	// borrowed: the pool is the caller's (BorrowDriver), left open.
	borrowed bool
}

var (
	_ engine.Driver = (*Driver)(nil)
)

// Open opens a pool with the process's settings (OpenPostgresConfig) and
// returns the Driver on it, which owns the pool.
func Open(ctx context.Context, s Settings, logger *slog.Logger) (*Driver, error) {
	pool, err := OpenPostgresConfig(ctx, s, logger)
	if err != nil {
		return nil, err
	}
	return NewDriver(pool, s.Pooled), nil
}

// NewDriver returns the Driver on pool; Close closes the pool. pooled says
// whether the pool goes through a transaction pooler, through which
// Migrate refuses to run. It panics if pool is nil.
func NewDriver(pool *pgxpool.Pool, pooled bool) *Driver {
	return &Driver{pool: pool, store: New(pool), pooled: pooled}
}

// Pool returns the driver's pool.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Engine implements engine.Driver.
func (d *Driver) Engine() string { return core.Postgres }

// Store implements engine.Driver.
func (d *Driver) Store() engine.Store { return d.store }

// Migrate implements engine.Driver with Migrate under MigrateLockKey. It
// returns ErrMigrateThroughPooler through a transaction pooler.
func (d *Driver) Migrate(ctx context.Context, logger *slog.Logger) (*engine.Result, error) {
	if d.pooled {
		return nil, ErrMigrateThroughPooler
	}
	return Migrate(ctx, d.pool, logger)
}

// MigrateApp implements engine.Driver with MigrateApp.
func (d *Driver) MigrateApp(ctx context.Context, fsys fs.FS, logger *slog.Logger) (int, error) {
	if d.pooled {
		return 0, ErrMigrateThroughPooler
	}
	return MigrateApp(ctx, d.pool, fsys, logger)
}

// MigrateLine implements engine.Driver with MigrateLine.
func (d *Driver) MigrateLine(ctx context.Context, fsys fs.FS, table string, logger *slog.Logger) (int, error) {
	if d.pooled {
		return 0, ErrMigrateThroughPooler
	}
	return MigrateLine(ctx, d.pool, fsys, table, logger)
}

// Migrated implements engine.Driver with Status.
func (d *Driver) Migrated(ctx context.Context) (bool, error) { return Status(ctx, d.pool) }

// EmbeddedWorker implements engine.Driver: on Postgres the api and any
// number of workers are processes of their own.
func (d *Driver) EmbeddedWorker() bool { return EmbeddedWorker }

// EmbeddedWorker is Driver.EmbeddedWorker, known before opening a
// database (drivers.EmbeddedWorker).
const EmbeddedWorker = false

// LockWait implements engine.Driver: Postgres's writers lock rows, not the
// database.
func (d *Driver) LockWait() time.Duration { return 0 }

// ClaimCounts implements engine.Driver.
func (d *Driver) ClaimCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := d.pool.Query(ctx, sqlClaimCounts)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return nil, err
		}
		out[status] = n
	}
	return out, translate(rows.Err())
}

// Ping implements engine.Driver; a refusal for too many clients names the
// setting that bounds the connections (ExplainConnError).
func (d *Driver) Ping(ctx context.Context) error { return ExplainConnError(d.pool.Ping(ctx)) }

// Close implements engine.Driver: it closes the pool, unless the pool is
// the caller's (BorrowDriver).
func (d *Driver) Close() {
	if !d.borrowed {
		d.pool.Close()
	}
}
