// Package drivers opens the engine driver that DATABASE_URL names: the one
// place that chooses between the engines (idemgate.Open and idemctl call
// it; the commands ask EmbeddedWorker before opening anything).
package drivers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/jobs"
)

// Options are Open's optional settings. The zero value is valid.
type Options struct {
	// MaxConns bounds a Postgres process's connections in all unless
	// DATABASE_URL's pool_max_conns says otherwise. Default (0):
	// config.DefaultPoolMaxConns.
	MaxConns int32
	// Existing refuses a SQLite file that does not exist instead of
	// creating it.
	Existing bool
	// Logger says when Postgres refuses connections for too many clients.
	// Nil: nothing is said.
	Logger *slog.Logger
	// Pool, when set, is a Postgres pool of the caller's to use instead of
	// opening one on DATABASE_URL (which must then be empty or a
	// postgres:// URL); the driver leaves it open when closed.
	Pool *pgxpool.Pool
	// DB, when set, is a SQLite handle of the caller's to use instead of
	// opening DATABASE_URL's file (which must then be empty or sqlite:);
	// the driver leaves it open when closed.
	DB *sql.DB
}

// Open opens cfg's database with its engine's driver: Postgres for a
// postgres:// URL, the SQLite file otherwise. Close the driver when done.
// A Postgres pool connects lazily: Open does not wait for the server.
func Open(ctx context.Context, cfg *config.Config, opts *Options) (engine.Driver, error) {
	if opts == nil {
		opts = &Options{}
	}
	if opts.Pool != nil || opts.DB != nil {
		return borrow(ctx, cfg, opts)
	}
	if cfg.Driver() == config.DriverPostgres {
		d, err := pgengine.Open(ctx, PostgresSettings(cfg, opts.MaxConns), opts.Logger)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	d, err := sqliteengine.OpenDriver(cfg.SQLitePath(), opts.Existing)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.EnvDatabaseURL, err)
	}
	return d, nil
}

// EmbeddedWorker reports, without opening the database, whether the
// driver Open opens for cfg runs the worker inside the api process
// (engine.Driver.EmbeddedWorker).
func EmbeddedWorker(cfg *config.Config) bool {
	if cfg.Driver() == config.DriverPostgres {
		return pgengine.EmbeddedWorker
	}
	return sqliteengine.EmbeddedWorker
}

// borrow returns the driver on the caller's pool or handle.
func borrow(ctx context.Context, cfg *config.Config, opts *Options) (engine.Driver, error) {
	switch {
	case opts.Pool != nil && opts.DB != nil:
		return nil, errors.New("a Postgres pool and a SQLite handle are both given: give one")
	case opts.Pool != nil:
		if cfg.DatabaseURL != "" && cfg.Driver() != config.DriverPostgres {
			return nil, fmt.Errorf("%s names SQLite while a Postgres pool is given: leave it empty", config.EnvDatabaseURL)
		}
		return pgengine.BorrowDriver(opts.Pool, cfg.Pooled())
	}
	if cfg.Driver() != config.DriverSQLite {
		return nil, fmt.Errorf("%s names Postgres while a SQLite handle is given: leave it empty", config.EnvDatabaseURL)
	}
	return sqliteengine.BorrowDriver(ctx, opts.DB)
}

// NewRiver returns a new River client on drv's database (not open yet):
// riverpgxv5 on a Postgres driver's pool, riversqlite on a SQLite driver's
// handle. The drivers know nothing of River's workers; this glue does.
func NewRiver(drv engine.Driver) jobs.Client {
	switch d := drv.(type) {
	case *pgengine.Driver:
		return jobs.NewRiver[*riverpgxv5.Driver](riverpgxv5.New(d.Pool()), pgengine.Unavailable)
	case *sqliteengine.Driver:
		return jobs.NewRiver[*riversqlite.Driver](riversqlite.New(d.DB()), sqliteengine.Unavailable)
	}
	panic(fmt.Sprintf("drivers: %T is not an engine driver", drv))
}

// PostgresSettings are what the Postgres driver reads of cfg, for a process
// that may hold total connections to Postgres in all (0: the default).
func PostgresSettings(cfg *config.Config, total int32) pgengine.Settings {
	if total <= 0 {
		total = config.DefaultPoolMaxConns
	}
	return pgengine.Settings{URL: cfg.DatabaseURL, Pooled: cfg.Pooled(), ExecMode: cfg.PostgresExecMode(), MaxConns: cfg.PoolMaxConns(total)}
}
