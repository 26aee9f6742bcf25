package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/tool"
)

// EmbeddedDBTimeout bounds the gate's statements on SQLite, where callers
// queue for the one connection: longer than Postgres's default.
const EmbeddedDBTimeout = 5 * time.Second

// Embedded is the single-process deployment on SQLite: the api and the
// worker in one process (one writer per file), with one River client that
// inserts the claims' jobs, works them and serves River UI. SQLite has no
// LISTEN, so waiting callers poll their claim every 50ms.
type Embedded struct {
	DB      *sql.DB
	Gate    *gate.Gate
	Server  *api.Server
	Handler http.Handler
	Client  *river.Client[*sql.Tx]
	// Ops is the operator routes under /ops (River UI, re-drive).
	Ops *ops.Server

	reaperInterval time.Duration
	reap           func(context.Context) error
	logger         *slog.Logger
}

// NewEmbedded assembles the api and the worker on the SQLite database db
// (from sqliteengine.Open, migrated). The database is the caller's.
func NewEmbedded(cfg *config.Config, db *sql.DB, logger *slog.Logger, apiOpts *APIOptions, workerOpts *WorkerOptions) (*Embedded, error) {
	if cfg.Driver() != config.DriverSQLite {
		return nil, errors.New("DATABASE_URL: the embedded deployment runs on SQLite (unset DATABASE_URL or sqlite:PATH)")
	}
	if logger == nil {
		logger = slog.Default()
	}
	apiOpts, workerOpts = embeddedOptions(apiOpts, workerOpts)
	tp := apiOpts.TracerProvider
	logger = tracedLogger(logger, tp)
	data := sqliteengine.New(db)
	tools, err := workerTools(cfg, data, workerOpts)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newClaimsCollector(sqlClaimCounts(db)))
	metrics, err := jobs.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	enqueuer := &jobs.Enqueuer[*sql.Tx]{Unavailable: sqliteengine.Unavailable}
	warnNoSecret(cfg, logger)
	g, err := gate.New(&gate.Config{
		OnTransition: metrics.Transition,
		Store:        data,
		Enqueuer:     enqueuer,
		Policies:     tools.Policies(),
		Secret:       []byte(cfg.Secret),
		DBTimeout:    EmbeddedDBTimeout,
		Logger:       logger,

		TracerProvider: tp,
	})
	if err != nil {
		return nil, err
	}
	control := &jobs.Control[*sql.Tx]{}
	workers, _, err := newWorkers[*riversqlite.Driver](cfg, g, tools, control, metrics, logger)
	if err != nil {
		return nil, err
	}
	client, err := river.NewClient(riversqlite.New(db), riverConfig(cfg, workers, workerOpts, logger))
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	enqueuer.Client, control.Client = client, client

	e := &Embedded{DB: db, Gate: g, Client: client, reaperInterval: cfg.ReaperInterval,
		reap: newReaper(cfg, g, control, logger).Reap, logger: logger}
	if err := e.buildAPI(cfg, control, data, tools, apiOpts, reg); err != nil {
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
func (e *Embedded) buildAPI(cfg *config.Config, control *jobs.Control[*sql.Tx], data apiData, tools *tool.Registry,
	apiOpts *APIOptions, reg *prometheus.Registry,
) error {
	srv, err := newAPIServer(cfg, e.Gate, control, data, tools, func(ctx context.Context) (bool, error) {
		return sqliteengine.Status(ctx, e.DB)
	}, apiOpts, reg, e.logger)
	if err != nil {
		return err
	}
	opsServer, err := newOpsServer(cfg, e.Gate, e.Client, control, srv, reg, e.logger)
	if err != nil {
		return err
	}
	opsServer.Mount(srv.Router())
	e.Server, e.Handler, e.Ops = srv, srv, opsServer
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
