package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/telemetry"
)

// Worker tuning. FetchCooldown is River's floor between fetches: its
// default 100ms caps a queue at MaxWorkers×10 jobs per second.
const (
	DefaultMaxWorkers        = 50
	DefaultFetchCooldown     = 10 * time.Millisecond
	DefaultFetchPollInterval = 250 * time.Millisecond
)

// Worker is the assembled worker process.
type Worker struct {
	// Client is the worker's River client; it also cancels and retries
	// jobs in the gate's transactions.
	Client jobs.Client
	Gate   *core.Gate
	Runner *jobs.Runner
	// Handler serves /metrics and /healthz (IDEMGATE_WORKER_ADDR).
	Handler http.Handler

	reaperInterval time.Duration
	reap           func(context.Context) error
	// prune is the pruner's pass when IDEMGATE_RIVER is shared: the worker
	// never leads, so it runs it itself every jobs.DefaultPruneInterval.
	prune func(context.Context) error
	// builtinPass is the built-ins' periodic work (the list of Stripe's
	// refunds) when IDEMGATE_RIVER is shared, every builtinInterval.
	builtinPass     func(context.Context) error
	builtinInterval time.Duration
	logger          *slog.Logger
}

// WorkerOptions are what tests may change; nil fields take defaults.
type WorkerOptions struct {
	// MaxWorkers is the default queue's concurrency.
	MaxWorkers int
	// Tools are the tools to work. Default: the built-in tools.
	Tools *toolspec.Registry
	// TracerProvider receives the worker's spans (River jobs, the built-in
	// tools' Stripe and SMTP calls), and its log lines get trace ids. Nil:
	// no tracing.
	TracerProvider trace.TracerProvider
	// MaxGroup is jobs.RunnerConfig.MaxGroup: how many in-transaction jobs
	// share a transaction (0: jobs.DefaultMaxGroup; 1: none).
	MaxGroup int
	// NoticePeriod is the least time between two approval notices of a
	// tenant (jobs.ApprovalNoticeWorker.Period). Default
	// jobs.DefaultNoticePeriod.
	NoticePeriod time.Duration
	// Fault, nil in production, is a test's hook at points of every claim
	// job (jobs.RunnerConfig.Fault): package toolkit kills jobs with it.
	Fault jobs.Fault
}

// NewWorker assembles the River workers of a deployment whose worker runs
// apart from the api (not drv.EmbeddedWorker). Run it with Run. The driver
// is the caller's.
func NewWorker(cfg *config.Config, drv engine.Driver, logger *slog.Logger, opts *WorkerOptions) (*Worker, error) {
	if drv.EmbeddedWorker() {
		return nil, errors.New("DATABASE_URL: on " + string(drv.Engine()) + " the worker runs inside the api process")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if opts == nil {
		opts = &WorkerOptions{}
	}
	p, err := newWorkerParts(cfg, drv, logger, opts)
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	if err := p.addWorkers(workers); err != nil {
		return nil, err
	}
	if err := p.client.Open(riverConfig(cfg, workers, p.builtin, opts, p.logger)); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	w := &Worker{Client: p.client, Gate: p.gate, Runner: p.runner, Handler: mux,
		reaperInterval: cfg.ReaperInterval, reap: newReaper(cfg, p.gate, p.client, p.logger).Reap, logger: p.logger}
	if cfg.River == config.RiverShared {
		pruner := &jobs.PrunerWorker{Gate: p.gate, Logger: p.logger}
		w.prune = func(ctx context.Context) error { return pruner.Work(ctx, nil) }
		if p.builtin != nil && p.builtin.Pass != nil {
			w.builtinPass, w.builtinInterval = p.builtin.Pass, p.builtin.Interval
		}
	}
	return w, nil
}

// workerParts are what a worker's River client works with: the gate on
// the driver's store with the client as its enqueuer, the claim jobs'
// runner, the approval notices' worker (nil without the built-ins'
// mailer), and the metrics' registry. The client is not open yet.
type workerParts struct {
	cfg     *config.Config
	client  jobs.Client
	gate    *core.Gate
	runner  *jobs.Runner
	notices *jobs.ApprovalNoticeWorker
	builtin *BuiltinJobs
	reg     *prometheus.Registry
	logger  *slog.Logger
}

// newWorkerParts assembles a worker's parts on drv with opts (not nil).
func newWorkerParts(cfg *config.Config, drv engine.Driver, logger *slog.Logger, opts *WorkerOptions) (*workerParts, error) {
	logger = tracedLogger(logger, opts.TracerProvider)
	data := drv.Store()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newClaimsCollector(drv.ClaimCounts))
	metrics, err := jobs.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	tools, err := workerTools(cfg, data, opts)
	if err != nil {
		return nil, err
	}
	onTransition, err := newApprovalCounter(reg, metrics.Transition)
	if err != nil {
		return nil, err
	}
	client := drivers.NewRiver(drv)
	g, err := core.New(&core.Config{Store: data, Enqueuer: client, Policies: tools.Policies(), OnTransition: onTransition, Logger: logger,
		Secret: []byte(cfg.Secret), TracerProvider: opts.TracerProvider})
	if err != nil {
		return nil, err
	}
	notices, err := approvalNoticeWorker(cfg, data, metrics, logger, opts.TracerProvider, opts.NoticePeriod)
	if err != nil {
		return nil, err
	}
	runner, err := newRunner(cfg, g, tools, metrics, logger, opts, 0)
	if err != nil {
		return nil, err
	}
	builtin, err := builtinJobs(cfg, tools, data, logger, reg)
	if err != nil {
		return nil, err
	}
	return &workerParts{cfg: cfg, client: client, gate: g, runner: runner, notices: notices, builtin: builtin, reg: reg, logger: logger}, nil
}

// addWorkers registers the parts' workers in workers (addWorkers).
func (p *workerParts) addWorkers(workers *river.Workers) error {
	return addWorkers(workers, p.cfg, p.gate, p.client, p.runner, p.notices, p.builtin, p.logger)
}

// newWorkers builds the claim jobs' runner over the registry's mutations
// (newRunner) and River's workers for them, the reaper, the pruner and
// the approval notices when notices is set (addWorkers).
func newWorkers(cfg *config.Config, g *core.Gate, reg *toolspec.Registry, client jobs.Client,
	notices *jobs.ApprovalNoticeWorker, builtin *BuiltinJobs, metrics *jobs.Metrics, logger *slog.Logger, opts *WorkerOptions, groupsAtOnce int,
) (*river.Workers, *jobs.Runner, error) {
	runner, err := newRunner(cfg, g, reg, metrics, logger, opts, groupsAtOnce)
	if err != nil {
		return nil, nil, err
	}
	workers := river.NewWorkers()
	if err := addWorkers(workers, cfg, g, client, runner, notices, builtin, logger); err != nil {
		return nil, nil, err
	}
	return workers, runner, nil
}

// newRunner builds the claim jobs' runner over the registry's mutations,
// with opts' group size and a test's fault (nil in production), and
// groupsAtOnce (0 for jobs.DefaultGroups).
func newRunner(cfg *config.Config, g *core.Gate, reg *toolspec.Registry, metrics *jobs.Metrics, logger *slog.Logger,
	opts *WorkerOptions, groupsAtOnce int,
) (*jobs.Runner, error) {
	return jobs.NewRunner(&jobs.RunnerConfig{
		Gate:            g,
		Tools:           reg,
		InflightTimeout: cfg.InflightTimeout,
		Metrics:         metrics,
		Logger:          logger,
		MaxGroup:        opts.MaxGroup,
		Groups:          groupsAtOnce,
		Fault:           opts.Fault,
	})
}

// addWorkers registers in workers River's workers of runner's claim jobs
// (on client's River driver), of the reaper and the pruner, and of the
// approval notices when notices is set; client inserts notices exactly
// then. A kind workers already has is an error.
func addWorkers(workers *river.Workers, cfg *config.Config, g *core.Gate, client jobs.Client, runner *jobs.Runner,
	notices *jobs.ApprovalNoticeWorker, builtin *BuiltinJobs, logger *slog.Logger,
) error {
	if err := client.AddWorkers(workers, runner); err != nil {
		return err
	}
	if err := river.AddWorkerSafely(workers, newReaper(cfg, g, client, logger)); err != nil {
		return err
	}
	if err := river.AddWorkerSafely(workers, &jobs.PrunerWorker{Gate: g, Logger: logger}); err != nil {
		return err
	}
	if notices != nil {
		if err := river.AddWorkerSafely(workers, notices); err != nil {
			return err
		}
	}
	client.SetApprovalNotices(notices != nil)
	if builtin != nil && builtin.Add != nil {
		if err := builtin.Add(workers); err != nil {
			return err
		}
	}
	return nil
}

// newReaper is the reaper of g's claims: River's reaper job's worker, and
// the pass every worker process runs each interval (jobs.KeepReaping).
func newReaper(cfg *config.Config, g *core.Gate, control core.JobControl, logger *slog.Logger) *jobs.ReaperWorker {
	return &jobs.ReaperWorker{Gate: g, Control: control, Logger: logger, StaleAfter: cfg.InflightTimeout}
}

// workerTools is opts.Tools, or the built-in tools on data, traced with
// opts.TracerProvider.
func workerTools(cfg *config.Config, data toolData, opts *WorkerOptions) (*toolspec.Registry, error) {
	if opts.Tools != nil {
		return opts.Tools, nil
	}
	if err := CheckBuiltinWorker(cfg); err != nil {
		return nil, err
	}
	return builtinTools(cfg, data, opts.TracerProvider)
}

// riverConfig is the River configuration of a working client: idemgate's
// claim queue and maintenance queue only (never River's default, which a
// team's own client may work), the periodic
// reaper and pruner, a job timeout below the lease, River's rescuer as a
// backstop after the reaper, and a fetch cooldown far below River's 100ms
// default (which caps a queue at MaxWorkers x 10 jobs per second).
func riverConfig(cfg *config.Config, workers *river.Workers, builtin *BuiltinJobs, opts *WorkerOptions, logger *slog.Logger) *river.Config {
	maxWorkers := opts.MaxWorkers
	if maxWorkers == 0 {
		maxWorkers = DefaultMaxWorkers
	}
	queues := map[string]river.QueueConfig{
		jobs.Queue:            {MaxWorkers: maxWorkers},
		jobs.MaintenanceQueue: {MaxWorkers: 2},
	}
	// A database whose River a team's client works too: idemgate's worker
	// never leads, so that the team's leader enqueues the team's periodic
	// jobs and rescues the team's stuck jobs (a leader discards stuck jobs
	// of kinds it does not know); the reaper and the pruner then run in
	// every worker process (Worker.Run), not as periodic jobs.
	shared := cfg.River == config.RiverShared
	var periodic []*river.PeriodicJob
	if !shared {
		periodic = PeriodicJobs(cfg)
		if builtin != nil {
			periodic = append(periodic, builtin.Periodic...)
		}
	}
	return &river.Config{
		Queues:                 queues,
		Workers:                workers,
		PeriodicJobs:           periodic,
		LeaderElectionDisabled: shared,
		FetchCooldown:          DefaultFetchCooldown,
		FetchPollInterval:      DefaultFetchPollInterval,
		// A transaction pooler loses a LISTEN with its transaction: River
		// then polls for jobs every FetchPollInterval and elects its leader
		// by polling too.
		PollOnly:   cfg.Pooled(),
		JobTimeout: jobs.JobTimeout(cfg.InflightTimeout),
		// The reaper brings killed workers' claims back within the lease plus
		// one reaper interval; River's rescuer stays as a backstop after that.
		RescueStuckJobsAfter: cfg.InflightTimeout + 2*cfg.ReaperInterval,
		Logger:               logger,
		Middleware:           telemetry.RiverMiddleware(opts.TracerProvider),
	}
}

// PeriodicJobs are the reaper's and the pruner's periodic jobs.
func PeriodicJobs(cfg *config.Config) []*river.PeriodicJob {
	return jobs.PeriodicJobs(cfg.ReaperInterval, jobs.DefaultPruneInterval)
}

// Run starts the worker and blocks until ctx ends, then stops fetching and
// lets running jobs finish within stopTimeout.
func (w *Worker) Run(ctx context.Context, stopTimeout time.Duration) error {
	reapCtx, stopReaping := context.WithCancel(ctx)
	defer stopReaping()
	go jobs.KeepReaping(reapCtx, w.reap, w.reaperInterval, w.logger)
	if w.prune != nil {
		go jobs.KeepReaping(reapCtx, w.prune, jobs.DefaultPruneInterval, w.logger)
	}
	if w.builtinPass != nil {
		go jobs.KeepReaping(reapCtx, w.builtinPass, w.builtinInterval, w.logger)
	}
	return runRiver(ctx, w.Client, stopTimeout)
}

// runRiver starts a River client and blocks until ctx ends, then stops it
// softly: no new fetches, running jobs finish within stopTimeout, and only
// then are they cancelled.
func runRiver(ctx context.Context, client jobs.Client, stopTimeout time.Duration) error {
	// River's own context is not ctx: cancelling it would stop River hard.
	riverCtx, cancelRiver := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRiver()
	if err := client.Start(riverCtx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		cancelRiver() // jobs still running past the bound are cancelled
		return fmt.Errorf("worker: stop: %w", err)
	}
	return nil
}
