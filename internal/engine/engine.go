// Package engine is the contract between idemgate and a database engine: a
// Driver. Each engine is one driver package (pgengine, sqliteengine) that
// owns its SQL, its migrations, its River driver and its transactions;
// idemgate.Open picks one from DATABASE_URL (package drivers), and nothing
// else asks which engine it runs on. Where engines really differ (SQLite
// runs the worker inside the api process), the Driver says so as a
// property.
package engine

import (
	"context"
	"io/fs"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/store"
)

// Driver is one engine on one open database.
type Driver interface {
	// Engine names the engine, as gate.Tx.Engine does: "postgres" or
	// "sqlite" (gate.Postgres, gate.SQLite).
	Engine() string
	// Store is the engine's store on the database. Its transactions are
	// the engine's gate.Tx.
	Store() Store
	// Migrate applies River's pending migrations, then idemgate's. It is
	// safe to call repeatedly and from several processes at once.
	Migrate(ctx context.Context, logger *slog.Logger) (*Result, error)
	// MigrateApp applies a team's own goose SQL migrations (fsys) after
	// idemgate's, with AppTable as their version table, and reports how
	// many it applied.
	MigrateApp(ctx context.Context, fsys fs.FS, logger *slog.Logger) (int, error)
	// MigrateLine applies one line of goose SQL migrations besides
	// idemgate's (fsys), recorded in its own version table, and reports
	// how many it applied: MigrateApp is the line of AppTable, the
	// built-in tools' have theirs.
	MigrateLine(ctx context.Context, fsys fs.FS, table string, logger *slog.Logger) (int, error)
	// Migrated reports whether every River and idemgate migration this
	// binary knows is applied. It only reads.
	Migrated(ctx context.Context) (bool, error)
	// EmbeddedWorker reports whether the worker runs inside the api
	// process, with the api's one River client (SQLite: one writer per
	// file), rather than in worker processes of its own.
	EmbeddedWorker() bool
	// LockWait is how long a transaction may wait for another process's
	// write lock before it fails as unavailable: 0 where writers do not
	// wait for one another's transactions (Postgres).
	LockWait() time.Duration
	// ClaimCounts counts the claims by status.
	ClaimCounts(ctx context.Context) (map[string]int64, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close closes the database.
	Close()
}

// Store is what each engine's store implements: the gate's store and
// every interface of package store.
type Store interface {
	core.Store
	store.Tokens
	store.Seeder
	store.TenantSettings
	store.ApprovalNotices
}

// AppTable is the version table of a team's own migrations run through
// Options.Migrations, apart from idemgate's (migrations.Table) so that the
// two lines never collide.
const AppTable = "app_goose_db_version"

// Result reports what one Migrate call applied.
type Result struct {
	// RiverApplied is the number of River migrations applied by this call.
	RiverApplied int `json:"river_applied"`
	// IdemgateApplied is the number of idemgate (goose) migrations applied by
	// this call.
	IdemgateApplied int `json:"idemgate_applied"`
}
