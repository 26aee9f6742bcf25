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
// and reports how many it applied. It is MigrateLinePostgres with AppTable.
func MigrateAppPostgres(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, logger *slog.Logger) (int, error) {
	return MigrateLinePostgres(ctx, pool, fsys, AppTable, logger)
}

// MigrateLinePostgres applies one line of goose SQL migrations besides
// idemgate's own (fsys, files such as 00001_coupons.sql), recorded in its
// own version table, under idemgate's advisory lock, and reports how many
// it applied. A team's migrations use AppTable; the built-in tools' their
// own table.
func MigrateLinePostgres(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, table string, logger *slog.Logger) (_ int, retErr error) {
	if pool == nil || fsys == nil || table == "" {
		return 0, errors.New("migrations: pool, fsys and table are required")
	}
	unlock, err := lockPostgres(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer func() { retErr = errors.Join(retErr, unlock()) }()
	db := stdlib.OpenDBFromPool(pool) // closing db leaves the pool open
	defer db.Close()
	return upLine(ctx, database.DialectPostgres, db, fsys, table, logger)
}

// MigrateAppSQLite applies a team's own goose SQL migrations to a SQLite
// database from sqlitestore.Open, after idemgate's, one version at a time
// as MigrateSQLite does, so that concurrent migrators apply each version
// once. It is MigrateLineSQLite with AppTable.
func MigrateAppSQLite(ctx context.Context, db *sql.DB, fsys fs.FS, logger *slog.Logger) (int, error) {
	return MigrateLineSQLite(ctx, db, fsys, AppTable, logger)
}

// MigrateLineSQLite is MigrateLinePostgres on a SQLite database from
// sqlitestore.Open: one version at a time, as MigrateSQLite applies its
// own, so that concurrent migrators apply each version once.
func MigrateLineSQLite(ctx context.Context, db *sql.DB, fsys fs.FS, table string, logger *slog.Logger) (int, error) {
	if db == nil || fsys == nil || table == "" {
		return 0, errors.New("migrations: db, fsys and table are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	provider, err := newSQLiteProviderFS(db, fsys, table, logger)
	if err != nil {
		return 0, fmt.Errorf("migrations: %s migrations: %w", table, err)
	}
	return stepSQLite(ctx, logger, table, func() (bool, error) {
		_, err := provider.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("migrations: %s up: %w", table, err)
		}
		return true, nil
	})
}

func upLine(ctx context.Context, dialect database.Dialect, db *sql.DB, fsys fs.FS, table string, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	store, err := database.NewStore(dialect, table)
	if err != nil {
		return 0, err
	}
	provider, err := goose.NewProvider("", db, fsys, goose.WithStore(store), goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger))
	if err != nil {
		return 0, fmt.Errorf("migrations: %s migrations: %w", table, err)
	}
	res, err := provider.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: %s up: %w", table, err)
	}
	return len(res), nil
}
