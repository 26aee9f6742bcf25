package sqliteengine_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/migrations"
)

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()

	t.Run("TwiceSecondIsNoop", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)

		ok, err := sqliteengine.Status(ctx, db)
		require.NoError(t, err)
		require.False(t, ok)

		res, err := sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, sqliteRiverMigrationCount(t), res.RiverApplied)
		require.Equal(t, sqliteMigrationCount(t), res.IdemgateApplied)
		requireSQLiteSchemaComplete(ctx, t, db)

		res, err = sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, &engine.Result{}, res)
		requireSQLiteSchemaComplete(ctx, t, db)
	})

	// Several processes (each with its own *sql.DB) and several goroutines
	// on one *sql.DB migrate one file at once: every call succeeds and each
	// version is applied once.
	t.Run("ConcurrentMigrators", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		path, db := sqlitetest.NewEmptyDB(t)
		dbs := []*sql.DB{db, db, sqlitetest.Open(t, path), sqlitetest.Open(t, path), sqlitetest.Open(t, path)}
		var (
			wg      sync.WaitGroup
			results = make([]*engine.Result, len(dbs))
			errs    = make([]error, len(dbs))
			start   = make(chan struct{})
		)
		for i, d := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = sqliteengine.Migrate(ctx, d, nil)
			}()
		}
		close(start)
		wg.Wait()
		var river, ours int
		for i, err := range errs {
			require.NoError(t, err, "migrator %d", i)
			river += results[i].RiverApplied
			ours += results[i].IdemgateApplied
		}
		// Where the versions land: one row per version in goose's table
		// (a version applied twice has two), one per River version.
		rows, err := db.QueryContext(ctx, "SELECT version_id, count(*) FROM "+migrations.Table+
			" WHERE version_id > 0 GROUP BY version_id HAVING count(*) > 1")
		require.NoError(t, err)
		var twice []string
		for rows.Next() {
			var v, n int
			require.NoError(t, rows.Scan(&v, &n))
			twice = append(twice, fmt.Sprintf("%d (%d times)", v, n))
		}
		require.NoError(t, rows.Err())
		require.Empty(t, twice, "versions applied more than once")
		var riverRows int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM river_migration").Scan(&riverRows))
		require.Equal(t, sqliteRiverMigrationCount(t), riverRows, "River's versions recorded")
		require.Equal(t, sqliteRiverMigrationCount(t), river, "each River version applied once in all")
		require.Equal(t, sqliteMigrationCount(t), ours, "each of our versions applied once in all")
		requireSQLiteSchemaComplete(ctx, t, db)
	})

	t.Run("DownThenUp", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewDB(t)
		provider, err := goose.NewProvider(goose.DialectSQLite3, db, migrations.Core(migrations.SQLite), goose.WithTableName(migrations.Table), goose.WithDisableGlobalRegistry(true))
		require.NoError(t, err)
		_, err = provider.DownTo(ctx, 0)
		require.NoError(t, err)
		for _, table := range ourTables {
			require.False(t, sqliteTableExists(ctx, t, db, table), "table %s left after down", table)
		}
		ok, err := sqliteengine.Status(ctx, db)
		require.NoError(t, err)
		require.False(t, ok)

		res, err := sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, &engine.Result{IdemgateApplied: sqliteMigrationCount(t)}, res)
		requireSQLiteSchemaComplete(ctx, t, db)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		_, db := sqlitetest.NewEmptyDB(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := sqliteengine.Migrate(ctx, db, nil)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("NilDB", func(t *testing.T) {
		t.Parallel()
		_, err := sqliteengine.Migrate(t.Context(), nil, nil)
		require.Error(t, err)
		_, err = sqliteengine.Status(t.Context(), nil)
		require.Error(t, err)
	})
}

func TestSQLiteStatus(t *testing.T) {
	t.Parallel()

	t.Run("Migrated", func(t *testing.T) {
		t.Parallel()
		_, db := sqlitetest.NewDB(t)
		ok, err := sqliteengine.Status(t.Context(), db)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("EmptyIsNotMigratedAndStaysEmpty", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)
		ok, err := sqliteengine.Status(ctx, db)
		require.NoError(t, err)
		require.False(t, ok)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n))
		require.Zero(t, n, "a status check writes nothing")
	})

	t.Run("RiverOnly", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)
		migrator, err := rivermigrate.New(riversqlite.New(db), nil)
		require.NoError(t, err)
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)

		ok, err := sqliteengine.Status(ctx, db)
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("OursMissingOneVersion", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewDB(t)
		_, err := db.ExecContext(ctx, "DELETE FROM "+migrations.Table+" WHERE version_id = (SELECT max(version_id) FROM "+migrations.Table+")")
		require.NoError(t, err)

		ok, err := sqliteengine.Status(ctx, db)
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("RiverMissingOneVersion", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewDB(t)
		_, err := db.ExecContext(ctx, "DELETE FROM river_migration WHERE version = (SELECT max(version) FROM river_migration)")
		require.NoError(t, err)

		ok, err := sqliteengine.Status(ctx, db)
		require.NoError(t, err)
		require.False(t, ok)
	})
}

func requireSQLiteSchemaComplete(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	for _, table := range append([]string{"river_job", "river_migration", "river_leader", "river_queue"}, ourTables...) {
		require.True(t, sqliteTableExists(ctx, t, db, table), "table %s missing", table)
	}

	var gooseVersions int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+migrations.Table+" WHERE version_id > 0").Scan(&gooseVersions))
	require.Equal(t, sqliteMigrationCount(t), gooseVersions, "each of our migrations recorded once")

	var riverVersions int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM river_migration").Scan(&riverVersions))
	require.Equal(t, sqliteRiverMigrationCount(t), riverVersions)

	ok, err := sqliteengine.Status(ctx, db)
	require.NoError(t, err)
	require.True(t, ok)
}

func sqliteTableExists(ctx context.Context, t *testing.T, db *sql.DB, table string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&n))
	return n == 1
}

func sqliteMigrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(migrations.Core(migrations.SQLite), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return len(files)
}

func sqliteRiverMigrationCount(t *testing.T) int {
	t.Helper()
	migrator, err := rivermigrate.New(riversqlite.New(nil), nil)
	require.NoError(t, err)
	return len(migrator.AllVersions())
}

// ourTables are the tables 00001_init.sql creates (the built-in tools'
// tables are theirs: see builtins_test.go).
var ourTables = []string{"idempotency_claims", "audit_events", "api_tokens"}

// A team's own SQLite migrations, applied by several migrators at once,
// are each applied once, even those that could run twice (SELECT 1).
func TestMigrateAppSQLiteConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, db := sqlitetest.NewDB(t)
	fsys := fstest.MapFS{}
	const versions = 4
	for v := 1; v <= versions; v++ {
		fsys[fmt.Sprintf("%05d_v.sql", v)] = &fstest.MapFile{Data: []byte("-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n")}
	}
	dbs := []*sql.DB{db, db, sqlitetest.Open(t, path), sqlitetest.Open(t, path), sqlitetest.Open(t, path)}
	var wg sync.WaitGroup
	applied := make([]int, len(dbs))
	errs := make([]error, len(dbs))
	start := make(chan struct{})
	for i, d := range dbs {
		wg.Go(func() {
			<-start
			applied[i], errs[i] = sqliteengine.MigrateApp(ctx, d, fsys, nil)
		})
	}
	close(start)
	wg.Wait()
	total := 0
	for i, err := range errs {
		require.NoError(t, err, "migrator %d", i)
		total += applied[i]
	}
	require.Equal(t, versions, total, "each version applied once in all")
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+engine.AppTable+" WHERE version_id > 0").Scan(&rows))
	require.Equal(t, versions, rows, "one row per version")
}
