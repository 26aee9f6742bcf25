package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// toolData is the store the built-in tools run their reads on.
type toolData = core.Store

// Builtins are the built-in tools' parts the assembly uses, handed over by
// internal/builtins when it is linked (the public package builtins imports
// it): the assembly itself imports neither the built-ins nor their Stripe
// and SMTP clients.
type Builtins struct {
	// Declarations are the built-in tools for a process that only claims.
	Declarations func(cfg *config.Config, data core.Store) (*toolspec.Registry, error)
	// Tools are the built-in tools for a worker, traced with tp.
	Tools func(cfg *config.Config, data core.Store, tp trace.TracerProvider) (*toolspec.Registry, error)
	// CheckWorker names the setting a worker of the built-ins lacks.
	CheckWorker func(cfg *config.Config) error
	// Migrate applies the built-in tools' migrations.
	Migrate func(ctx context.Context, drv engine.Driver, logger *slog.Logger) (int, error)
	// Routes are the unauthenticated api routes the built-in tools of
	// tools contribute on a store (api.Config.Routes), nil for none.
	Routes func(cfg *config.Config, tools *toolspec.Registry, st core.Store) api.Routes
	// ApprovalMailer mails approval notices, its calls traced with tp:
	// with it, claims awaiting approval insert a notice job and workers
	// work them.
	ApprovalMailer func(cfg *config.Config, tp trace.TracerProvider) (jobs.ApprovalMailer, error)
	// Jobs are the built-ins' own River workers and periodic jobs for the
	// built-in tools served in tools, on a store, their metrics in reg
	// (nil, nil for none).
	Jobs func(cfg *config.Config, tools *toolspec.Registry, data core.Store, logger *slog.Logger, reg prometheus.Registerer) (*BuiltinJobs, error)
}

// BuiltinJobs are River workers and periodic jobs of the built-ins (the
// periodic list of Stripe's refunds), run by idemgate's worker.
type BuiltinJobs struct {
	// Add registers the workers.
	Add func(workers *river.Workers) error
	// Periodic are the periodic jobs River's leader enqueues.
	Periodic []*river.PeriodicJob
	// Pass runs the periodic jobs' work once, every Interval, in a worker
	// that never leads (IDEMGATE_RIVER=shared); nil for none.
	Pass     func(ctx context.Context) error
	Interval time.Duration
}

// TeamPeriodicJobs are PeriodicJobs plus the built-ins' for the tools
// in tools on data, for a River client of one's own (jobs.Configure).
func TeamPeriodicJobs(cfg *config.Config, tools *toolspec.Registry, data core.Store, logger *slog.Logger) ([]*river.PeriodicJob, error) {
	periodic := PeriodicJobs(cfg)
	b, err := builtinJobs(cfg, tools, data, logger, nil)
	if err != nil {
		return nil, err
	}
	if b != nil {
		periodic = append(periodic, b.Periodic...)
	}
	return periodic, nil
}

// builtinJobs are the built-ins' jobs for the tools a worker serves, on
// data, or nil when they are not linked or have none.
func builtinJobs(cfg *config.Config, tools *toolspec.Registry, data core.Store, logger *slog.Logger, reg prometheus.Registerer) (*BuiltinJobs, error) {
	b, err := LinkedBuiltins()
	if err != nil || b.Jobs == nil {
		return nil, nil
	}
	return b.Jobs(cfg, tools, data, logger, reg)
}

var (
	builtinsMu sync.Mutex
	builtins   *Builtins
)

// SetBuiltins hands the assembly the built-ins (internal/builtins's init).
func SetBuiltins(b *Builtins) {
	builtinsMu.Lock()
	defer builtinsMu.Unlock()
	builtins = b
}

// LinkedBuiltins returns the built-ins, or an error saying how to link them.
func LinkedBuiltins() (*Builtins, error) {
	builtinsMu.Lock()
	defer builtinsMu.Unlock()
	if builtins == nil {
		return nil, ErrNoBuiltins
	}
	return builtins, nil
}

// ErrNoBuiltins is the error for the built-in tools in a program that does
// not link them.
var ErrNoBuiltins = errors.New(`the built-in tools are not linked into this program: import _ "github.com/idemgate/idemgate/builtins"`)

// BuiltinDeclarations is Builtins.Declarations, or ErrNoBuiltins.
func BuiltinDeclarations(cfg *config.Config, data core.Store) (*toolspec.Registry, error) {
	b, err := LinkedBuiltins()
	if err != nil {
		return nil, err
	}
	return b.Declarations(cfg, data)
}

// CheckBuiltinWorker is Builtins.CheckWorker, or ErrNoBuiltins.
func CheckBuiltinWorker(cfg *config.Config) error {
	b, err := LinkedBuiltins()
	if err != nil {
		return err
	}
	return b.CheckWorker(cfg)
}

// MigrateBuiltins is Builtins.Migrate, or ErrNoBuiltins.
func MigrateBuiltins(ctx context.Context, drv engine.Driver, logger *slog.Logger) (int, error) {
	b, err := LinkedBuiltins()
	if err != nil {
		return 0, err
	}
	return b.Migrate(ctx, drv, logger)
}

// builtinRoutes are the api routes the built-ins contribute for the tools
// served on data, or nil when they are not linked.
func builtinRoutes(cfg *config.Config, tools *toolspec.Registry, data core.Store) api.Routes {
	b, err := LinkedBuiltins()
	if err != nil || b.Routes == nil {
		return nil
	}
	return b.Routes(cfg, tools, data)
}

// builtinTools is Builtins.Tools, or ErrNoBuiltins.
func builtinTools(cfg *config.Config, data core.Store, tp trace.TracerProvider) (*toolspec.Registry, error) {
	b, err := LinkedBuiltins()
	if err != nil {
		return nil, err
	}
	return b.Tools(cfg, data, tp)
}

// approvalMailer is the built-ins' mailer of approval notices, traced with
// tp, or nil when they are not linked: then claims awaiting approval
// insert no notice job and no worker works one.
func approvalMailer(cfg *config.Config, tp trace.TracerProvider) (jobs.ApprovalMailer, error) {
	b, err := LinkedBuiltins()
	if err != nil || b.ApprovalMailer == nil {
		return nil, nil
	}
	return b.ApprovalMailer(cfg, tp)
}

// approvalNotices reports whether claims awaiting approval insert a notice
// job: the built-ins' mailer is linked to work them.
func approvalNotices() bool {
	b, err := LinkedBuiltins()
	return err == nil && b.ApprovalMailer != nil
}

// approvalNoticeWorker is the worker of approval notices on data, or nil
// when no mailer is linked (approvalMailer).
func approvalNoticeWorker(cfg *config.Config, data engine.Store, metrics *jobs.Metrics, logger *slog.Logger, tp trace.TracerProvider,
	period time.Duration,
) (*jobs.ApprovalNoticeWorker, error) {
	mailer, err := approvalMailer(cfg, tp)
	if mailer == nil || err != nil {
		return nil, err
	}
	return &jobs.ApprovalNoticeWorker{Store: data, Settings: data, Notices: data, Period: period, Mailer: mailer, PublicURL: cfg.PublicURLOrDefault(),
		Metrics: metrics, Logger: logger}, nil
}
