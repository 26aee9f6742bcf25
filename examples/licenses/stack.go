package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/migrations"
)

// AppName is the application_name of the team's Postgres connections: in
// pg_stat_activity every connection of the service, idemgate's and
// River's included, carries it.
const AppName = "licenses"

// defaultMaxConns bounds the team's pool when DATABASE_URL names no
// pool_max_conns.
const defaultMaxConns = 10

// defaultSQLitePath is the SQLite file without DATABASE_URL, as idemgate
// names it.
const defaultSQLitePath = "idemgate.db"

// migrateLockKey is the Postgres advisory lock the team's migrators
// serialize on, across processes.
const migrateLockKey int64 = 0x6c69_6365_6e73_6573 // "licenses"

// Stack is the team's own database handle, which idemgate and the team's
// River client share: one pgx pool on Postgres, one database/sql handle on
// SQLite.
type Stack struct {
	// Engine is gate.Postgres or gate.SQLite.
	Engine string
	// Pool is the team's pool (Postgres).
	Pool *pgxpool.Pool
	// DB is the team's SQLite handle: one connection, BEGIN IMMEDIATE and
	// a busy timeout, as idemgate.Options.DB requires.
	DB *sql.DB
}

// OpenStack opens databaseURL: a postgres:// URL (its pool_max_conns
// bounds the pool, default 10), "sqlite:PATH", or "" for the SQLite file
// idemgate.db.
func OpenStack(ctx context.Context, databaseURL string) (*Stack, error) {
	lower := strings.ToLower(databaseURL)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		pcfg, err := pgxpool.ParseConfig(databaseURL)
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		if !strings.Contains(databaseURL, "pool_max_conns=") {
			pcfg.MaxConns = defaultMaxConns
		}
		if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
			pcfg.ConnConfig.RuntimeParams["application_name"] = AppName
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		return &Stack{Engine: gate.Postgres, Pool: pool}, nil
	}
	path := defaultSQLitePath
	if databaseURL != "" {
		var ok bool
		if path, ok = strings.CutPrefix(databaseURL, "sqlite://"); !ok {
			if path, ok = strings.CutPrefix(databaseURL, "sqlite:"); !ok || path == "" {
				return nil, fmt.Errorf("DATABASE_URL: %q is neither sqlite:PATH nor a postgres:// URL", databaseURL)
			}
		}
	}
	db, err := OpenSQLite(path)
	if err != nil {
		return nil, err
	}
	return &Stack{Engine: gate.SQLite, DB: db}, nil
}

// OpenSQLite opens the SQLite file at path as idemgate.Options.DB requires
// a handle: one connection (db.SetMaxOpenConns(1)), a busy timeout, and
// transactions that take the write lock when they begin
// (_txlock=immediate); WAL and foreign keys as idemgate opens its own.
func OpenSQLite(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	db, err := sql.Open("sqlite", "file:"+escaped+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// Close closes the team's handle.
func (s *Stack) Close() {
	if s.Pool != nil {
		s.Pool.Close()
	}
	if s.DB != nil {
		_ = s.DB.Close()
	}
}

// Migrate applies, with the team's own tools, River's migrations
// (rivermigrate, up to migrations.RiverVersion), idemgate's
// (migrations.Core, recorded in migrations.Table) and then the team's own
// (Migrations, recorded in goose's default table, goose_db_version). On
// Postgres the team's migrators hold an advisory lock of the team's, so
// that several processes may migrate at once; it is safe to run
// repeatedly. Do not also pass Migrations as idemgate.Options.Migrations
// on this database: idemgate would record them in a version table of its
// own and apply them a second time.
func (s *Stack) Migrate(ctx context.Context, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if s.Engine == gate.Postgres {
		return s.migratePostgres(ctx, logger)
	}
	return s.migrateSQLite(ctx, logger)
}

func (s *Stack) migratePostgres(ctx context.Context, logger *slog.Logger) (err error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", migrateLockKey); uerr != nil {
			err = errors.Join(err, fmt.Errorf("migrate: unlock: %w", uerr))
		}
	}()
	river, err := rivermigrate.New(riverpgxv5.New(s.Pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: River: %w", err)
	}
	if _, err := river.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: migrations.RiverVersion}); err != nil {
		return fmt.Errorf("migrate: River: %w", err)
	}
	db := stdlib.OpenDBFromPool(s.Pool) // closing it leaves the pool open
	defer db.Close()
	return s.gooseLines(ctx, db, goose.DialectPostgres, logger)
}

func (s *Stack) migrateSQLite(ctx context.Context, logger *slog.Logger) error {
	river, err := rivermigrate.New(riversqlite.New(s.DB), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: River: %w", err)
	}
	// In a transaction of the caller's: the handle's one connection is
	// the transaction's until it ends.
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: River: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := river.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: migrations.RiverVersion}); err != nil {
		return fmt.Errorf("migrate: River: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: River: %w", err)
	}
	return s.gooseLines(ctx, s.DB, goose.DialectSQLite3, logger)
}

// gooseLines applies idemgate's core migrations, then the team's, each
// line with its own version table.
func (s *Stack) gooseLines(ctx context.Context, db *sql.DB, dialect goose.Dialect, logger *slog.Logger) error {
	lines := []struct {
		name  string
		fsys  fs.FS
		table string
	}{
		{"idemgate", migrations.Core(migrations.Engine(s.Engine)), migrations.Table},
		{"licenses", Migrations(s.Engine), goose.DefaultTablename},
	}
	for _, l := range lines {
		p, err := goose.NewProvider(dialect, db, l.fsys,
			goose.WithTableName(l.table), goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger))
		if err != nil {
			return fmt.Errorf("migrate: %s: %w", l.name, err)
		}
		res, err := p.Up(ctx)
		if err != nil {
			return fmt.Errorf("migrate: %s: %w", l.name, err)
		}
		logger.InfoContext(ctx, "migrations applied", "line", l.name, "table", l.table, "applied", len(res))
	}
	return nil
}
