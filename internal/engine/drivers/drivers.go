// Package drivers opens the engine driver that DATABASE_URL names: the one
// place that chooses between the engines (idemgate.Open and idemctl call
// it; the commands ask EmbeddedWorker before opening anything).
package drivers

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
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
}

// Open opens cfg's database with its engine's driver: Postgres for a
// postgres:// URL, the SQLite file otherwise. Close the driver when done.
// A Postgres pool connects lazily: Open does not wait for the server.
func Open(ctx context.Context, cfg *config.Config, opts *Options) (engine.Driver, error) {
	if opts == nil {
		opts = &Options{}
	}
	if cfg.Driver() == config.DriverPostgres {
		d, err := pgengine.Open(ctx, cfg, opts.MaxConns, opts.Logger)
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
