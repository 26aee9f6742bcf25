package app

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
)

func poolerConfig(t *testing.T, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Load(nil, func(k string) string { return env[k] })
	require.NoError(t, err)
	return cfg
}

// TestTransactionPooler: under IDEMGATE_DB_POOLER=transaction River polls
// instead of LISTENing, and the pool prepares no named statements; without
// it, neither changes.
func TestTransactionPooler(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		env      map[string]string
		pollOnly bool
		mode     pgx.QueryExecMode
	}{
		{"Direct", map[string]string{config.EnvDatabaseURL: "postgres://127.0.0.1:1/x"}, false, pgx.QueryExecModeCacheStatement},
		{"Pooled", map[string]string{config.EnvDatabaseURL: "postgres://127.0.0.1:1/x", config.EnvDBPooler: "transaction"}, true, pgx.QueryExecModeCacheDescribe},
		{"PooledExec", map[string]string{config.EnvDatabaseURL: "postgres://127.0.0.1:1/x?default_query_exec_mode=exec",
			config.EnvDBPooler: "transaction"}, true, pgx.QueryExecModeExec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := poolerConfig(t, tt.env)
			rc := riverConfig(cfg, river.NewWorkers(), nil, &WorkerOptions{}, nil)
			require.Equal(t, tt.pollOnly, rc.PollOnly)

			// The pool connects lazily: nothing listens on port 1.
			pool, err := pgengine.OpenPostgresConfig(context.Background(), drivers.PostgresSettings(cfg, 2), nil)
			require.NoError(t, err)
			defer pool.Close()
			require.Equal(t, tt.mode, pool.Config().ConnConfig.DefaultQueryExecMode)
		})
	}
}

func TestExecModeNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"} {
		_, err := pgengine.ExecMode(name)
		require.NoError(t, err, name)
	}
	_, err := pgengine.ExecMode("fast")
	require.ErrorContains(t, err, `"fast"`)
}
