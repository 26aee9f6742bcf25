// Package idemgate serves a team's mutating tools so that agents may retry
// them safely: one effect per idempotency key, over MCP (Streamable HTTP)
// and a REST twin, with durable River jobs, a reaper for killed workers,
// operator re-drive and River UI.
//
// Declare tools with package gate, add them to a gate.Registry, and build
// a Service from a Config:
//
//	reg := gate.NewRegistry()
//	reg.MustAdd(IssueCoupon)
//	cfg, err := idemgate.LoadConfig(os.Args[1:]) // ErrHelp after -h
//	// or in code: cfg := idemgate.DefaultConfig(); cfg.DatabaseURL = …
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
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// stopTimeout is how long running jobs may finish when a worker stops.
const stopTimeout = 30 * time.Second

// Options are a Service's optional parts. The zero value is valid.
type Options struct {
	// Logger defaults to JSON on stderr at the configured level.
	Logger *slog.Logger
	// Builtins adds idemgate's built-in tools (refund_order, apply_credit,
	// reset_seat, send_password_reset, get_order) to the registry:
	// builtins.Tools(). Nil: none, and the program links neither them nor
	// their Stripe and SMTP clients.
	Builtins Builtins
	// Migrations returns the service's own goose SQL migrations for an
	// engine (gate.Postgres or gate.SQLite), for its own tables; Migrate
	// applies them after idemgate's, with their own version table
	// (app_goose_db_version). Nil, or a nil FS: none.
	Migrations func(engine string) fs.FS
	// TracerProvider receives the spans of ServeAPI, RunWorker and RunAll.
	// Nil: each of them reads the OTEL_* variables, exports over OTLP/HTTP
	// when they ask for it (service idemgate-api or idemgate-worker), and
	// flushes when it returns; unset variables mean no tracing.
	TracerProvider trace.TracerProvider
	// Authenticate, when set, authenticates every request to every route
	// (MCP, the REST twin, the operator routes) instead of idemgate's own
	// bearer tokens: it returns the caller (tenant, user, scopes) or an
	// error, answered 401. An *domain.Error with CodeUnauthenticated is
	// shown to the client as it is; any other error is logged, not shown.
	// Tenant and user ids must pass domain.CheckID. Nil: the
	// configuration's (OAuth's resource server when IDEMGATE_OAUTH_ISSUER
	// is set, else tokens from CreateToken).
	Authenticate func(r *http.Request) (domain.Caller, error)
	// Pool is a Postgres pool of the program's own for idemgate to use
	// instead of opening one on Config.DatabaseURL (which may then be
	// empty): the gate, River's clients, reads and migrations all run on
	// it, and Close leaves it open. Its MaxConns bounds idemgate's
	// connections, plus the one a worker's River client takes out of it to
	// LISTEN, and Migrate's lock connection opened from its configuration.
	// With Config.DBPooler "transaction" its DefaultQueryExecMode must not
	// prepare named statements (pgx.QueryExecModeCacheDescribe); Open
	// refuses it otherwise.
	Pool *pgxpool.Pool
	// DB is a SQLite handle of the program's own for idemgate to use
	// instead of opening Config.DatabaseURL's file (which must then be
	// empty or sqlite:); Close leaves it open. Open refuses a handle that
	// may open more than one connection (db.SetMaxOpenConns(1)), has no
	// busy_timeout, or on a file does not begin its transactions with
	// BEGIN IMMEDIATE (modernc.org/sqlite's _txlock=immediate). While a
	// goroutine holds a transaction on it, that goroutine must not use
	// the handle otherwise: the one connection is the transaction's.
	DB *sql.DB
	// HealthApart leaves /healthz, /readyz and /metrics to HealthHandler:
	// ServeHTTP, ServeAPI and RunAll then answer them 404, for a program
	// that serves them on a listener of its own.
	HealthApart bool
}

// Service is one deployment's database and tools, from which the api and
// the worker are run. It is an http.Handler serving every api route, to
// mount in a router of one's own beside Run.
type Service struct {
	cfg    *config.Config
	reg    *toolspec.Registry
	opts   Options
	logger *slog.Logger
	// drv is the engine DATABASE_URL names, picked once by Open.
	drv    engine.Driver
	tokens store.Tokens

	// frontOnce builds front, the api (with the embedded worker on
	// SQLite), on first use.
	frontOnce sync.Once
	front     *front
	frontErr  error
	closeOnce sync.Once
}

// front is the assembled api of a Service.
type front struct {
	// handler serves every route (without /healthz, /readyz and /metrics
	// with Options.HealthApart); server is the api behind it; health
	// serves those three alone.
	handler http.Handler
	server  *api.Server
	health  http.Handler
	// run runs the api's background work, and on SQLite the worker.
	run func(ctx context.Context) error
	// tp receives the spans; stopTraces flushes the traces the OTEL_*
	// variables asked for.
	tp         trace.TracerProvider
	stopTraces func()
}

// Open opens cfg's database (or takes Options.Pool or Options.DB) and
// prepares reg's tools. It connects to nothing else. Invalid settings are
// an error naming each field. Close the Service when done. On Postgres
// without Options.Pool the process opens at most DATABASE_URL's
// pool_max_conns connections in all, River's LISTEN and the migration lock
// included, or 10 without it.
func Open(ctx context.Context, cfg *Config, reg *gate.Registry, opts *Options) (*Service, error) {
	if cfg == nil || reg == nil {
		return nil, errors.New("idemgate: Open needs a Config and a Registry")
	}
	s := &Service{reg: toolspec.Of(reg)}
	if opts != nil {
		s.opts = *opts
	}
	if err := linkBuiltins(s.opts.Builtins); err != nil {
		return nil, fmt.Errorf("Options.Builtins: %w", err)
	}
	given := *cfg
	if s.opts.Pool != nil && given.DatabaseURL == "" {
		given.DatabaseURL = poolURL(s.opts.Pool)
	}
	c, err := given.checked()
	if err != nil {
		return nil, err
	}
	s.cfg = c
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: s.cfg.LogLevel}))
	}
	drv, err := drivers.Open(ctx, s.cfg, &drivers.Options{MaxConns: config.DefaultPoolMaxConns, Logger: s.logger,
		Pool: s.opts.Pool, DB: s.opts.DB})
	if err != nil {
		switch {
		case s.opts.Pool != nil:
			err = fmt.Errorf("Options.Pool: %w", err)
		case s.opts.DB != nil:
			err = fmt.Errorf("Options.DB: %w", err)
		}
		return nil, err
	}
	s.drv = drv
	data := drv.Store()
	s.tokens = data
	if s.opts.Builtins != nil {
		builtins, err := app.BuiltinDeclarations(s.cfg, data)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("Options.Builtins: %w", err)
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

// Close closes the database, unless it is Options.Pool or Options.DB, and
// flushes the api's traces. A second Close does nothing.
func (s *Service) Close() {
	s.closeOnce.Do(func() {
		if s.front != nil && s.front.stopTraces != nil {
			s.front.stopTraces()
		}
		s.drv.Close()
	})
}

// Migrate applies River's and idemgate's migrations, then the built-in
// tools' (with Options.Builtins), then the service's own. It is safe to run
// repeatedly and from several processes.
func (s *Service) Migrate(ctx context.Context) error {
	if _, err := s.drv.Migrate(ctx, s.logger); err != nil {
		return err
	}
	if s.opts.Builtins != nil {
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
// gate.Tx.Engine names it), or nil.
func (s *Service) ownMigrations(engine string) fs.FS {
	if s.opts.Migrations == nil {
		return nil
	}
	return s.opts.Migrations(engine)
}

// CreateToken mints a bearer token for tenant and user with scopes (each
// one of the registry's tools' scopes, operations:read or ops:admin),
// stores its hash and returns the secret, which is shown this once. An
// agent's token takes the registry's gate.Registry.ToolScopes. Tenant and
// user ids must pass domain.CheckID.
func (s *Service) CreateToken(ctx context.Context, tenant, user string, scopes ...string) (string, error) {
	if err := tenancy.ValidateScopes(scopes, s.reg.Scopes()); err != nil {
		return "", fmt.Errorf("scopes: %w", err)
	}
	for _, id := range [][2]string{{"tenant", tenant}, {"user", user}} {
		if err := domain.CheckID(id[1]); err != nil {
			return "", fmt.Errorf("%s: %q %w", id[0], id[1], err)
		}
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
// at /ops and /healthz, /readyz, /metrics (unless Options.HealthApart) on
// IDEMGATE_API_ADDR until ctx ends. On SQLite the worker runs in this
// process too.
func (s *Service) ServeAPI(ctx context.Context) error {
	f, err := s.assemble()
	if err != nil {
		return err
	}
	return s.serve(ctx, f.handler, f.run)
}

// ServeHTTP serves every api route at its own path, for a Service mounted
// in a router of one's own (chi: r.Mount("/", svc)): /mcp, /v1/tools/…,
// /v1/operations…, /ops/… (River UI, re-drive), /healthz, /readyz,
// /metrics (unless Options.HealthApart: HealthHandler) and, in OAuth mode,
// /.well-known/oauth-protected-resource.
// Under a prefix (r.Mount("/idem", svc), http.StripPrefix) every route but
// River UI works; River UI's links need the root. Run the background work
// (Run) beside it. A Service that cannot be assembled answers 500 and logs
// why; Run returns the same error.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, err := s.assemble()
	if err != nil {
		s.logger.ErrorContext(r.Context(), "idemgate: the api could not be assembled", "error", err)
		http.Error(w, "idemgate: the api could not be assembled (see the log)", http.StatusInternalServerError)
		return
	}
	f.handler.ServeHTTP(w, mounted(r))
}

// mounted is r as the api's router should see it: under chi's Mount, the
// path left after the mount point, and no route context of the outer
// router.
func mounted(r *http.Request) *http.Request {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return r
	}
	path := rctx.RoutePath
	if path == "" {
		path = r.URL.Path
	}
	r2 := r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, nil))
	u := *r.URL
	u.Path, u.RawPath = path, ""
	r2.URL = &u
	return r2
}

// HealthHandler serves /healthz (alive), /readyz (the database answers
// and is migrated: 200, else 503) and /metrics (Prometheus) alone,
// unauthenticated, at those paths under wherever it is mounted
// (r.Mount("/internal", svc.HealthHandler()) serves /internal/healthz, as
// does http.StripPrefix): for a listener or router of the program's own,
// beside ServeHTTP or MCPHandler. With Options.HealthApart they are served
// only here. Other paths answer 404. On Postgres, /metrics is the api's;
// RunWorker serves the worker's.
func (s *Service) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := s.assemble()
		if err != nil {
			s.ServeHTTP(w, r)
			return
		}
		r = mounted(r)
		if !slices.Contains(healthPaths, r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		f.health.ServeHTTP(w, r)
	})
}

// healthPaths are the routes of HealthHandler.
var healthPaths = []string{"/healthz", "/readyz", "/metrics"}

// mainHandler is the api's handler h, without the health routes with
// Options.HealthApart.
func (s *Service) mainHandler(h http.Handler) http.Handler {
	if !s.opts.HealthApart {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(healthPaths, r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// poolURL is a postgres:// URL naming pool's database, for the settings
// that need one (Config.DatabaseURL left empty with Options.Pool); nothing
// connects to it.
func poolURL(pool *pgxpool.Pool) string {
	cc := pool.Config().ConnConfig
	if cs := pool.Config().ConnString(); strings.HasPrefix(cs, "postgres://") || strings.HasPrefix(cs, "postgresql://") {
		return cs
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort("localhost", strconv.Itoa(int(cc.Port))), Path: "/" + cc.Database}
	if cc.User != "" {
		u.User = url.User(cc.User)
	}
	if strings.HasPrefix(cc.Host, "/") {
		u.RawQuery = url.Values{"host": {cc.Host}}.Encode()
	} else if cc.Host != "" {
		u.Host = net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	}
	return u.String()
}

// MCPHandler serves MCP alone (Streamable HTTP, stateless, with tasks),
// authenticated and Origin-checked as at /mcp, at whatever path it is
// mounted: r.Handle("/agents/mcp", svc.MCPHandler()). Run the background
// work (Run) beside it.
func (s *Service) MCPHandler() http.Handler {
	f, err := s.assemble()
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.ServeHTTP(w, r) })
	}
	return f.server.MCP()
}

// AddTo adds the registry's tools, get_operation, list_operations and the
// task methods to server, a go-sdk MCP server of one's own (whose own tools
// stay as they are), and returns the handler to serve it with: Streamable
// HTTP, stateless, with idemgate's envelope checks, tasks, Origin check and
// authentication in front of every call, the server's own tools included.
// Mount it where the server is served (r.Handle("/mcp", h)) and run the
// background work (Run) beside it.
func (s *Service) AddTo(server *mcp.Server) (http.Handler, error) {
	f, err := s.assemble()
	if err != nil {
		return nil, err
	}
	return f.server.MCPFor(server)
}

// Run runs the background work of a Service served by a server of one's
// own (ServeHTTP, MCPHandler, AddTo) until ctx ends: the worker, the reaper
// and the pruner, and River UI's counts. It listens on nothing. On
// Postgres more workers may run elsewhere (RunWorker).
func (s *Service) Run(ctx context.Context) error {
	if err := s.checkWorker(); err != nil {
		return err
	}
	f, err := s.assemble()
	if err != nil {
		return err
	}
	if s.drv.EmbeddedWorker() {
		return f.run(ctx)
	}
	w, err := app.NewWorker(s.cfg, s.drv, s.logger, &app.WorkerOptions{Tools: s.reg, TracerProvider: f.tp})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f.run(ctx) }()
	err = w.Run(ctx, stopTimeout)
	return errors.Join(err, <-done)
}

// assemble builds the api once (on SQLite with the worker in it).
func (s *Service) assemble() (*front, error) {
	s.frontOnce.Do(func() { s.front, s.frontErr = s.newFront() })
	return s.front, s.frontErr
}

// newFront assembles the api with Options.TracerProvider, or the tracing
// the OTEL_* variables ask for (flushed by Close).
func (s *Service) newFront() (*front, error) {
	tp, stop, err := s.traces(context.Background(), telemetry.ServiceAPI)
	if err != nil {
		return nil, err
	}
	f := &front{tp: tp, stopTraces: stop}
	apiOpts := &app.APIOptions{Tools: s.reg, TracerProvider: tp}
	if s.opts.Authenticate != nil {
		apiOpts.Auth = callerAuth(s.opts.Authenticate)
	}
	if s.drv.EmbeddedWorker() {
		if err := s.checkWorker(); err != nil {
			stop()
			return nil, err
		}
		e, err := app.NewEmbedded(s.cfg, s.drv, s.logger, apiOpts, &app.WorkerOptions{Tools: s.reg})
		if err != nil {
			stop()
			return nil, err
		}
		f.handler, f.server, f.health = s.mainHandler(e.Handler), e.Server, e.Health
		f.run = func(ctx context.Context) error {
			s.logger.Info("embedded mode: the worker in this process", "engine", s.drv.Engine())
			return e.Run(ctx, stopTimeout)
		}
		return f, nil
	}
	a, err := app.NewAPIWithOptions(s.cfg, s.drv, s.logger, apiOpts)
	if err != nil {
		stop()
		return nil, err
	}
	f.handler, f.server, f.health = s.mainHandler(a.Handler), a.Server, a.Health
	f.run = func(ctx context.Context) error { a.Run(ctx); return nil }
	return f, nil
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
// either engine: Run, with the api served on IDEMGATE_API_ADDR.
func (s *Service) RunAll(ctx context.Context) error {
	if err := s.checkWorker(); err != nil {
		return err
	}
	f, err := s.assemble()
	if err != nil {
		return err
	}
	return s.serve(ctx, f.handler, s.Run)
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
	if s.opts.Builtins != nil {
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

// callerAuth is Options.Authenticate as the api's authenticator.
type callerAuth func(r *http.Request) (domain.Caller, error)

// Authenticate implements api.Authenticator; the api calls
// AuthenticateRequest instead.
func (a callerAuth) Authenticate(context.Context, string) (vocab.Actor, error) {
	return vocab.Actor{}, errors.New("idemgate: Options.Authenticate reads the request")
}

// AuthenticateRequest implements api.RequestAuthenticator: Options.Authenticate's
// caller, with ids checked as a token's are.
func (a callerAuth) AuthenticateRequest(r *http.Request) (vocab.Actor, error) {
	c, err := a(r)
	if err != nil {
		return vocab.Actor{}, err
	}
	for _, id := range [][2]string{{"tenant_id", c.TenantID}, {"user_id", c.UserID}} {
		if err := vocab.CheckIdentity(id[0], id[1]); err != nil {
			return vocab.Actor{}, fmt.Errorf("idemgate: Options.Authenticate returned a caller whose %w", err)
		}
	}
	return vocab.Actor{TenantID: c.TenantID, UserID: c.UserID, Scopes: c.Scopes}, nil
}
