package sqliteengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
)

// Driver is the SQLite engine.Driver on a database from Open.
type Driver struct {
	db    *sql.DB
	store *Store
	// borrowed: the handle is the caller's (BorrowDriver), left open.
	borrowed bool
}

var (
	_ engine.Driver = (*Driver)(nil)
)

// ErrNoDatabase is OpenDriver's error, with existing set, for a file that
// does not exist.
var ErrNoDatabase = errors.New("no SQLite database")

// OpenDriver opens (with Open) the database file at path and returns the
// Driver on it, which owns it. With existing, a file that does not exist
// is ErrNoDatabase rather than created.
func OpenDriver(path string, existing bool) (*Driver, error) {
	if existing {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s (run the api, or idemctl migrate, first)", ErrNoDatabase, path)
		}
	}
	db, err := Open(path)
	if err != nil {
		return nil, err
	}
	return NewDriver(db), nil
}

// NewDriver returns the Driver on db, which should come from Open; Close
// closes it. It panics if db is nil.
func NewDriver(db *sql.DB) *Driver { return &Driver{db: db, store: New(db)} }

// DB returns the driver's database.
func (d *Driver) DB() *sql.DB { return d.db }

// Engine implements engine.Driver.
func (d *Driver) Engine() string { return core.SQLite }

// Store implements engine.Driver.
func (d *Driver) Store() engine.Store { return d.store }

// Migrate implements engine.Driver with Migrate, one version at a time.
func (d *Driver) Migrate(ctx context.Context, logger *slog.Logger) (*engine.Result, error) {
	return Migrate(ctx, d.db, logger)
}

// MigrateApp implements engine.Driver with MigrateApp.
func (d *Driver) MigrateApp(ctx context.Context, fsys fs.FS, logger *slog.Logger) (int, error) {
	return MigrateApp(ctx, d.db, fsys, logger)
}

// MigrateLine implements engine.Driver with MigrateLine.
func (d *Driver) MigrateLine(ctx context.Context, fsys fs.FS, table string, logger *slog.Logger) (int, error) {
	return MigrateLine(ctx, d.db, fsys, table, logger)
}

// Migrated implements engine.Driver with Status.
func (d *Driver) Migrated(ctx context.Context) (bool, error) { return Status(ctx, d.db) }

// EmbeddedWorker implements engine.Driver: one writer per file, so the
// worker runs inside the api process on its one River client.
func (d *Driver) EmbeddedWorker() bool { return EmbeddedWorker }

// EmbeddedWorker is Driver.EmbeddedWorker, known before opening a
// database (drivers.EmbeddedWorker).
const EmbeddedWorker = true

// LockWait implements engine.Driver: BusyTimeout.
func (d *Driver) LockWait() time.Duration { return BusyTimeout }

// ClaimCounts implements engine.Driver.
func (d *Driver) ClaimCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := d.db.QueryContext(ctx, sqlClaimCounts)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return nil, err
		}
		out[status] = n
	}
	return out, translate(rows.Err())
}

// Ping implements engine.Driver.
func (d *Driver) Ping(ctx context.Context) error { return translate(d.db.PingContext(ctx)) }

// Close implements engine.Driver: it closes the store's statements and
// the database, unless the database is the caller's (BorrowDriver).
func (d *Driver) Close() {
	_ = d.store.Close()
	if !d.borrowed {
		_ = d.db.Close()
	}
}
