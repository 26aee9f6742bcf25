package pgengine_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/pgtest"
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

// pgSchema describes every table, column, constraint, index and trigger of
// the public schema but the version tables, one sorted line each.
func pgSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT concat_ws(' ', 'column', table_name, ordinal_position, column_name, data_type, is_nullable, column_default, is_identity)
		   FROM information_schema.columns WHERE table_schema = 'public'`,
		`SELECT concat_ws(' ', 'constraint', conrelid::regclass::text, conname, pg_get_constraintdef(oid))
		   FROM pg_constraint WHERE connamespace = 'public'::regnamespace`,
		`SELECT concat_ws(' ', 'index', indexname, indexdef) FROM pg_indexes WHERE schemaname = 'public'`,
		`SELECT concat_ws(' ', 'trigger', tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)) FROM pg_trigger WHERE NOT tgisinternal`,
	} {
		rows, err := pool.Query(ctx, q)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			if !strings.Contains(line, "_db_version") {
				out = append(out, line)
			}
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	slices.Sort(out)
	return out
}

func migratePostgresNow(ctx context.Context, t *testing.T, pool *pgxpool.Pool) (core, builtins int) {
	t.Helper()
	res, err := pgengine.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	builtins, err = pgengine.MigrateLine(ctx, pool, migrations.Builtins(migrations.Postgres), migrations.BuiltinsTable, nil)
	require.NoError(t, err)
	return res.IdemgateApplied, builtins
}

func migratePostgresV12(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	river, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	require.NoError(t, err)
	_, err = river.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	_, err = pgengine.MigrateLine(ctx, pool, v12FS(t, migrations.Core(migrations.Postgres)), goose.DefaultTablename, nil)
	require.NoError(t, err)
}

func TestBuiltinTablesMovedPostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	v12 := openPool(t, pgtest.NewEmptyDB(t), 4)
	migratePostgresV12(ctx, t, v12)
	// The core versions after that release's, for the schema of today.
	_, err := pgengine.Migrate(ctx, v12, nil)
	require.NoError(t, err)
	before := pgSchema(ctx, t, v12)
	require.Contains(t, strings.Join(before, "\n"), "index ledger_entries_customer_idx")

	t.Run("FreshDatabaseSameSchema", func(t *testing.T) {
		t.Parallel()
		pool := openPool(t, pgtest.NewEmptyDB(t), 4)
		core, builtins := migratePostgresNow(ctx, t, pool)
		require.Equal(t, ourMigrationCount(t), core)
		require.Equal(t, enginetest.BuiltinMigrations(migrations.Postgres), builtins, "00001 (the moved tables) and every later one")
		require.Equal(t, before, withoutLaterBuiltins(pgSchema(ctx, t, pool)))
	})

	t.Run("CoreAloneHasNoBuiltinTables", func(t *testing.T) {
		t.Parallel()
		pool := openPool(t, pgtest.NewEmptyDB(t), 4)
		_, err := pgengine.Migrate(ctx, pool, nil)
		require.NoError(t, err)
		var name *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass('orders')::text").Scan(&name))
		require.Nil(t, name)
	})

	t.Run("UpgradedDatabaseUnchanged", func(t *testing.T) {
		t.Parallel()
		pool := openPool(t, pgtest.NewEmptyDB(t), 4)
		migratePostgresV12(ctx, t, pool)
		_, err := pool.Exec(ctx, `INSERT INTO orders (tenant_id, order_id, charge_id, amount_cents, currency) VALUES ('acme', 'ord_1', 'ch_1', 500, 'usd');
			INSERT INTO customers (tenant_id, customer_id, currency) VALUES ('acme', 'cus_1', 'usd');
			INSERT INTO ledger_entries (tenant_id, customer_id, operation_id, amount_cents, currency) VALUES ('acme', 'cus_1', gen_random_uuid(), 250, 'usd')`)
		require.NoError(t, err)

		core, builtins := migratePostgresNow(ctx, t, pool)
		require.Equal(t, ourMigrationCount(t)-engine.LegacyLastVersion, core, "only the core versions after that release's applied")
		require.Equal(t, enginetest.BuiltinMigrations(migrations.Postgres), builtins, "the built-ins' line records 00001 and applies the later ones")
		require.Equal(t, before, withoutLaterBuiltins(pgSchema(ctx, t, pool)))
		var orders, entries int
		require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM ledger_entries)").Scan(&orders, &entries))
		require.Equal(t, []int{1, 1}, []int{orders, entries}, "the rows are kept")

		core, builtins = migratePostgresNow(ctx, t, pool)
		require.Zero(t, core+builtins)
	})
}

// withoutLaterBuiltins is a schema without what the built-ins' migrations
// after 00001 add (00002's approval_thresholds): the move kept the rest.
func withoutLaterBuiltins(schema []string) []string {
	later := enginetest.LaterBuiltinObjects(migrations.Postgres)
	var out []string
	for _, line := range schema {
		if !slices.ContainsFunc(later, func(name string) bool { return strings.Contains(line, name) }) {
			out = append(out, line)
		}
	}
	return out
}
