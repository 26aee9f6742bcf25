package pgengine

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BorrowDriver returns the Driver on pool, a pool of the caller's, after
// CheckPool; its Close leaves the pool open. pooled says whether the pool
// goes through a transaction pooler, as for NewDriver.
func BorrowDriver(pool *pgxpool.Pool, pooled bool) (*Driver, error) {
	if err := CheckPool(pool, pooled); err != nil {
		return nil, err
	}
	d := NewDriver(pool, pooled)
	d.borrowed = true
	return d, nil
}

// CheckPool applies to a pool of the caller's the checks a DATABASE_URL
// gets: River's jsonb arguments need an
// execution mode other than simple_protocol under a transaction pooler,
// and such a pooler (pooled) hands each transaction another server
// connection, where a named prepared statement may not exist, so the
// pool's mode must be cache_describe, describe_exec or exec, or
// cache_statement named in its connection string (for a pooler that keeps
// prepared statements: pgx's default mode, left unnamed, is refused).
func CheckPool(pool *pgxpool.Pool, pooled bool) error {
	if pool == nil {
		return errors.New("pgengine: the pool is nil")
	}
	if !pooled {
		return nil
	}
	pc := pool.Config()
	switch pc.ConnConfig.DefaultQueryExecMode {
	case pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec:
		return nil
	case pgx.QueryExecModeCacheStatement:
		if urlParams(pc.ConnString()).Get("default_query_exec_mode") == "cache_statement" {
			return nil
		}
		return fmt.Errorf("pgengine: %s=%s and the pool prepares named statements (pgx's default, cache_statement), "+
			"which a transaction pooler's next server connection may not have: set ConnConfig.DefaultQueryExecMode "+
			"to pgx.QueryExecModeCacheDescribe (what idemgate's own pool uses), or name cache_statement in the pool's "+
			"connection string for a pooler that keeps prepared statements", envDBPooler, poolerTransaction)
	case pgx.QueryExecModeSimpleProtocol:
		return fmt.Errorf("pgengine: %s=%s and the pool's mode is simple_protocol, which sends River's jsonb arguments as bytea: "+
			"use pgx.QueryExecModeCacheDescribe, DescribeExec or Exec", envDBPooler, poolerTransaction)
	}
	return fmt.Errorf("pgengine: the pool's query execution mode %v is unknown", pc.ConnConfig.DefaultQueryExecMode)
}
