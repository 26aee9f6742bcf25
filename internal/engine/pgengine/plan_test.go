package pgengine_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
)

// planIndexes returns the indexes a generic plan of sql scans (what a
// prepared statement runs after its fifth execution), with args.
func planIndexes(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string, args ...any) []string {
	t.Helper()
	var plan []byte
	require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan))
	var out []string
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		if name, ok := node["Index Name"].(string); ok {
			out = append(out, name)
		}
		if kids, ok := node["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	var doc []map[string]map[string]any
	require.NoError(t, json.Unmarshal(plan, &doc))
	walk(doc[0]["Plan"])
	return out
}

// TestHotLookupsUseTheUniqueIndexesWithoutStatistics guards the plans of
// the lookups every call makes, on a table never analyzed (a new table, or
// a server with autovacuum off): a generic plan cached then lasts as long
// as the connection, so it must use the unique index, not one that
// narrows by tenant only and scans all of its claims.
func TestHotLookupsUseTheUniqueIndexesWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := pgtest.NewDB(t)
	_, err := pool.Exec(ctx, `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, user_id, args,
		args_hash, status, ttl_seconds, retention_seconds)
		SELECT gen_random_uuid(), 'acme', 'refund_order', 'key-' || g, 'u', '{}', 'h', 'queued', 3600, 3600
		FROM generate_series(1, 5) g`)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	c := conn.Conn()

	require.Equal(t, []string{"idempotency_claims_identity"},
		planIndexes(ctx, t, c, pgengine.SQLClaimGetByKey, "acme", "refund_order", "key-1", nil))
	require.Equal(t, []string{"idempotency_claims_operation_id_key"},
		planIndexes(ctx, t, c, pgengine.SQLClaimGetByOperation, "acme", "00000000-0000-4000-8000-000000000001", nil))

	// The newest-first listing can still use its partial index.
	_, err = conn.Exec(ctx, "SET enable_seqscan = off")
	require.NoError(t, err)
	require.Equal(t, []string{"idempotency_claims_tenant_newest_idx"},
		planIndexes(ctx, t, c, pgengine.SQLClaimListNewest, "acme", "", "", nil, int64(0), 50, "", ""))
}
