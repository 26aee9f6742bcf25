package pgtest_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/migrations"
)

func TestNewDB(t *testing.T) {
	t.Parallel()

	t.Run("FullyMigrated", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, pool := pgtest.NewDB(t)

		for _, table := range []string{"idempotency_claims", "audit_events", "river_job", "river_migration", migrations.Table} {
			require.True(t, tableExists(ctx, t, pool, table), "table %s", table)
		}
		ok, err := pgengine.Status(ctx, pool)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("Isolated", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		urlA, poolA := pgtest.NewDB(t)
		urlB, poolB := pgtest.NewDB(t)
		require.NotEqual(t, urlA, urlB)

		var nameA, nameB string
		require.NoError(t, poolA.QueryRow(ctx, "SELECT current_database()").Scan(&nameA))
		require.NoError(t, poolB.QueryRow(ctx, "SELECT current_database()").Scan(&nameB))
		require.NotEqual(t, nameA, nameB)
		require.True(t, strings.HasPrefix(nameA, pgtest.DBPrefix), nameA)
		require.True(t, strings.HasSuffix(urlA, "/"+nameA) || strings.Contains(urlA, "/"+nameA+"?"), urlA)

		for _, pool := range []*pgxpool.Pool{poolA, poolB} {
			require.True(t, tableExists(ctx, t, pool, "idempotency_claims"))
			require.True(t, tableExists(ctx, t, pool, "river_job"))
		}

		_, err := poolA.Exec(ctx, `INSERT INTO idempotency_claims
			(operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds)
			VALUES (gen_random_uuid(), 'acme', 'refund_order', 'key-00000001', '{}', 'h', 'queued', 86400)`)
		require.NoError(t, err)
		_, err = poolA.Exec(ctx, "CREATE TABLE only_in_a (id int)")
		require.NoError(t, err)

		require.Equal(t, 1, countClaims(ctx, t, poolA))
		require.Equal(t, 0, countClaims(ctx, t, poolB))
		require.False(t, tableExists(ctx, t, poolB, "only_in_a"))
	})

	t.Run("URLConnects", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dbURL, pool := pgtest.NewDB(t)

		// The URL carries pool_max_conns, which pgxpool reads; a single
		// connection takes the connection part of the pool's config.
		pc, err := pgxpool.ParseConfig(dbURL)
		require.NoError(t, err)
		conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var viaURL, viaPool string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&viaURL))
		require.NoError(t, pool.QueryRow(ctx, "SELECT current_database()").Scan(&viaPool))
		require.Equal(t, viaPool, viaURL)
	})

	t.Run("MaxConns", func(t *testing.T) {
		t.Parallel()
		_, pool := pgtest.NewDB(t)
		require.EqualValues(t, min(pgtest.DefaultMaxConns, pgtest.MaxConns()), pool.Config().MaxConns)

		_, pool = pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 3})
		require.EqualValues(t, min(3, pgtest.MaxConns()), pool.Config().MaxConns)

		// Never above the cap, which every URL carries for the pools
		// opened from it.
		dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 10_000})
		require.EqualValues(t, pgtest.MaxConns(), pool.Config().MaxConns)
		pc, err := pgxpool.ParseConfig(dbURL)
		require.NoError(t, err)
		require.EqualValues(t, pgtest.MaxConns(), pc.MaxConns)
	})

	// A test that fails (t.Fatal) or panics still drops its databases: the
	// test runs in a child process of this test binary.
	for _, how := range []string{"fatal", "panic"} {
		t.Run("DroppedAfterFailure_"+how, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "names")
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFailsWithDatabases$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+how, helperOutEnv+"="+out)
			output, err := cmd.CombinedOutput()
			require.Error(t, err, "the helper test must fail:\n%s", output)
			names, err := os.ReadFile(out)
			require.NoError(t, err, "%s", output)
			admin := pgtest.Admin(t)
			list := strings.Fields(string(names))
			require.Len(t, list, 2, "%s", output)
			for _, name := range list {
				require.False(t, databaseExists(t.Context(), t, admin, name), "%s left behind by a failed test:\n%s", name, output)
			}
		})
	}

	t.Run("DroppedAfterTest", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		admin := pgtest.Admin(t)

		var name, emptyName string
		t.Run("Inner", func(t *testing.T) {
			_, pool := pgtest.NewDB(t)
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
			emptyURL := pgtest.NewEmptyDB(t)
			emptyName = emptyURL[strings.LastIndex(emptyURL, "/")+1:]
			emptyName, _, _ = strings.Cut(emptyName, "?")
			require.True(t, databaseExists(ctx, t, admin, name))
			require.True(t, databaseExists(ctx, t, admin, emptyName))
		})
		require.NotEmpty(t, name)
		require.False(t, databaseExists(ctx, t, admin, name))
		require.False(t, databaseExists(ctx, t, admin, emptyName))
	})
}

func TestNewEmptyDB(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	dbURL := pgtest.NewEmptyDB(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	require.False(t, tableExists(ctx, t, pool, "idempotency_claims"))
	require.False(t, tableExists(ctx, t, pool, "river_job"))
	ok, err := pgengine.Status(ctx, pool)
	require.NoError(t, err)
	require.False(t, ok)
	require.False(t, tableExists(ctx, t, pool, migrations.Table), "PostgresStatus must not write")
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pgtest.NewDB(t) // makes sure the template exists

	fingerprint, err := pgtest.Fingerprint()
	require.NoError(t, err)
	require.Len(t, fingerprint, 64)

	var isTemplate, allowConn bool
	err = pgtest.Admin(t).QueryRow(ctx,
		"SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1",
		pgtest.TemplatePrefix+fingerprint[:12]).Scan(&isTemplate, &allowConn)
	require.NoError(t, err)
	require.True(t, isTemplate)
	require.False(t, allowConn)
}

func TestURL(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv(pgtest.EnvURL, "")
	require.Equal(t, pgtest.DefaultURL, pgtest.URL())

	t.Setenv(pgtest.EnvURL, "postgres://u@db:5433/admin?sslmode=disable")
	require.Equal(t, "postgres://u@db:5433/admin?sslmode=disable", pgtest.URL())
}

func tableExists(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()
	var name *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", table).Scan(&name))
	return name != nil
}

func countClaims(ctx context.Context, t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM idempotency_claims").Scan(&n))
	return n
}

func databaseExists(ctx context.Context, t *testing.T, conn *pgx.Conn, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	return exists
}

const (
	helperEnv    = "PGTEST_HELPER_FAIL"
	helperOutEnv = "PGTEST_HELPER_OUT"
)

// TestHelperFailsWithDatabases is run by DroppedAfterFailure in a child
// process only: it creates two databases, writes their names and fails.
func TestHelperFailsWithDatabases(t *testing.T) {
	how := os.Getenv(helperEnv)
	if how == "" {
		t.Skip("run by TestNewDB/DroppedAfterFailure only")
	}
	_, pool := pgtest.NewDB(t)
	var name string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
	emptyURL := pgtest.NewEmptyDB(t)
	u, err := url.Parse(emptyURL)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(os.Getenv(helperOutEnv), []byte(name+" "+strings.TrimPrefix(u.Path, "/")), 0o600))
	if how == "panic" {
		panic("the helper test panics on purpose")
	}
	t.Fatal("the helper test fails on purpose")
}
