package app

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/idemgate/idemgate/api"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/jobs"
	"github.com/idemgate/idemgate/ops"
	"github.com/idemgate/idemgate/store/pgstore"
)

// Ops is what operators' tools need: the gate on Postgres with an
// insert-only River client (no queues, no workers), River's job control in
// the gate's transactions, and the re-driver built on them. idemctl uses it.
type Ops struct {
	Gate     *gate.Gate
	River    *river.Client[pgx.Tx]
	Control  *jobs.Control[pgx.Tx]
	Redriver *ops.Redriver
}

// NewOps assembles the operators' parts on Postgres. The pool is the
// caller's.
func NewOps(cfg *config.Config, pool *pgxpool.Pool, logger *slog.Logger) (*Ops, error) {
	if cfg.Driver() != config.DriverPostgres {
		return nil, errors.New("DATABASE_URL: only Postgres is supported by this build")
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	st := pgstore.New(pool)
	tools, err := BuiltinDeclarations(cfg, st)
	if err != nil {
		return nil, err
	}
	g, err := gate.New(&gate.Config{
		Store:    st,
		Enqueuer: &jobs.Enqueuer[pgx.Tx]{Client: client, Unavailable: pgstore.Unavailable},
		Policies: tools.Policies(),
		Logger:   logger,
	})
	if err != nil {
		return nil, err
	}
	control := &jobs.Control[pgx.Tx]{Client: client}
	return &Ops{
		Gate:     g,
		River:    client,
		Control:  control,
		Redriver: &ops.Redriver{Gate: g, Jobs: control},
	}, nil
}

// newOpsServer builds the api's operator routes: River UI with a River
// client of its own (insert-only, on the api's pool) and the re-drive route
// on the api's gate, behind the api's bearer authentication (scope
// ops:admin) or the Basic credentials of IDEMGATE_OPS_USER and
// IDEMGATE_OPS_PASSWORD (cfg.OpsUser, cfg.OpsPassword).
func newOpsServer(cfg *config.Config, pool *pgxpool.Pool, g *gate.Gate, insertOnly *river.Client[pgx.Tx], srv *api.Server,
	reg prometheus.Registerer, logger *slog.Logger) (*ops.Server, error) {
	basic, err := ops.BasicIfSet(cfg.OpsUser, cfg.OpsPassword)
	if err != nil {
		return nil, err
	}
	uiClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("river (River UI): %w", err)
	}
	s, err := ops.NewServer(&ops.Config{
		Auth:           &ops.Auth{Bearer: srv.Authenticate, Basic: basic, Throttle: ops.NewThrottle(reg), Logger: logger},
		OperatorTenant: cfg.OperatorTenant,
		Redriver:       &ops.Redriver{Gate: g, Jobs: &jobs.Control[pgx.Tx]{Client: insertOnly}},
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
