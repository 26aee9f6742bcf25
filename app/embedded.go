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

	"github.com/idemgate/idemgate/api"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/jobs"
	"github.com/idemgate/idemgate/migrations"
	"github.com/idemgate/idemgate/store/sqlitestore"
)

// EmbeddedDBTimeout bounds the gate's statements on SQLite, where callers
// queue for the one connection: longer than Postgres's default.
const EmbeddedDBTimeout = 5 * time.Second

// Embedded is the single-process deployment on SQLite: the api and the
// worker in one process (one writer per file), with one River client that
// both inserts the claims' jobs and works them. SQLite has no LISTEN, so
// waiting callers poll their claim every 50ms.
type Embedded struct {
	DB      *sql.DB
	Gate    *gate.Gate
	Server  *api.Server
	Handler http.Handler
	Client  *river.Client[*sql.Tx]
	logger  *slog.Logger
}

// NewEmbedded assembles the api and the worker on the SQLite database db
// (from sqlitestore.Open, migrated). The database is the caller's.
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
	data := sqlitestore.New(db)
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
	enqueuer := &jobs.Enqueuer[*sql.Tx]{Unavailable: sqlitestore.Unavailable}
	g, err := gate.New(&gate.Config{
		OnTransition: metrics.Transition,
		Store:        data,
		Enqueuer:     enqueuer,
		Policies:     tools.Policies(),
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

	srv, err := newAPIServer(cfg, g, control, data, tools, func(ctx context.Context) (bool, error) {
		return migrations.SQLiteStatus(ctx, db)
	}, apiOpts, reg, logger)
	if err != nil {
		return nil, err
	}
	return &Embedded{DB: db, Gate: g, Server: srv, Handler: srv, Client: client, logger: logger}, nil
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

// Run starts the worker half and blocks until ctx ends, then stops fetching
// and lets running jobs finish within stopTimeout.
func (e *Embedded) Run(ctx context.Context, stopTimeout time.Duration) error {
	return runRiver(ctx, e.Client, stopTimeout)
}
