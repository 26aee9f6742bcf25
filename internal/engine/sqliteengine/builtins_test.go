package sqliteengine_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// The built-in tools' tables moved from idemgate's core migrations (00001
// and 00002 created them until version 12) to the built-ins' own line
// (migrations.Builtins, migrations.BuiltinsTable), which creates them IF
// NOT EXISTS.
// testdata/v12 holds the two core files as they were; the other core files
// did not change.

// v12FS is idemgate's core migrations as they were before the move.
func v12FS(t *testing.T, current fs.FS) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	files, err := fs.Glob(current, "*.sql")
	require.NoError(t, err)
	for _, f := range files[:engine.LegacyLastVersion] { // that release's last was the last legacy version
		b, err := fs.ReadFile(current, f)
		require.NoError(t, err)
		out[f] = &fstest.MapFile{Data: b}
	}
	old, err := filepath.Glob(filepath.Join("testdata", "v12", "*.sql"))
	require.NoError(t, err)
	require.Len(t, old, 2)
	for _, f := range old {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		out[filepath.Base(f)] = &fstest.MapFile{Data: b}
	}
	return out
}

var sqliteSpace = regexp.MustCompile(`\s+`)

// sqliteSchema describes every object of the database but the version
// tables, with CREATE … IF NOT EXISTS read as CREATE … and runs of white
// space as one, one sorted line each.
func sqliteSchema(ctx context.Context, t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, `SELECT type, name, coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE '%db_version'`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, text string
		require.NoError(t, rows.Scan(&typ, &name, &text))
		text = sqliteSpace.ReplaceAllString(strings.Replace(text, " IF NOT EXISTS", "", 1), " ")
		out = append(out, typ+" "+name+" "+text)
	}
	require.NoError(t, rows.Err())
	slices.Sort(out)
	return out
}

func migrateSQLiteNow(ctx context.Context, t *testing.T, db *sql.DB) (core, builtins int) {
	t.Helper()
	res, err := sqliteengine.Migrate(ctx, db, nil)
	require.NoError(t, err)
	builtins, err = sqliteengine.MigrateLine(ctx, db, migrations.Builtins(migrations.SQLite), migrations.BuiltinsTable, nil)
	require.NoError(t, err)
	return res.IdemgateApplied, builtins
}

func migrateSQLiteV12(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	river, err := rivermigrate.New(riversqlite.New(db), nil)
	require.NoError(t, err)
	_, err = river.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	_, err = sqliteengine.MigrateLine(ctx, db, v12FS(t, migrations.Core(migrations.SQLite)), goose.DefaultTablename, nil)
	require.NoError(t, err)
}

func TestBuiltinTablesMovedSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, v12 := sqlitetest.NewEmptyDB(t)
	migrateSQLiteV12(ctx, t, v12)
	// The core versions after that release's, for the schema of today.
	_, err := sqliteengine.Migrate(ctx, v12, nil)
	require.NoError(t, err)
	before := sqliteSchema(ctx, t, v12)
	require.Contains(t, strings.Join(before, "\n"), "index ledger_entries_customer_idx")

	t.Run("FreshDatabaseSameSchema", func(t *testing.T) {
		t.Parallel()
		_, db := sqlitetest.NewEmptyDB(t)
		core, builtins := migrateSQLiteNow(ctx, t, db)
		require.Equal(t, sqliteMigrationCount(t), core)
		require.Equal(t, enginetest.BuiltinMigrations(migrations.SQLite), builtins, "00001 (the moved tables) and every later one")
		require.Equal(t, before, withoutLaterBuiltins(sqliteSchema(ctx, t, db)))
	})

	t.Run("UpgradedDatabaseUnchanged", func(t *testing.T) {
		t.Parallel()
		_, db := sqlitetest.NewEmptyDB(t)
		migrateSQLiteV12(ctx, t, db)
		_, err := db.ExecContext(ctx, `INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency) VALUES ('acme', 'ord_1', 'ch_1', 500, 'usd')`)
		require.NoError(t, err)

		core, builtins := migrateSQLiteNow(ctx, t, db)
		require.Equal(t, sqliteMigrationCount(t)-engine.LegacyLastVersion, core, "only the core versions after that release's applied")
		require.Equal(t, enginetest.BuiltinMigrations(migrations.SQLite), builtins, "the built-ins' line records 00001 and applies the later ones")
		require.Equal(t, before, withoutLaterBuiltins(sqliteSchema(ctx, t, db)))
		var orders int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&orders))
		require.Equal(t, 1, orders, "the rows are kept")

		core, builtins = migrateSQLiteNow(ctx, t, db)
		require.Zero(t, core+builtins)
	})
}

// withoutLaterBuiltins is a schema without what the built-ins' migrations
// after 00001 add (00002's approval_thresholds): the move kept the rest.
func withoutLaterBuiltins(schema []string) []string {
	later := enginetest.LaterBuiltinObjects(migrations.SQLite)
	var out []string
	for _, line := range schema {
		if !slices.ContainsFunc(later, func(name string) bool { return strings.Contains(line, name) }) {
			out = append(out, line)
		}
	}
	return out
}
