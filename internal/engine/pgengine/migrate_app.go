package pgengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/idemgate/idemgate/internal/engine"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

// MigrateApp applies a team's own goose SQL migrations (fsys, files
// such as 00001_coupons.sql) after idemgate's, under the same advisory lock,
// and reports how many it applied.
func MigrateApp(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, logger *slog.Logger) (_ int, retErr error) {
	if pool == nil || fsys == nil {
		return 0, errors.New("pgengine: migrations: pool and fsys are required")
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

func upApp(ctx context.Context, dialect database.Dialect, db *sql.DB, fsys fs.FS, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	store, err := database.NewStore(dialect, engine.AppTable)
	if err != nil {
		return 0, err
	}
	provider, err := goose.NewProvider("", db, fsys, goose.WithStore(store), goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger))
	if err != nil {
		return 0, fmt.Errorf("pgengine: migrations: app migrations: %w", err)
	}
	res, err := provider.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgengine: migrations: app up: %w", err)
	}
	return len(res), nil
}
