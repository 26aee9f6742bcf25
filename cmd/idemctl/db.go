package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/store"
)

// database is an open Postgres pool or SQLite file. Every command works on
// both engines.
type database struct {
	pool *pgxpool.Pool
	db   *sql.DB
}

// data is what the commands read and write besides River.
type data interface {
	gate.Store
	store.Tokens
	store.Seeder
}

// openDatabase opens DATABASE_URL: unset or sqlite:PATH opens (creating)
// the SQLite file, as the embedded quickstart does.
func (a *app) openDatabase(ctx context.Context) (*database, error) {
	if a.cfg.Driver() == config.DriverPostgres {
		pool, err := a.openPostgres(ctx)
		if err != nil {
			return nil, err
		}
		return &database{pool: pool}, nil
	}
	db, err := sqliteengine.Open(a.cfg.SQLitePath())
	if err != nil {
		return nil, err
	}
	return &database{db: db}, nil
}

// openExistingDatabase is openDatabase for the commands that read and
// change operations (op, prune): a SQLite file that does not exist is an
// error, not created.
func (a *app) openExistingDatabase(ctx context.Context) (*database, error) {
	if a.cfg.Driver() == config.DriverSQLite {
		path := a.cfg.SQLitePath()
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: no SQLite database at %s (run the api, or idemctl migrate, first)", config.EnvDatabaseURL, path)
		}
	}
	return a.openDatabase(ctx)
}

func (d *database) Close() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.db != nil {
		_ = d.db.Close()
	}
}

func (d *database) data() data {
	if d.pool != nil {
		return pgengine.New(d.pool)
	}
	return sqliteengine.New(d.db)
}

// ops assembles the gate with an insert-only River client, as the api
// does, for op redrive and prune.
func (d *database) ops(a *app) (*idemgateapp.Ops, error) {
	if d.pool != nil {
		return idemgateapp.NewOps(a.cfg, d.pool, a.logger)
	}
	return idemgateapp.NewOpsSQLite(a.cfg, d.db, a.logger)
}

func (d *database) migrate(ctx context.Context, a *app) (*engine.Result, error) {
	if d.pool != nil {
		if a.cfg.Pooled() {
			return nil, pgengine.ErrMigrateThroughPooler
		}
		return pgengine.Migrate(ctx, d.pool, a.logger)
	}
	return sqliteengine.Migrate(ctx, d.db, a.logger)
}
