package app

import "github.com/idemgate/idemgate/internal/engine/pgengine"

// PoolConfig and ExplainConnError are pgengine's, for cmd/idemctl's
// openPostgres until its port to kong drops that function (the engine
// choice is in idemctl's db.go).
var (
	PoolConfig       = pgengine.PoolConfig
	ExplainConnError = pgengine.ExplainConnError
)
