// Package idemgate serves a team's mutating tools so that agents may retry
// them safely: one effect per idempotency key, over MCP (Streamable HTTP)
// and a REST twin, with durable River jobs, a reaper for killed workers,
// operator re-drive and River UI.
//
// Declare tools with package tool, add them to a tool.Registry, and build
// a Service from a Config:
//
//	reg := tool.NewRegistry()
//	reg.MustAdd(IssueCoupon)
//	cfg, err := idemgate.LoadConfig(os.Args[1:]) // ErrHelp after -h
//	svc, err := idemgate.Open(ctx, cfg, reg, nil)
//	defer svc.Close()
//	err = svc.Migrate(ctx)
//	err = svc.RunAll(ctx) // api and worker in one process
//
// On Postgres (DATABASE_URL=postgres://…) the api (ServeAPI) and the worker
// (RunWorker) may run as separate processes, each any number of times. On
// the embedded SQLite default the worker always runs inside the api process.
package idemgate

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/tool"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/tenancy"
)

// Config is every process's configuration: DATABASE_URL, IDEMGATE_API_ADDR
// and the rest, read by LoadConfig (docs/configuration.md lists each
// setting and its default; -h prints them).
type Config struct {
	c *config.Config
}

// ErrHelp is LoadConfig's error for -h or --help, after it printed every
// setting to standard output: exit 0 on it.
var ErrHelp = config.ErrHelp

// LoadConfig reads the configuration from args (flags) and the environment.
// Invalid settings are an error that names the setting; -h or --help prints
// the settings and returns ErrHelp.
func LoadConfig(args []string) (*Config, error) {
	c, err := config.Load(args, os.Getenv)
	if err != nil {
		return nil, err
	}
	return &Config{c: c}, nil
}

// stopTimeout is how long running jobs may finish when a worker stops.
const stopTimeout = 30 * time.Second

// Options are a Service's optional parts. The zero value is valid.
type Options struct {
	// Logger defaults to JSON on stderr at the configured level.
	Logger *slog.Logger
	// Builtins adds idemgate's built-in tools (refund_order, apply_credit,
	// reset_seat, send_password_reset, get_order) to the registry.
	Builtins bool
	// Migrations returns the service's own goose SQL migrations for an
	// engine (tool.Postgres or tool.SQLite), for its own tables; Migrate
	// applies them after idemgate's, with their own version table
	// (app_goose_db_version). Nil, or a nil FS: none.
	Migrations func(engine string) fs.FS
	// TracerProvider receives the spans of ServeAPI, RunWorker and RunAll.
	// Nil: each of them reads the OTEL_* variables, exports over OTLP/HTTP
	// when they ask for it (service idemgate-api or idemgate-worker), and
	// flushes when it returns; unset variables mean no tracing.
	TracerProvider trace.TracerProvider
}

// Service is one deployment's database and tools, from which the api and
// the worker are run.
type Service struct {
	cfg    *config.Config
	reg    *toolspec.Registry
	opts   Options
	logger *slog.Logger
	// drv is the engine DATABASE_URL names, picked once by Open.
	drv    engine.Driver
	tokens store.Tokens
}

// Open opens cfg's database and prepares reg's tools. It connects to
// nothing else. Close the Service when done. On Postgres the process opens
// at most DATABASE_URL's pool_max_conns connections in all, River's LISTEN
// and the migration lock included, or 10 without it.
func Open(ctx context.Context, cfg *Config, reg *tool.Registry, opts *Options) (*Service, error) {
	if cfg == nil || reg == nil {
		return nil, errors.New("idemgate: Open needs a Config and a Registry")
	}
	s := &Service{cfg: cfg.c, reg: toolspec.Of(reg)}
	if opts != nil {
		s.opts = *opts
	}
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.cfg.LogLevel}))
	}
	drv, err := drivers.Open(ctx, s.cfg, &drivers.Options{MaxConns: config.DefaultPoolMaxConns, Logger: s.logger})
	if err != nil {
		return nil, err
	}
	s.drv = drv
	data := drv.Store()
	s.tokens = data
	if s.opts.Builtins {
		builtins, err := app.BuiltinDeclarations(s.cfg, data)
		if err != nil {
			s.Close()
			return nil, err
		}
		for _, spec := range builtins.All() {
			if err := s.reg.Add(spec); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// Close closes the database.
func (s *Service) Close() { s.drv.Close() }

// Migrate applies River's and idemgate's migrations, then the built-in
// tools' (with Options.Builtins), then the service's own. It is safe to run
// repeatedly and from several processes.
func (s *Service) Migrate(ctx context.Context) error {
	if _, err := s.drv.Migrate(ctx, s.logger); err != nil {
		return err
	}
	if s.opts.Builtins {
		if _, err := app.MigrateBuiltins(ctx, s.drv, s.logger); err != nil {
			return err
		}
	}
	if fsys := s.ownMigrations(s.drv.Engine()); fsys != nil {
		_, err := s.drv.MigrateApp(ctx, fsys, s.logger)
		return err
	}
	return nil
}

// ownMigrations is Options.Migrations for engine (the driver's, as
// tool.Tx.Engine names it), or nil.
func (s *Service) ownMigrations(engine string) fs.FS {
	if s.opts.Migrations == nil {
		return nil
	}
	return s.opts.Migrations(engine)
}

// CreateToken mints a bearer token for tenant and user with scopes (each
// one of the registry's tools' scopes, operations:read or ops:admin),
// stores its hash and returns the secret, which is shown this once. An
// agent's token takes the registry's tool.Registry.ToolScopes.
func (s *Service) CreateToken(ctx context.Context, tenant, user string, scopes ...string) (string, error) {
	if err := tenancy.ValidateScopes(scopes, s.reg.Scopes()); err != nil {
		return "", fmt.Errorf("scopes: %w", err)
	}
	secret, id, err := tenancy.NewToken()
	if err != nil {
		return "", err
	}
	if _, err := s.tokens.TokenInsert(ctx, &store.TokenInsertParams{ID: id, TenantID: tenant, UserID: user, Scopes: scopes, Hash: tenancy.HashToken(secret)}); err != nil {
		return "", err
	}
	return secret, nil
}

// ServeAPI serves MCP at /mcp, the REST twin at /v1, the operator routes
// at /ops and /healthz, /readyz, /metrics on IDEMGATE_API_ADDR until ctx
// ends. On SQLite the worker runs in this process too.
func (s *Service) ServeAPI(ctx context.Context) error {
	if s.drv.EmbeddedWorker() {
		return s.RunAll(ctx)
	}
	tp, stop, err := s.traces(ctx, telemetry.ServiceAPI)
	if err != nil {
		return err
	}
	defer stop()
	a, err := app.NewAPIWithOptions(s.cfg, s.drv, s.logger, &app.APIOptions{Tools: s.reg, TracerProvider: tp})
	if err != nil {
		return err
	}
	return s.serve(ctx, a.Handler, func(ctx context.Context) error { a.Run(ctx); return nil })
}

// RunWorker works the tools' jobs, the reaper and the pruner until ctx
// ends, serving /metrics and /healthz on IDEMGATE_WORKER_ADDR. Postgres
// only: on SQLite the worker runs inside ServeAPI.
func (s *Service) RunWorker(ctx context.Context) error {
	if s.drv.EmbeddedWorker() {
		return errors.New("DATABASE_URL: on " + s.drv.Engine() + " the worker runs inside the api process (ServeAPI)")
	}
	if err := s.checkWorker(); err != nil {
		return err
	}
	tp, stop, err := s.traces(ctx, telemetry.ServiceWorker)
	if err != nil {
		return err
	}
	defer stop()
	w, err := app.NewWorker(s.cfg, s.drv, s.logger, &app.WorkerOptions{Tools: s.reg, TracerProvider: tp})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.WorkerAddr)
	if err != nil {
		return fmt.Errorf("IDEMGATE_WORKER_ADDR: %w", err)
	}
	srv := metricsServer(w.Handler)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	s.logger.Info("worker starting", "metrics", "http://"+ln.Addr().String()+"/metrics", "config", s.cfg)
	return w.Run(ctx, stopTimeout)
}

// RunAll runs the api and the worker in this process until ctx ends, on
// either engine.
func (s *Service) RunAll(ctx context.Context) error {
	if err := s.checkWorker(); err != nil {
		return err
	}
	tp, stop, err := s.traces(ctx, telemetry.ServiceAPI)
	if err != nil {
		return err
	}
	defer stop()
	if s.drv.EmbeddedWorker() {
		e, err := app.NewEmbedded(s.cfg, s.drv, s.logger, &app.APIOptions{Tools: s.reg, TracerProvider: tp}, &app.WorkerOptions{Tools: s.reg})
		if err != nil {
			return err
		}
		s.logger.Info("embedded mode: the worker in this process", "engine", s.drv.Engine())
		return s.serve(ctx, e.Handler, func(ctx context.Context) error { return e.Run(ctx, stopTimeout) })
	}
	a, err := app.NewAPIWithOptions(s.cfg, s.drv, s.logger, &app.APIOptions{Tools: s.reg, TracerProvider: tp})
	if err != nil {
		return err
	}
	w, err := app.NewWorker(s.cfg, s.drv, s.logger, &app.WorkerOptions{Tools: s.reg, TracerProvider: tp})
	if err != nil {
		return err
	}
	return s.serve(ctx, a.Handler, func(ctx context.Context) error {
		done := make(chan struct{})
		go func() { defer close(done); a.Run(ctx) }()
		err := w.Run(ctx, stopTimeout)
		<-done
		return err
	})
}

// traceFlushTimeout bounds the export of the last spans when a process
// stops.
const traceFlushTimeout = 5 * time.Second

// traces is Options.TracerProvider, or the one the OTEL_* variables ask
// for with service as the default name; stop flushes and stops the latter.
func (s *Service) traces(ctx context.Context, service string) (tp trace.TracerProvider, stop func(), err error) {
	if s.opts.TracerProvider != nil {
		return s.opts.TracerProvider, func() {}, nil
	}
	t, err := telemetry.Setup(ctx, service, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	if t.Enabled() {
		s.logger.Info("traces: exporting over OTLP/HTTP as the OTEL_* variables say", "default_service", service)
	}
	return t.TracerProvider(), func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := t.Shutdown(flushCtx); err != nil {
			s.logger.Warn("traces: the last spans were not exported", "error", err)
		}
	}, nil
}

// metricsServer serves the worker's /metrics and /healthz with timeouts on
// every phase, so that a slow or idle client cannot hold a connection.
func metricsServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
}

// checkWorker refuses to work the built-in tools without their settings.
func (s *Service) checkWorker() error {
	if s.opts.Builtins {
		return app.CheckBuiltinWorker(s.cfg)
	}
	return nil
}

// serve serves handler on IDEMGATE_API_ADDR with background work beside
// it until ctx ends, then drains requests and stops the background work.
func (s *Service) serve(ctx context.Context, handler http.Handler, background func(context.Context) error) error {
	ln, err := net.Listen("tcp", s.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("IDEMGATE_API_ADDR: %w", err)
	}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	backgroundDone := make(chan error, 1)
	go func() { backgroundDone <- background(runCtx) }()
	defer func() {
		cancelRun()
		if err := <-backgroundDone; err != nil {
			s.logger.Error("background work stopped with an error", "error", err)
		}
	}()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.Wait + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	s.logger.Info("api listening", "addr", ln.Addr().String(), "mcp", "http://"+ln.Addr().String()+"/mcp", "config", s.cfg)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.logger.Info("api shutting down: draining requests")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
