package main

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/migrations"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/pgstore"
	"github.com/idemgate/idemgate/store/sqlitestore"
)

// database is an open Postgres pool or SQLite file, for the commands that
// work on both engines (migrate, seed, token).
type database struct {
	pool *pgxpool.Pool
	db   *sql.DB
}

// data is what those commands use.
type data interface {
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

func (d *database) migrate(ctx context.Context, a *app) (*migrations.Result, error) {
	if d.pool != nil {
		return migrations.MigratePostgres(ctx, d.pool, a.logger)
	}
	return migrations.MigrateSQLite(ctx, d.db, a.logger)
}
