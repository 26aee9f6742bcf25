package app

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
)

// PoolConfig is the pool configuration of cfg's DATABASE_URL for a process
// that may hold total connections to Postgres in all, for cmd/idemctl.
func PoolConfig(cfg *config.Config, total int32, logger *slog.Logger) (*pgxpool.Config, error) {
	return pgengine.PoolConfig(drivers.PostgresSettings(cfg, total), logger)
}

// ExplainConnError is pgengine's, for cmd/idemctl.
var ExplainConnError = pgengine.ExplainConnError
