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
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/migrations"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/store/pgstore"
	"github.com/idemgate/idemgate/internal/store/sqlitestore"
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
	db, err := sqlitestore.Open(a.cfg.SQLitePath())
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
		return pgstore.New(d.pool)
	}
	return sqlitestore.New(d.db)
}

// ops assembles the gate with an insert-only River client, as the api
// does, for op redrive and prune.
func (d *database) ops(a *app) (*idemgateapp.Ops, error) {
	if d.pool != nil {
		return idemgateapp.NewOps(a.cfg, d.pool, a.logger)
	}
	return idemgateapp.NewOpsSQLite(a.cfg, d.db, a.logger)
}

// migrated is what migrate applied: River's and idemgate's migrations,
// then the built-in tools' (in their own version table).
type migrated struct {
	*migrations.Result
	BuiltinsApplied int `json:"builtins_applied"`
}

func (d *database) migrate(ctx context.Context, a *app) (*migrated, error) {
	var (
		res = &migrated{}
		err error
	)
	if d.pool != nil {
		if a.cfg.Pooled() {
			return nil, idemgateapp.ErrMigrateThroughPooler
		}
		if res.Result, err = migrations.MigratePostgres(ctx, d.pool, a.logger); err != nil {
			return nil, err
		}
		res.BuiltinsApplied, err = idemgateapp.MigrateBuiltinsPostgres(ctx, d.pool, a.logger)
		return res, err
	}
	if res.Result, err = migrations.MigrateSQLite(ctx, d.db, a.logger); err != nil {
		return nil, err
	}
	res.BuiltinsApplied, err = idemgateapp.MigrateBuiltinsSQLite(ctx, d.db, a.logger)
	return res, err
}
