package sqliteengine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgate/idemgate/internal/engine"

	"github.com/idemgate/idemgate/migrations"
)

// MigrateAttempts bounds how many times in a row Migrate tries
// to apply one version when a concurrent migrator of the same file applied
// it first (see Migrate).
const MigrateAttempts = 5

// sqliteRetryBackoff is the pause before another attempt, times the number
// of failed attempts so far.
const sqliteRetryBackoff = 50 * time.Millisecond

// Migrate applies River's pending SQLite migrations and then
// idemgate's pending core SQLite migrations (migrations.Core, recorded in
// migrations.Table) to db, and reports how many of each it applied. A
// database whose core versions an earlier release recorded in goose's
// default table has them copied to migrations.Table first
// (engine.AdoptLegacyVersions), in one transaction. It is safe to call repeatedly (a second call applies nothing)
// and from several processes at once.
//
// SQLite has no advisory lock to serialize migrators on. Instead,
// Migrate applies one version at a time, each in a transaction of its
// own together with its version record; River's versions in transactions
// that take the write lock first, so concurrent migrators queue for it. A
// migrator that loses a race (goose's versions) to another one on the same
// version fails on it without leaving a trace, waits a little and tries
// again, up to MigrateAttempts times in a row, and then finds the
// version applied and goes on. Result counts exactly what this call applied.
//
// db should come from sqliteengine.Open (WAL, busy timeout, BEGIN IMMEDIATE).
// A nil logger discards River's and goose's logs.
func Migrate(ctx context.Context, db *sql.DB, logger *slog.Logger) (*engine.Result, error) {
	if db == nil {
		return nil, errors.New("sqliteengine: migrations: db is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	riverMigrator, err := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("sqliteengine: migrations: river migrator: %w", err)
	}
	provider, err := newSQLiteProvider(db, logger)
	if err != nil {
		return nil, err
	}

	res := &engine.Result{}
	// River's line is applied in one transaction that begins IMMEDIATE
	// (Open's DSN): it holds the write lock from the start, so a concurrent
	// migrator waits for it (busy timeout) and then finds nothing to do,
	// instead of racing it version by version.
	res.RiverApplied, err = stepSQLite(ctx, logger, "river", func() (bool, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return false, fmt.Errorf("sqliteengine: migrations: river up: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		r, err := riverMigrator.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{MaxSteps: 1})
		if err != nil {
			return false, fmt.Errorf("sqliteengine: migrations: river up: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return false, fmt.Errorf("sqliteengine: migrations: river up: %w", err)
		}
		return len(r.Versions) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	if err := adoptSQLite(ctx, db, logger); err != nil {
		return nil, err
	}
	res.IdemgateApplied, err = stepSQLite(ctx, logger, "idemgate", func() (bool, error) {
		_, err := provider.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("sqliteengine: migrations: idemgate up: %w", err)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if _, _, err := MoveLegacyJobs(ctx, db, logger); err != nil {
		return nil, err
	}

	logger.InfoContext(ctx, "migrations applied",
		slog.Int("river_applied", res.RiverApplied),
		slog.Int("idemgate_applied", res.IdemgateApplied))
	return res, nil
}

// stepSQLite calls step, which applies the next pending version of one
// migration line and reports whether there was one, until none is left, and
// returns how many it applied. A failed step is tried again, after a pause,
// up to MigrateAttempts times in a row.
func stepSQLite(ctx context.Context, logger *slog.Logger, line string, step func() (bool, error)) (int, error) {
	applied, failures := 0, 0
	for {
		more, err := step()
		if err == nil {
			if !more {
				return applied, nil
			}
			applied++
			failures = 0
			continue
		}
		if errors.Is(err, errVersionApplied) {
			// Another migrator applied it first; nothing of ours was kept.
			logger.DebugContext(ctx, "sqliteengine: migrations: version applied by a concurrent migrator", slog.String("line", line), slog.Any("error", err))
			continue
		}
		failures++
		if failures == MigrateAttempts || ctx.Err() != nil {
			return applied, err
		}
		logger.WarnContext(ctx, "sqliteengine: migrations: version not applied; trying again (a concurrent migrator may have applied it first)",
			slog.String("line", line), slog.Int("attempt", failures), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return applied, errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(failures) * sqliteRetryBackoff):
		}
	}
}

// Status reports whether every River migration and every idemgate
// migration known to this binary has been applied to db. It only reads: on
// a database never migrated it answers false without creating goose's
// version table. An error means the state could not be read.
func Status(ctx context.Context, db *sql.DB) (ok bool, err error) {
	if db == nil {
		return false, errors.New("sqliteengine: migrations: db is nil")
	}
	discard := slog.New(slog.DiscardHandler)

	riverMigrator, err := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: discard})
	if err != nil {
		return false, fmt.Errorf("sqliteengine: migrations: river migrator: %w", err)
	}
	existing, err := riverMigrator.ExistingVersions(ctx)
	if err != nil {
		return false, fmt.Errorf("sqliteengine: migrations: river existing versions: %w", err)
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
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
		migrations.Table).Scan(&n); err != nil {
		return false, fmt.Errorf("sqliteengine: migrations: look up %s: %w", migrations.Table, err)
	}
	if n == 0 {
		return false, nil
	}

	provider, err := newSQLiteProvider(db, discard)
	if err != nil {
		return false, err
	}
	pending, err := provider.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("sqliteengine: migrations: idemgate pending: %w", err)
	}
	return !pending, nil
}

// newSQLiteProvider returns a goose provider over idemgate's core SQLite
// migrations, recorded in migrations.Table through sqliteVersionStore.
func newSQLiteProvider(db *sql.DB, logger *slog.Logger) (*goose.Provider, error) {
	return newSQLiteProviderFS(db, migrations.Core(migrations.SQLite), migrations.Table, logger)
}

// adoptSQLite runs engine.AdoptLegacyVersions in a transaction of its own,
// which begins IMMEDIATE (Open's DSN): concurrent migrators queue for the
// write lock, and those after the first find migrations.Table there.
func adoptSQLite(ctx context.Context, db *sql.DB, logger *slog.Logger) (retErr error) {
	store, err := database.NewStore(database.DialectSQLite3, migrations.Table)
	if err != nil {
		return fmt.Errorf("sqliteengine: migrations: goose store: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqliteengine: migrations: %w", err)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, tx.Rollback())
		}
	}()
	n, err := engine.AdoptLegacyVersions(ctx, tx, store, func(ctx context.Context, tx *sql.Tx, table string) (bool, error) {
		var n int
		err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&n)
		return n > 0, err
	})
	if err != nil {
		return fmt.Errorf("sqliteengine: migrations: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqliteengine: migrations: adopt versions: %w", err)
	}
	if n > 0 {
		logger.InfoContext(ctx, "migrations: idemgate's versions copied from goose's default table",
			slog.String("from", goose.DefaultTablename), slog.String("to", migrations.Table), slog.Int("rows", n))
	}
	return nil
}

func newSQLiteProviderFS(db *sql.DB, fsys fs.FS, table string, logger *slog.Logger) (*goose.Provider, error) {
	store, err := database.NewStore(database.DialectSQLite3, table)
	if err != nil {
		return nil, fmt.Errorf("sqliteengine: migrations: goose store: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectCustom, db, fsys,
		goose.WithStore(sqliteVersionStore{Store: store}),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
	)
	if err != nil {
		return nil, fmt.Errorf("sqliteengine: migrations: goose provider: %w", err)
	}
	return provider, nil
}

// errVersionApplied is sqliteVersionStore's refusal to record a version a
// second time.
var errVersionApplied = errors.New("sqliteengine: migrations: version already applied by a concurrent migrator")

// sqliteVersionStore is goose's SQLite version table, refusing to record a
// version that is already recorded.
//
// goose picks the next pending version before its transaction begins, so two
// migrators of one file may both pick version N: the second one's
// transaction waits for the write lock (BEGIN IMMEDIATE) while the first
// applies N, then runs N's statements again. A migration that can run twice
// (a table rebuild, IF EXISTS, SELECT 1) then succeeds twice and is recorded
// twice: the defect TestMigrate/ConcurrentMigrators found (version 11,
// a table rebuild, applied up to four times by five migrators). goose
// records a version in the same transaction as its statements, after them;
// Insert looks in that transaction, which holds the write lock, and refuses,
// so the second run rolls back whole and stepSQLite moves on to the next
// pending version.
type sqliteVersionStore struct{ database.Store }

func (s sqliteVersionStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.Tablename()+" WHERE version_id = ? AND is_applied", req.Version).Scan(&n)
	if err != nil {
		return fmt.Errorf("sqliteengine: migrations: look up version %d: %w", req.Version, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %d", errVersionApplied, req.Version)
	}
	return s.Store.Insert(ctx, db, req)
}

// MigrateApp applies a team's own goose SQL migrations to a SQLite
// database from Open, after idemgate's, one version at a time as Migrate
// does, so that concurrent migrators apply each version once. It is
// MigrateLine with engine.AppTable.
func MigrateApp(ctx context.Context, db *sql.DB, fsys fs.FS, logger *slog.Logger) (int, error) {
	return MigrateLine(ctx, db, fsys, engine.AppTable, logger)
}

// MigrateLine applies one line of goose SQL migrations besides
// idemgate's own (fsys), recorded in its own version table, on a SQLite
// database from Open: one version at a time, as Migrate applies its own,
// so that concurrent migrators apply each version once.
func MigrateLine(ctx context.Context, db *sql.DB, fsys fs.FS, table string, logger *slog.Logger) (int, error) {
	if db == nil || fsys == nil || table == "" {
		return 0, errors.New("sqliteengine: migrations: db, fsys and table are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	provider, err := newSQLiteProviderFS(db, fsys, table, logger)
	if err != nil {
		return 0, fmt.Errorf("sqliteengine: migrations: %s migrations: %w", table, err)
	}
	return stepSQLite(ctx, logger, table, func() (bool, error) {
		_, err := provider.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("sqliteengine: migrations: %s up: %w", table, err)
		}
		return true, nil
	})
}
