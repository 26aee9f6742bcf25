package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// EmbeddedDBTimeout bounds the gate's statements in the embedded
// deployment, where callers queue for SQLite's one connection: longer than
// core.DefaultDBTimeout.
const EmbeddedDBTimeout = 5 * time.Second

// Embedded is the single-process deployment of an engine whose worker runs
// inside the api (SQLite: one writer per file), with one River client that
// inserts the claims' jobs, works them and serves River UI.
type Embedded struct {
	Driver  engine.Driver
	Gate    *core.Gate
	Server  *api.Server
	Handler http.Handler
	// Health serves /healthz, /readyz and /metrics alone, unauthenticated,
	// as Handler serves them too.
	Health http.Handler
	// Client is the process's one River client: it inserts, works,
	// cancels and retries the jobs and serves River UI.
	Client jobs.Client
	// Ops is the operator routes under /ops (River UI, re-drive).
	Ops *ops.Server

	reaperInterval time.Duration
	reap           func(context.Context) error
	logger         *slog.Logger
}

// NewEmbedded assembles the api and the worker in one process on a driver
// whose worker runs inside the api (drv.EmbeddedWorker), its database
// migrated. The driver is the caller's.
func NewEmbedded(cfg *config.Config, drv engine.Driver, logger *slog.Logger, apiOpts *APIOptions, workerOpts *WorkerOptions) (*Embedded, error) {
	if !drv.EmbeddedWorker() {
		return nil, errors.New("DATABASE_URL: on " + string(drv.Engine()) + " the api and the worker are processes of their own (NewAPI, NewWorker)")
	}
	if logger == nil {
		logger = slog.Default()
	}
	apiOpts, workerOpts = embeddedOptions(apiOpts, workerOpts)
	tp := apiOpts.TracerProvider
	logger = tracedLogger(logger, tp)
	data := drv.Store()
	tools, err := workerTools(cfg, data, workerOpts)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newClaimsCollector(drv.ClaimCounts))
	metrics, err := jobs.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	onTransition, err := newApprovalCounter(reg, metrics.Transition)
	if err != nil {
		return nil, err
	}
	client := drivers.NewRiver(drv)
	warnNoSecret(cfg, logger)
	g, err := core.New(&core.Config{
		OnTransition: onTransition,
		Store:        data,
		Enqueuer:     client,
		Policies:     tools.Policies(),
		Secret:       []byte(cfg.Secret),

		MaxPendingApprovals: maxPendingApprovals(cfg),
		DBTimeout:           EmbeddedDBTimeout,
		Logger:              logger,

		TracerProvider: tp,
	})
	if err != nil {
		return nil, err
	}
	notices, err := approvalNoticeWorker(cfg, data, metrics, logger, tp, workerOpts.NoticePeriod)
	if err != nil {
		return nil, err
	}
	builtin, err := builtinJobs(cfg, tools, data, logger, reg)
	if err != nil {
		return nil, err
	}
	// One group at a time: every transaction waits for the one connection.
	workers, _, err := newWorkers(cfg, g, tools, client, notices, builtin, metrics, logger, workerOpts, 1)
	if err != nil {
		return nil, err
	}
	if err := client.Open(riverConfig(cfg, workers, builtin, workerOpts, logger)); err != nil {
		return nil, err
	}

	e := &Embedded{Driver: drv, Gate: g, Client: client, reaperInterval: cfg.ReaperInterval,
		reap: newReaper(cfg, g, client, logger).Reap, logger: logger}
	if err := e.buildAPI(cfg, data, tools, apiOpts, reg); err != nil {
		return nil, err
	}
	return e, nil
}

// embeddedOptions copies the options (nil: defaults) with one
// TracerProvider for both halves: the api's, or else the worker's.
func embeddedOptions(apiOpts *APIOptions, workerOpts *WorkerOptions) (*APIOptions, *WorkerOptions) {
	var (
		a APIOptions
		w WorkerOptions
	)
	if apiOpts != nil {
		a = *apiOpts
	}
	if workerOpts != nil {
		w = *workerOpts
	}
	if a.TracerProvider == nil {
		a.TracerProvider = w.TracerProvider
	}
	w.TracerProvider = a.TracerProvider
	return &a, &w
}

// buildAPI builds the api half: the api's handler with the operator routes
// mounted on it, River UI on the process's River client.
func (e *Embedded) buildAPI(cfg *config.Config, data apiData, tools *toolspec.Registry,
	apiOpts *APIOptions, reg *prometheus.Registry,
) error {
	srv, health, err := newAPIServer(cfg, e.Gate, e.Client, data, tools, e.Driver.Migrated, apiOpts, reg, e.logger)
	if err != nil {
		return err
	}
	opsServer, err := newOpsServer(cfg, e.Gate, e.Client, e.Client, srv, reg, e.logger)
	if err != nil {
		return err
	}
	opsServer.Mount(srv.Router())
	e.Server, e.Handler, e.Health, e.Ops = srv, srv, health, opsServer
	return nil
}

// Run starts the worker half and River UI's background services, and
// blocks until ctx ends, then stops fetching and lets running jobs finish
// within stopTimeout.
//
// The reaper runs every reaper interval in this process itself
// (jobs.KeepReaping), as in a Postgres worker, not only as River's
// periodic job: periodic jobs run on River's elected leader, and a process
// restarted after kill -9 on the same file is elected only once the killed
// one's leadership expires (about 15s), so a claim it held was recovered
// after ~19s by River's rescuer instead of within the lease plus one
// reaper interval.
func (e *Embedded) Run(ctx context.Context, stopTimeout time.Duration) error {
	if err := e.Ops.Start(ctx); err != nil {
		e.logger.Error("River UI's background services did not start; it counts on demand", "error", err)
	}
	reapCtx, stopReaping := context.WithCancel(ctx)
	reaping := make(chan struct{})
	go func() { defer close(reaping); jobs.KeepReaping(reapCtx, e.reap, e.reaperInterval, e.logger) }()
	defer func() { stopReaping(); <-reaping }()
	return runRiver(ctx, e.Client, stopTimeout)
}
