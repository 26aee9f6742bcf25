package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

// AppTable is the version table of a team's own migrations, apart from
// idemgate's (goose_db_version) so that the two lines never collide.
const AppTable = "app_goose_db_version"

// MigrateAppPostgres applies a team's own goose SQL migrations (fsys, files
// such as 00001_coupons.sql) after idemgate's, under the same advisory lock,
// and reports how many it applied.
func MigrateAppPostgres(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, logger *slog.Logger) (_ int, retErr error) {
	if pool == nil || fsys == nil {
		return 0, errors.New("migrations: pool and fsys are required")
	}
	unlock, err := lockPostgres(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer func() { retErr = errors.Join(retErr, unlock()) }()
	db := stdlib.OpenDBFromPool(pool) // closing db leaves the pool open
	defer db.Close()
	return upApp(ctx, database.DialectPostgres, db, fsys, logger)
}

// MigrateAppSQLite applies a team's own goose SQL migrations to a SQLite
// database from sqlitestore.Open, after idemgate's, one version at a time
// as MigrateSQLite does, so that concurrent migrators apply each version
// once.
func MigrateAppSQLite(ctx context.Context, db *sql.DB, fsys fs.FS, logger *slog.Logger) (int, error) {
	if db == nil || fsys == nil {
		return 0, errors.New("migrations: db and fsys are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	provider, err := newSQLiteProviderFS(db, fsys, AppTable, logger)
	if err != nil {
		return 0, fmt.Errorf("migrations: app migrations: %w", err)
	}
	return stepSQLite(ctx, logger, "app", func() (bool, error) {
		_, err := provider.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("migrations: app up: %w", err)
		}
		return true, nil
	})
}

func upApp(ctx context.Context, dialect database.Dialect, db *sql.DB, fsys fs.FS, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	store, err := database.NewStore(dialect, AppTable)
	if err != nil {
		return 0, err
	}
	provider, err := goose.NewProvider("", db, fsys, goose.WithStore(store), goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger))
	if err != nil {
		return 0, fmt.Errorf("migrations: app migrations: %w", err)
	}
	res, err := provider.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: app up: %w", err)
	}
	return len(res), nil
}
