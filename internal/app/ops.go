package app

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/ops"
)

// Ops is what operators' tools need, on either engine: the gate with an
// insert-only River client (no queues, no workers), River's job control in
// the gate's transactions, and the re-driver built on them. idemctl uses it.
type Ops struct {
	Gate *gate.Gate
	// Jobs cancels and retries River jobs in the gate's transactions.
	Jobs     ops.Jobs
	Redriver *ops.Redriver
}

// OpsSQLiteDBTimeout bounds each of the operators' transactions on SQLite.
// It is longer than sqliteengine.BusyTimeout: a command waits for the write
// lock a running api holds, and fails with domain.ErrUnavailable when the
// lock stays busy past BusyTimeout.
const OpsSQLiteDBTimeout = sqliteengine.BusyTimeout + 5*time.Second

// opsStore is what the operators' gate runs on.
type opsStore interface {
	gate.Store
	toolData
}

// NewOps assembles the operators' parts on Postgres. The pool is the
// caller's.
func NewOps(cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) (*Ops, error) {
	if cfg.Driver() != config.DriverPostgres {
		return nil, errors.New("DATABASE_URL: NewOps needs Postgres; use NewOpsSQLite on SQLite")
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	return newOps(cfg, pgengine.New(pool), client, pgengine.Unavailable, 0, logger)
}

// NewOpsSQLite assembles the operators' parts on the SQLite database db
// (from sqliteengine.Open), which a running api may share: its transactions
// wait for the write lock (OpsSQLiteDBTimeout). The database is the
// caller's.
func NewOpsSQLite(cfg *config.Config, db *sql.DB, logger *slog.Logger) (*Ops, error) {
	if cfg.Driver() != config.DriverSQLite {
		return nil, errors.New("DATABASE_URL: NewOpsSQLite needs SQLite (unset DATABASE_URL or sqlite:PATH)")
	}
	client, err := river.NewClient(riversqlite.New(db), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	return newOps(cfg, sqliteengine.New(db), client, sqliteengine.Unavailable, OpsSQLiteDBTimeout, logger)
}

// newOps builds the gate on st with client inserting and controlling its
// jobs; dbTimeout 0 is gate.DefaultDBTimeout.
func newOps[TTx any](cfg *config.Config, st opsStore, client *river.Client[TTx], unavailable func(error) bool,
	dbTimeout time.Duration, logger *slog.Logger,
) (*Ops, error) {
	tools, err := BuiltinDeclarations(cfg, st)
	if err != nil {
		return nil, err
	}
	g, err := gate.New(&gate.Config{
		Store:     st,
		Enqueuer:  &jobs.Enqueuer[TTx]{Client: client, Unavailable: unavailable},
		Policies:  tools.Policies(),
		Secret:    []byte(cfg.Secret),
		DBTimeout: dbTimeout,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}
	control := &jobs.Control[TTx]{Client: client}
	return &Ops{Gate: g, Jobs: control, Redriver: &ops.Redriver{Gate: g, Jobs: control}}, nil
}

// newOpsServer builds the api's operator routes: River UI on uiClient and
// the re-drive route on the api's gate and job control, behind the api's
// bearer authentication (scope ops:admin) or the Basic credentials of
// IDEMGATE_OPS_USER and IDEMGATE_OPS_PASSWORD (cfg.OpsUser,
// cfg.OpsPassword).
func newOpsServer[TTx any](cfg *config.Config, g *gate.Gate, uiClient *river.Client[TTx], control *jobs.Control[TTx],
	srv *api.Server, reg prometheus.Registerer, logger *slog.Logger,
) (*ops.Server, error) {
	basic, err := ops.BasicIfSet(cfg.OpsUser, cfg.OpsPassword)
	if err != nil {
		return nil, err
	}
	s, err := ops.NewServer(&ops.Config{
		Auth:           &ops.Auth{Bearer: srv.Authenticate, Basic: basic, Throttle: ops.NewThrottle(reg), Logger: logger},
		OperatorTenant: cfg.OperatorTenant,
		Redriver:       &ops.Redriver{Gate: g, Jobs: control},
		Logger:         logger,
	}, uiClient)
	if err != nil {
		return nil, err
	}
	basicAuth := "disabled (" + ops.EnvOpsUser + " and " + ops.EnvOpsPassword + " unset)"
	if basic != nil {
		basicAuth = "enabled for user " + basic.User()
	}
	logger.Info("operator routes", "riverui", ops.RiverUIPath+"/", "redrive", "POST "+ops.RedrivePath,
		"bearer", "tokens with scope "+api.ScopeOpsAdmin, "basic_auth", basicAuth)
	return s, nil
}
