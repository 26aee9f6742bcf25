package pgengine

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

	"github.com/idemgate/idemgate/internal/engine"
)

// MigrateApp applies a team's own goose SQL migrations (fsys, files
// such as 00001_coupons.sql) after idemgate's, under the same advisory lock,
// and reports how many it applied. It is MigrateLine with engine.AppTable.
func MigrateApp(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, logger *slog.Logger) (int, error) {
	return MigrateLine(ctx, pool, fsys, engine.AppTable, logger)
}

// MigrateLine applies one line of goose SQL migrations besides
// idemgate's own (fsys, files such as 00001_coupons.sql), recorded in its
// own version table, under idemgate's advisory lock, and reports how many
// it applied. A team's migrations use engine.AppTable; the built-in
// tools' their own table.
func MigrateLine(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, table string, logger *slog.Logger) (_ int, retErr error) {
	if pool == nil || fsys == nil || table == "" {
		return 0, errors.New("pgengine: migrations: pool, fsys and table are required")
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
		return 0, fmt.Errorf("pgengine: migrations: %s migrations: %w", table, err)
	}
	res, err := provider.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgengine: migrations: %s up: %w", table, err)
	}
	return len(res), nil
}
