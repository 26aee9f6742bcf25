package app

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/ops"
)

// Ops is what operators' tools need, on either engine: the gate with an
// insert-only River client (no queues, no workers), River's job control in
// the gate's transactions, and the re-driver built on them. idemctl uses it.
type Ops struct {
	Gate *core.Gate
	// Jobs cancels and retries River jobs in the gate's transactions.
	Jobs     ops.Jobs
	Redriver *ops.Redriver
}

// opsLockMargin is how much longer than the driver's LockWait an
// operator's transaction may take: a command waits for the write lock a
// running api holds, and fails with vocab.ErrUnavailable when the lock
// stays busy past LockWait.
const opsLockMargin = 5 * time.Second

// NewOps assembles the operators' parts on drv, whose database a running
// api may share. The driver is the caller's.
func NewOps(cfg *config.Config, drv engine.Driver, logger *slog.Logger) (*Ops, error) {
	client := drivers.NewRiver(drv)
	if err := client.Open(&river.Config{Logger: logger}); err != nil {
		return nil, err
	}
	st := drv.Store()
	tools, err := BuiltinDeclarations(cfg, st)
	if err != nil {
		return nil, err
	}
	var dbTimeout time.Duration // gate.DefaultDBTimeout
	if wait := drv.LockWait(); wait > 0 {
		dbTimeout = wait + opsLockMargin
	}
	g, err := core.New(&core.Config{
		Store:     st,
		Enqueuer:  client,
		Policies:  tools.Policies(),
		Secret:    []byte(cfg.Secret),
		DBTimeout: dbTimeout,
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}
	return &Ops{Gate: g, Jobs: client, Redriver: &ops.Redriver{Gate: g, Jobs: client}}, nil
}

// newOpsServer builds the api's operator routes: River UI on uiClient and
// the re-drive route on the api's gate and job control, behind the api's
// bearer authentication (scope ops:admin) or the Basic credentials of
// IDEMGATE_OPS_USER and IDEMGATE_OPS_PASSWORD (cfg.OpsUser,
// cfg.OpsPassword).
func newOpsServer(cfg *config.Config, g *core.Gate, uiClient, control jobs.Client,
	srv *api.Server, reg prometheus.Registerer, logger *slog.Logger,
) (*ops.Server, error) {
	basic, err := ops.BasicIfSet(cfg.OpsUser, cfg.OpsPassword)
	if err != nil {
		return nil, err
	}
	s, err := ops.NewServer(&ops.Config{
		Auth: &ops.Auth{Bearer: srv.Authenticate, Basic: basic, Throttle: ops.NewThrottle(reg), Devices: ops.NewDevices(cfg.Secret),
			OperatorTenant: cfg.OperatorTenant, OperatorSubjects: operatorSubjects(cfg), Logger: logger},
		Redriver:  &ops.Redriver{Gate: g, Jobs: control},
		JobClaims: control,
		Logger:    logger,
	}, uiClient.UI())
	if err != nil {
		return nil, err
	}
	basicAuth := "disabled (" + ops.EnvOpsUser + " and " + ops.EnvOpsPassword + " unset)"
	if basic != nil {
		basicAuth = "enabled for user " + basic.User()
	}
	logger.Info("operator routes", "riverui", ops.RiverUIPath+"/", "redrive", "POST "+ops.RedrivePath,
		"bearer", "tokens with scope "+api.ScopeOpsAdmin, "basic_auth", basicAuth, "operator_tenant", cfg.OperatorTenant,
		"oauth_operator_subjects", len(cfg.OperatorSubjects()))
	return s, nil
}

// operatorSubjects are IDEMGATE_OPS_SUBJECTS as the operator routes take
// them.
func operatorSubjects(cfg *config.Config) []ops.OperatorSubject {
	var out []ops.OperatorSubject
	for _, s := range cfg.OperatorSubjects() {
		out = append(out, ops.OperatorSubject{Issuer: s.Issuer, Subject: s.Subject})
	}
	return out
}
