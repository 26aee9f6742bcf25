package pgengine_test

import (
	"context"
	"io/fs"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/migrations"
)

// ourTables are the tables 00001_init.sql creates (the built-in tools'
// tables are theirs: see builtins_test.go).
var ourTables = []string{"idempotency_claims", "audit_events", "api_tokens"}

type migrateBundle struct {
	dbURL string
	pool  *pgxpool.Pool
}

// migrateSetup returns an empty database (no River, no goose tables) and a pool on it.
func migrateSetup(t *testing.T, maxConns int32) *migrateBundle {
	t.Helper()
	dbURL := pgtest.NewEmptyDB(t)
	return &migrateBundle{dbURL: dbURL, pool: openPool(t, dbURL, maxConns)}
}

func openPool(t *testing.T, dbURL string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()

	t.Run("TwiceSecondIsNoop", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := migrateSetup(t, 4)

		ok, err := pgengine.Status(ctx, bundle.pool)
		require.NoError(t, err)
		require.False(t, ok)

		res, err := pgengine.Migrate(ctx, bundle.pool, nil)
		require.NoError(t, err)
		require.Equal(t, riverMigrationCount(t), res.RiverApplied)
		require.Equal(t, ourMigrationCount(t), res.IdemgateApplied)
		requireSchemaComplete(ctx, t, bundle.pool)

		res, err = pgengine.Migrate(ctx, bundle.pool, nil)
		require.NoError(t, err)
		require.Equal(t, &engine.Result{}, res)
		requireSchemaComplete(ctx, t, bundle.pool)
	})

	t.Run("ConcurrentReplicas", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := migrateSetup(t, 4)

		// Four replicas, each with its own pool, migrating the same empty
		// database at once.
		const replicas = 4
		results := make([]*engine.Result, replicas)
		errs := make([]error, replicas)
		var wg sync.WaitGroup
		for i := range replicas {
			pool := openPool(t, bundle.dbURL, 2)
			wg.Go(func() { results[i], errs[i] = pgengine.Migrate(ctx, pool, nil) })
		}
		wg.Wait()

		total := engine.Result{}
		for i := range replicas {
			require.NoError(t, errs[i], "replica %d", i)
			total.RiverApplied += results[i].RiverApplied
			total.IdemgateApplied += results[i].IdemgateApplied
		}
		// Serialized: exactly one replica applied each migration.
		require.Equal(t, riverMigrationCount(t), total.RiverApplied)
		require.Equal(t, ourMigrationCount(t), total.IdemgateApplied)
		requireSchemaComplete(ctx, t, bundle.pool)
	})

	t.Run("ConcurrentSharedSmallPool", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		// One pool of one connection shared by four goroutines: the lock
		// must not be held on a pool connection, or this deadlocks.
		bundle := migrateSetup(t, 1)

		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { _, errs[i] = pgengine.Migrate(ctx, bundle.pool, nil) })
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "goroutine %d", i)
		}
		requireSchemaComplete(ctx, t, bundle.pool)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		bundle := migrateSetup(t, 2)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := pgengine.Migrate(ctx, bundle.pool, nil)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("NilPool", func(t *testing.T) {
		t.Parallel()
		_, err := pgengine.Migrate(t.Context(), nil, nil)
		require.Error(t, err)
		_, err = pgengine.Status(t.Context(), nil)
		require.Error(t, err)
	})
}

func TestPostgresStatus(t *testing.T) {
	t.Parallel()

	t.Run("Migrated", func(t *testing.T) {
		t.Parallel()
		_, pool := pgtest.NewDB(t)
		ok, err := pgengine.Status(t.Context(), pool)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("RiverOnly", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := migrateSetup(t, 4)
		migrator, err := rivermigrate.New(riverpgxv5.New(bundle.pool), nil)
		require.NoError(t, err)
		_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		require.NoError(t, err)

		ok, err := pgengine.Status(ctx, bundle.pool)
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("OursMissingOneVersion", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, pool := pgtest.NewDB(t)
		_, err := pool.Exec(ctx, "DELETE FROM "+migrations.Table+" WHERE version_id = (SELECT max(version_id) FROM "+migrations.Table+")")
		require.NoError(t, err)

		ok, err := pgengine.Status(ctx, pool)
		require.NoError(t, err)
		require.False(t, ok)
	})

	t.Run("RiverMissingOneVersion", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, pool := pgtest.NewDB(t)
		_, err := pool.Exec(ctx, "DELETE FROM river_migration WHERE version = (SELECT max(version) FROM river_migration)")
		require.NoError(t, err)

		ok, err := pgengine.Status(ctx, pool)
		require.NoError(t, err)
		require.False(t, ok)
	})
}

func requireSchemaComplete(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, table := range append([]string{"river_job", "river_migration", "river_leader", "river_queue"}, ourTables...) {
		var name *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1)::text", table).Scan(&name))
		require.NotNil(t, name, "table %s missing", table)
	}

	var gooseVersions int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+migrations.Table+" WHERE version_id > 0").Scan(&gooseVersions))
	require.Equal(t, ourMigrationCount(t), gooseVersions, "each of our migrations recorded once")

	var riverVersions int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM river_migration").Scan(&riverVersions))
	require.Equal(t, riverMigrationCount(t), riverVersions)

	ok, err := pgengine.Status(ctx, pool)
	require.NoError(t, err)
	require.True(t, ok)
}

func ourMigrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(migrations.Core(migrations.Postgres), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return len(files)
}

func riverMigrationCount(t *testing.T) int {
	t.Helper()
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	require.NoError(t, err)
	return len(migrator.AllVersions())
}
