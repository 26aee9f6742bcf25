// Package app assembles idemgate's parts from a config.Config and an
// engine.Driver: the gate on the driver's store, River on its River
// driver, the authenticator and the api. The
// binaries in cmd/ only call it; tests use it to run the real thing in
// process.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/oauth"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/tenancy"
)

// API is the assembled api process.
type API struct {
	Driver engine.Driver
	Gate   *core.Gate
	Tools  *toolspec.Registry
	// Jobs cancels and retries River jobs in the gate's transactions.
	Jobs    jobs.Client
	Server  *api.Server
	Handler http.Handler
	// Health serves /healthz, /readyz and /metrics alone, unauthenticated,
	// as Handler serves them too.
	Health http.Handler
	// Ops is the operator routes under /ops (River UI, re-drive).
	Ops    *ops.Server
	logger *slog.Logger
}

// APIOptions are what tests and embedders may change; zero fields take
// the api's defaults.
type APIOptions struct {
	// RateLimit is the sustained mutation calls per second allowed per
	// tenant and tool; negative disables the limit. Default (0): the
	// configuration's IDEMGATE_RATE_LIMIT (config.Config.RateLimit), where
	// 0 means off.
	RateLimit float64
	// RateBurst is how many calls per tenant and tool may come at once
	// before RateLimit paces them. Default (0): IDEMGATE_RATE_BURST.
	RateBurst int
	// Tools are the tools to serve. Default: the built-in tools.
	Tools *toolspec.Registry
	// TracerProvider receives the api's spans (requests, claims, River
	// inserts), and its log lines get trace ids. Nil: no tracing.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the api's OpenTelemetry MCP metric
	// (mcp.server.operation.duration). Nil: the api's own, exported on
	// its /metrics through OpenTelemetry's Prometheus exporter
	// (mcp_server_operation_duration_seconds).
	MeterProvider metric.MeterProvider
	// Auth authenticates every request. Nil: the configuration's, which
	// is OAuth's resource server when IDEMGATE_OAUTH_ISSUER is set, else
	// idemgate's own bearer tokens.
	Auth api.Authenticator
}

// NewAPI assembles the api of a deployment whose worker runs apart (not
// drv.EmbeddedWorker; see NewEmbedded otherwise) with default options. The
// driver is the caller's: NewAPI does not close it.
func NewAPI(cfg *config.Config, drv engine.Driver, logger *slog.Logger) (*API, error) {
	return NewAPIWithOptions(cfg, drv, logger, nil)
}

// NewAPIWithOptions is NewAPI with options; nil opts means defaults.
func NewAPIWithOptions(cfg *config.Config, drv engine.Driver, logger *slog.Logger, opts *APIOptions) (*API, error) {
	if opts == nil {
		opts = &APIOptions{}
	}
	if logger == nil {
		logger = slog.Default()
	}
	if drv.EmbeddedWorker() {
		return nil, errors.New("DATABASE_URL: on " + string(drv.Engine()) + " the api runs with the worker in one process (NewEmbedded)")
	}
	logger = tracedLogger(logger, opts.TracerProvider)
	// Insert-only: no queues and no workers in the api process. Its
	// FetchCooldown is also its NOTIFY limiter: an insert wakes the workers
	// at most once per queue per cooldown, so River's default (100 ms)
	// leaves a call inserted within 100 ms of the last notified one to the
	// workers' poll (DefaultFetchPollInterval); the workers' 10 ms bounds
	// the notifications at 100 a second per api process.
	riverClient := drivers.NewRiver(drv)
	if err := riverClient.Open(&river.Config{Logger: logger, FetchCooldown: DefaultFetchCooldown,
		Middleware: telemetry.RiverMiddleware(opts.TracerProvider)}); err != nil {
		return nil, err
	}
	// Claims awaiting approval mail the approvers (a job in the claim's
	// transaction) when the workers have the built-ins' mailer to do it.
	riverClient.SetApprovalNotices(approvalNotices())
	data := drv.Store()
	tools := opts.Tools
	if tools == nil {
		var err error
		if tools, err = BuiltinDeclarations(cfg, data); err != nil {
			return nil, err
		}
	}
	warnNoSecret(cfg, logger)
	promReg := prometheus.NewRegistry()
	onTransition, err := newApprovalCounter(promReg, nil)
	if err != nil {
		return nil, err
	}
	g, err := core.New(&core.Config{
		Store:    data,
		Enqueuer: riverClient,
		Policies: tools.Policies(),
		Secret:   []byte(cfg.Secret),

		MaxPendingApprovals: maxPendingApprovals(cfg),
		Logger:              logger,
		OnTransition:        onTransition,

		TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		return nil, err
	}
	srv, health, err := newAPIServer(cfg, g, riverClient, data, tools, drv.Migrated, opts, promReg, logger)
	if err != nil {
		return nil, err
	}
	// River UI gets an insert-only client of its own on the api's pool.
	uiClient := drivers.NewRiver(drv)
	if err := uiClient.Open(&river.Config{Logger: logger}); err != nil {
		return nil, fmt.Errorf("River UI: %w", err)
	}
	opsServer, err := newOpsServer(cfg, g, uiClient, riverClient, srv, promReg, logger)
	if err != nil {
		return nil, err
	}
	opsServer.Mount(srv.Router())
	return &API{Driver: drv, Gate: g, Tools: tools, Jobs: riverClient, Server: srv, Handler: srv, Health: health, Ops: opsServer, logger: logger}, nil
}

// warnNoSecret says, at the start of a process that claims, that without
// IDEMGATE_SECRET new claims' downstream keys derive from their random
// operation ids: an intent whose claim a lost commit forgot (a failover to
// an asynchronous standby, a restore) would reach Stripe with a new key.
func warnNoSecret(cfg *config.Config, logger *slog.Logger) {
	if cfg.Secret != "" {
		return
	}
	logger.Warn(config.EnvSecret+" is not set: new claims' downstream keys derive from their random operation ids, "+
		"so an intent re-created after a lost commit (a failover to an asynchronous standby, a restore) would reach "+
		"Stripe and the mailer with a new key and run again; set it, the same on every api process and worker "+
		"(openssl rand -hex 32)", "setting", config.EnvSecret)
}

// tracedLogger is logger with trace_id and span_id on the lines logged
// with a traced context, or logger itself when tp is off.
func tracedLogger(logger *slog.Logger, tp trace.TracerProvider) *slog.Logger {
	if !telemetry.On(tp) {
		return logger
	}
	return slog.New(telemetry.NewLogHandler(logger.Handler()))
}

// apiData is what the api reads and writes besides the gate: tokens, and
// what the routes the built-ins contribute read on the gate's store.
type apiData interface {
	core.Store
	store.Tokens
}

// newAPIServer builds the api's handler on a gate, with /metrics serving
// reg (to which it adds the Go and process collectors), and health, the
// handler of /healthz, /readyz and /metrics alone.
func newAPIServer(cfg *config.Config, g *core.Gate, jobControl core.JobControl, data apiData, tools *toolspec.Registry, migrated func(context.Context) (bool, error),
	opts *APIOptions, reg *prometheus.Registry, logger *slog.Logger,
) (srv *api.Server, health http.Handler, err error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	meters := opts.MeterProvider
	if meters == nil {
		if meters, err = prometheusMeters(reg); err != nil {
			return nil, nil, err
		}
	}
	rateLimit, rateBurst := apiRateLimit(cfg, opts)
	auth := opts.Auth
	if auth == nil {
		if auth, err = configuredAuth(cfg, data); err != nil {
			return nil, nil, err
		}
	}
	srv, err = api.New(&api.Config{
		Gate:       g,
		Auth:       auth,
		Tools:      tools,
		Jobs:       jobControl,
		Wait:       cfg.Wait,
		PublicURL:  cfg.PublicURLOrDefault(),
		RateLimit:  rateLimit,
		RateBurst:  rateBurst,
		Routes:     builtinRoutes(cfg, tools, data),
		Registerer: reg,
		Logger:     logger,

		AllowedOrigins: cfg.Origins(),
		StateSecret:    []byte(cfg.Secret),
		TracerProvider: opts.TracerProvider,
		MeterProvider:  meters,
		Ready: func(ctx context.Context) error {
			ok, err := migrated(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("migrations are not applied: run idemctl migrate")
			}
			return nil
		},
	})
	if err != nil {
		return nil, nil, err
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv.Router().Handle("/metrics", metrics)
	return srv, healthHandler(srv, metrics), nil
}

// healthHandler serves /healthz and /readyz as the api's router does
// (srv, with its middleware) and /metrics, and answers 404 to any other
// path.
func healthHandler(srv http.Handler, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", srv)
	mux.Handle("GET /readyz", srv)
	mux.Handle("GET /metrics", metrics)
	return mux
}

// maxPendingApprovals is the gate's cap on a tenant's calls awaiting
// approval: IDEMGATE_APPROVALS_MAX_PENDING, whose 0 (off) is the gate's
// negative.
func maxPendingApprovals(cfg *config.Config) int {
	if cfg.ApprovalsMaxPending == 0 {
		return -1
	}
	return cfg.ApprovalsMaxPending
}

// apiRateLimit is the limit for api.Config: the options' when set, else
// the configuration's, whose 0 (off) is api.Config's negative.
func apiRateLimit(cfg *config.Config, opts *APIOptions) (limit float64, burst int) {
	limit, burst = opts.RateLimit, opts.RateBurst
	if limit == 0 {
		limit = cfg.RateLimit
		if limit == 0 {
			limit = -1
		}
	}
	if burst == 0 {
		burst = cfg.RateBurst
	}
	return limit, burst
}

// Run runs the api's background work (River UI's cached counts) until ctx
// ends.
func (a *API) Run(ctx context.Context) {
	if err := a.Ops.Start(ctx); err != nil {
		a.logger.Error("River UI's background services did not start; it counts on demand", "error", err)
	}
	<-ctx.Done()
}

// configuredAuth is the authenticator the configuration asks for: OAuth's
// resource server with IDEMGATE_OAUTH_ISSUER, else idemgate's own bearer
// tokens.
func configuredAuth(cfg *config.Config, data store.Tokens) (api.Authenticator, error) {
	if cfg.OAuthIssuer == "" {
		return tenancy.NewAuthenticator(data, tenancy.DefaultTokenCacheTTL, time.Now), nil
	}
	v, err := oauth.New(context.Background(), &oauth.Config{
		Issuer:      cfg.OAuthIssuer,
		Audience:    cfg.OAuthAudience,
		Resource:    cfg.OAuthResource,
		TenantClaim: cmp.Or(cfg.OAuthTenantClaim, DefaultOAuthTenantClaim),
		UserClaim:   cfg.OAuthUserClaim,
		ScopesClaim: cfg.OAuthScopesClaim,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.EnvOAuthIssuer, err)
	}
	return v, nil
}

// DefaultOAuthTenantClaim is the claim that holds the tenant id when
// IDEMGATE_OAUTH_TENANT_CLAIM is empty.
const DefaultOAuthTenantClaim = "tenant"

// prometheusMeters is an OpenTelemetry meter provider whose instruments
// reg exports on /metrics (OpenTelemetry's Prometheus exporter; no
// target_info, and no scope labels on the series).
func prometheusMeters(reg *prometheus.Registry) (metric.MeterProvider, error) {
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("app: OpenTelemetry Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), nil
}
