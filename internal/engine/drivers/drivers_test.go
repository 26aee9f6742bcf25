package drivers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
)

// TestPostgresSettings: the driver gets what the configuration says, and
// both agree on the default pool size.
func TestPostgresSettings(t *testing.T) {
	require.EqualValues(t, config.DefaultPoolMaxConns, pgengine.DefaultMaxConns)
	cfg := config.Defaults()
	cfg.DatabaseURL = "postgres://u@h/db?pool_max_conns=7"
	cfg.DBPooler = config.PoolerTransaction
	s := drivers.PostgresSettings(cfg, 0)
	require.Equal(t, pgengine.Settings{URL: cfg.DatabaseURL, Pooled: true, ExecMode: cfg.PostgresExecMode(), MaxConns: 7}, s)
	require.NotEmpty(t, s.ExecMode, "a transaction pooler gets a mode without named prepared statements")

	cfg.DatabaseURL, cfg.DBPooler = "postgres://u@h/db", config.PoolerNone
	require.EqualValues(t, config.DefaultPoolMaxConns, drivers.PostgresSettings(cfg, 0).MaxConns)
	require.EqualValues(t, 3, drivers.PostgresSettings(cfg, 3).MaxConns)
}
