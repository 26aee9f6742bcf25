package sqliteengine_test

import (
	"context"
	"database/sql"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/migrations"
)

// teamFS is a team's own goose migrations, numbered as goose numbers them,
// so that their versions overlap idemgate's.
var teamFS = fstest.MapFS{
	"00001_team.sql": {Data: []byte("-- +goose Up\nCREATE TABLE team_orders (id integer PRIMARY KEY, note text NOT NULL);\n-- +goose Down\nDROP TABLE team_orders;\n")},
	"00002_team.sql": {Data: []byte("-- +goose Up\nCREATE INDEX team_orders_note_idx ON team_orders (note);\n-- +goose Down\nDROP INDEX team_orders_note_idx;\n")},
	"00003_team.sql": {Data: []byte("-- +goose Up\nALTER TABLE team_orders ADD COLUMN total_cents integer;\n-- +goose Down\nALTER TABLE team_orders DROP COLUMN total_cents;\n")},
}

// teamVersions are teamFS's versions.
var teamVersions = []int64{1, 2, 3}

// teamGoose is a team's goose as its documentation shows it: goose's
// default version table.
func teamGoose(t *testing.T, db *sql.DB, fsys fstest.MapFS) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p
}

// sqliteVersions lists the versions above 0 recorded in table, in order.
func sqliteVersions(ctx context.Context, t *testing.T, db *sql.DB, table string) []int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT version_id FROM "+table+" WHERE version_id > 0 ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

func coreVersions(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// requireBothLines: idemgate's schema and version tables, the team's table
// and goose's default table holding only the team's versions.
func requireBothLines(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	requireSQLiteSchemaComplete(ctx, t, db)
	require.True(t, sqliteTableExists(ctx, t, db, "orders"), "the built-ins' tables")
	var totalCents *int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT max(total_cents) FROM team_orders").Scan(&totalCents), "the team's three migrations")
	require.Equal(t, teamVersions, sqliteVersions(ctx, t, db, goose.DefaultTablename))
	require.Equal(t, coreVersions(sqliteMigrationCount(t)), sqliteVersions(ctx, t, db, migrations.Table))
	require.Len(t, sqliteVersions(ctx, t, db, migrations.BuiltinsTable), enginetest.BuiltinMigrations(migrations.SQLite))
}

// idemgate's versions live in migrations.Table, never in goose's default
// table, so a team's own goose and idemgate's migrate do not see each
// other's versions, in either order.
func TestVersionTableSQLite(t *testing.T) {
	t.Parallel()

	t.Run("TeamGooseFirst", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)

		res, err := teamGoose(t, db, teamFS).Up(ctx)
		require.NoError(t, err)
		require.Len(t, res, 3)
		core, builtins := migrateSQLiteNow(ctx, t, db)
		require.Equal(t, sqliteMigrationCount(t), core)
		require.Equal(t, enginetest.BuiltinMigrations(migrations.SQLite), builtins)
		requireBothLines(ctx, t, db)
	})

	t.Run("IdemgateFirst", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)

		migrateSQLiteNow(ctx, t, db)
		res, err := teamGoose(t, db, teamFS).Up(ctx)
		require.NoError(t, err)
		require.Len(t, res, 3, "the team's migrations apply")
		requireBothLines(ctx, t, db)
	})

	// A team applying idemgate's files with its own goose gets the schema
	// idemgate's Migrate makes, which then finds nothing to apply.
	t.Run("TeamAppliesOurFiles", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, want := sqlitetest.NewEmptyDB(t)
		migrateSQLiteNow(ctx, t, want)

		_, db := sqlitetest.NewEmptyDB(t)
		river, err := rivermigrate.New(riversqlite.New(db), nil)
		require.NoError(t, err)
		_, err = river.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: migrations.RiverVersion})
		require.NoError(t, err)
		for _, line := range []struct {
			table string
			fsys  func(migrations.Engine) fs.FS
		}{{migrations.Table, migrations.Core}, {migrations.BuiltinsTable, migrations.Builtins}} {
			p, err := goose.NewProvider(goose.DialectSQLite3, db, line.fsys(migrations.SQLite), goose.WithTableName(line.table))
			require.NoError(t, err)
			_, err = p.Up(ctx)
			require.NoError(t, err)
		}

		require.Equal(t, sqliteSchema(ctx, t, want), sqliteSchema(ctx, t, db))
		res, err := sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, &engine.Result{}, res, "River at RiverVersion and the core files applied: nothing left")
		builtins, err := sqliteengine.MigrateLine(ctx, db, migrations.Builtins(migrations.SQLite), migrations.BuiltinsTable, nil)
		require.NoError(t, err)
		require.Zero(t, builtins)
		requireSQLiteSchemaComplete(ctx, t, db)
	})

	// A database an earlier release migrated, its core versions in goose's
	// default table beside a team's own (timestamped) version there, is
	// adopted: the core versions are copied to migrations.Table and none is
	// applied again; goose's table is left as it was.
	t.Run("LegacyAdopted", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)
		river, err := rivermigrate.New(riversqlite.New(db), nil)
		require.NoError(t, err)
		_, err = river.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)
		legacy := fstest.MapFS{"20240101000000_team.sql": teamFS["00001_team.sql"]}
		files, err := fs.Glob(migrations.Core(migrations.SQLite), "*.sql")
		require.NoError(t, err)
		for _, f := range files[:engine.LegacyLastVersion] { // what such a release had
			b, err := fs.ReadFile(migrations.Core(migrations.SQLite), f)
			require.NoError(t, err)
			legacy[f] = &fstest.MapFile{Data: b}
		}
		_, err = teamGoose(t, db, legacy).Up(ctx)
		require.NoError(t, err)
		before := sqliteVersions(ctx, t, db, goose.DefaultTablename)
		require.Equal(t, append(coreVersions(engine.LegacyLastVersion), 20240101000000), before)

		res, err := sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, &engine.Result{IdemgateApplied: sqliteMigrationCount(t) - engine.LegacyLastVersion}, res,
			"only the versions after the legacy ones applied")
		require.Equal(t, coreVersions(sqliteMigrationCount(t)), sqliteVersions(ctx, t, db, migrations.Table))
		require.Equal(t, before, sqliteVersions(ctx, t, db, goose.DefaultTablename), "goose's table untouched")
		requireSQLiteSchemaComplete(ctx, t, db)

		res, err = sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, &engine.Result{}, res)
	})

	// goose's default table without idemgate's tables is a team's own:
	// nothing of it is adopted.
	t.Run("TeamTableNotAdopted", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)
		_, err := teamGoose(t, db, teamFS).Up(ctx)
		require.NoError(t, err)
		res, err := sqliteengine.Migrate(ctx, db, nil)
		require.NoError(t, err)
		require.Equal(t, sqliteMigrationCount(t), res.IdemgateApplied)
		require.Equal(t, coreVersions(sqliteMigrationCount(t)), sqliteVersions(ctx, t, db, migrations.Table))
	})
}

// RiverVersion is the latest migration of the River release linked.
func TestRiverVersionSQLite(t *testing.T) {
	t.Parallel()
	migrator, err := rivermigrate.New(riversqlite.New(nil), nil)
	require.NoError(t, err)
	all := migrator.AllVersions()
	require.Equal(t, migrations.RiverVersion, all[len(all)-1].Version)
}
