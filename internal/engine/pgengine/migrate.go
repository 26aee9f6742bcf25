package pgengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgate/idemgate/internal/engine"

	"github.com/idemgate/idemgate/migrations"
)

// MigrateLockKey is the pg_advisory_lock key Migrate holds while it
// migrates, so that replicas starting at once apply migrations one at a time.
// It is fixed forever: changing it would let an old and a new binary migrate
// concurrently.
const MigrateLockKey int64 = 0x1de3_6a7e_0000_0001

// Migrate applies River's pending migrations and then idemgate's
// pending core migrations (migrations.Core, recorded in migrations.Table) to
// the database behind pool, and reports how many of each it applied. A
// database whose core versions an earlier release recorded in goose's
// default table has them copied to migrations.Table first
// (engine.AdoptLegacyVersions). It is safe to call repeatedly (a second call applies nothing)
// and from several processes at once: callers serialize on the session
// advisory lock MigrateLockKey.
//
// The lock is held on a connection opened from the pool's configuration but
// outside the pool, so waiting callers never hold pool connections that the
// lock holder needs (several goroutines sharing one small pool cannot
// deadlock). A nil logger discards River's and goose's logs.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (_ *engine.Result, retErr error) {
	if pool == nil {
		return nil, errors.New("pgengine: migrations: pool is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	unlock, err := lockPostgres(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, unlock()) }()

	res := &engine.Result{}

	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("pgengine: migrations: river migrator: %w", err)
	}
	riverRes, err := riverMigrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("pgengine: migrations: river up: %w", err)
	}
	res.RiverApplied = len(riverRes.Versions)

	db := stdlib.OpenDBFromPool(pool) // closing db leaves the pool open
	defer db.Close()
	if err := adoptPostgres(ctx, db, logger); err != nil {
		return nil, err
	}
	provider, err := newPostgresProvider(db, logger)
	if err != nil {
		return nil, err
	}
	gooseRes, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgengine: migrations: idemgate up: %w", err)
	}
	res.IdemgateApplied = len(gooseRes)
	if _, _, err := MoveLegacyJobs(ctx, pool, logger); err != nil {
		return nil, err
	}

	logger.InfoContext(ctx, "migrations applied",
		slog.Int("river_applied", res.RiverApplied),
		slog.Int("idemgate_applied", res.IdemgateApplied))
	return res, nil
}

// Status reports whether every River migration and every idemgate
// migration known to this binary has been applied to the database behind
// pool. It only reads: on a database never migrated it answers false without
// creating goose's version table. An error means the state could not be read
// (including a database migrated by a newer River than this binary's).
func Status(ctx context.Context, pool *pgxpool.Pool) (ok bool, err error) {
	if pool == nil {
		return false, errors.New("pgengine: migrations: pool is nil")
	}
	discard := slog.New(slog.DiscardHandler)

	riverMigrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: discard})
	if err != nil {
		return false, fmt.Errorf("pgengine: migrations: river migrator: %w", err)
	}
	existing, err := riverMigrator.ExistingVersions(ctx)
	if err != nil {
		return false, fmt.Errorf("pgengine: migrations: river existing versions: %w", err)
	}
	applied := make(map[int]bool, len(existing))
	for _, m := range existing {
		applied[m.Version] = true
	}
	for _, m := range riverMigrator.AllVersions() {
		if !applied[m.Version] {
			return false, nil
		}
	}

	// goose's HasPending creates its version table when missing; look first
	// so that a readiness probe never writes.
	var versionTable *string
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1)::text", migrations.Table).Scan(&versionTable); err != nil {
		return false, fmt.Errorf("pgengine: migrations: look up %s: %w", migrations.Table, err)
	}
	if versionTable == nil {
		return false, nil
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := newPostgresProvider(db, discard)
	if err != nil {
		return false, err
	}
	pending, err := provider.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("pgengine: migrations: idemgate pending: %w", err)
	}
	return !pending, nil
}

// newPostgresProvider returns a goose provider over idemgate's core
// Postgres migrations, recorded in migrations.Table. goose's own locker
// stays off: Migrate holds MigrateLockKey.
func newPostgresProvider(db *sql.DB, logger *slog.Logger) (*goose.Provider, error) {
	store, err := coreStore()
	if err != nil {
		return nil, err
	}
	provider, err := goose.NewProvider("", db, migrations.Core(migrations.Postgres),
		goose.WithStore(store),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
	)
	if err != nil {
		return nil, fmt.Errorf("pgengine: migrations: goose provider: %w", err)
	}
	return provider, nil
}

func coreStore() (database.Store, error) {
	store, err := database.NewStore(database.DialectPostgres, migrations.Table)
	if err != nil {
		return nil, fmt.Errorf("pgengine: migrations: goose store: %w", err)
	}
	return store, nil
}

// adoptPostgres runs engine.AdoptLegacyVersions in a transaction of its
// own; Migrate's advisory lock keeps concurrent migrators out.
func adoptPostgres(ctx context.Context, db *sql.DB, logger *slog.Logger) (retErr error) {
	store, err := coreStore()
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pgengine: migrations: %w", err)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, tx.Rollback())
		}
	}()
	n, err := engine.AdoptLegacyVersions(ctx, tx, store, func(ctx context.Context, tx *sql.Tx, table string) (bool, error) {
		var ok bool
		err := tx.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok)
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("pgengine: migrations: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("pgengine: migrations: adopt versions: %w", err)
	}
	if n > 0 {
		logger.InfoContext(ctx, "migrations: idemgate's versions copied from goose's default table",
			slog.String("from", goose.DefaultTablename), slog.String("to", migrations.Table), slog.Int("rows", n))
	}
	return nil
}

// lockPostgres takes MigrateLockKey on a connection of its own and returns
// the function that releases the lock and closes that connection.
func lockPostgres(ctx context.Context, pool *pgxpool.Pool) (unlock func() error, err error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("pgengine: migrations: connect for advisory lock: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", MigrateLockKey); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("pgengine: migrations: take advisory lock: %w", err), conn.Close(closeCtx))
	}
	return func() error {
		// Unlock even when ctx is already cancelled; closing the connection
		// would release the lock anyway, but say so explicitly.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, unlockErr := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", MigrateLockKey)
		if unlockErr != nil {
			unlockErr = fmt.Errorf("pgengine: migrations: release advisory lock: %w", unlockErr)
		}
		return errors.Join(unlockErr, conn.Close(ctx))
	}, nil
}
