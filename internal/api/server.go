// Package api is idemgate's front door: the MCP server (Streamable HTTP,
// stateless) with the mutation and read tools, their REST twins, and the
// health routes. cmd/api wires it; everything here is testable in process.
package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Defaults of Config.
const (
	// DefaultMaxBodyBytes bounds a request body.
	DefaultMaxBodyBytes = 256 << 10
	// DefaultRateLimit is the sustained mutation calls per second allowed per
	// tenant and tool.
	DefaultRateLimit = 50
	// DefaultRateBurst is the burst above the sustained rate.
	DefaultRateBurst = 200
)

// Authenticator turns a bearer token into an actor. It returns an error
// wrapping vocab.ErrUnavailable when it cannot tell, and any other error
// for a token it refuses.
type Authenticator interface {
	Authenticate(ctx context.Context, bearer string) (vocab.Actor, error)
}

// Config configures a Server.
type Config struct {
	// Gate is the idempotency gate. Required.
	Gate *core.Gate
	// Auth authenticates bearer tokens. Required.
	Auth Authenticator
	// Tools are the tools served besides the built-in get_operation and
	// list_operations.
	Tools *toolspec.Registry
	// Jobs cancels River jobs in the gate's transactions (tasks/cancel).
	// Required.
	Jobs core.JobControl
	// Wait is how long a mutation waits for its outcome (IDEMGATE_WAIT).
	Wait time.Duration
	// PublicURL is the api's base URL as people reach it
	// (IDEMGATE_PUBLIC_URL, without a trailing slash): an operation
	// awaiting approval links to PublicURL/approvals/{id}. Empty links to
	// the path alone.
	PublicURL string
	// DBTimeout bounds reads and audit writes. Default core.DefaultDBTimeout.
	DBTimeout time.Duration
	// MaxBodyBytes bounds request bodies. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RateLimit and RateBurst limit mutation calls per tenant and tool.
	// Defaults DefaultRateLimit and DefaultRateBurst; a negative RateLimit
	// disables the limit.
	RateLimit float64
	RateBurst int
	// Routes adds the unauthenticated routes the tool set contributes (a
	// tool's page and the route it posts to). Nil adds none.
	Routes Routes
	// Ready reports whether the service can serve (database reachable,
	// migrations applied), for /readyz. Nil means always ready.
	Ready func(ctx context.Context) error
	// Registerer receives the api's metrics. Nil means a private registry.
	Registerer prometheus.Registerer
	// TracerProvider receives a server span per request, and one per MCP
	// message inside it (OpenTelemetry's MCP conventions: "tools/call
	// refund_order"). Nil or a no-op provider: no spans, no tracing
	// middleware.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the OpenTelemetry MCP metric
	// mcp.server.operation.duration. Nil or a no-op provider: not
	// recorded. The api's other metrics are Prometheus's (Registerer).
	MeterProvider metric.MeterProvider
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// SDKOnlyMCP sends every MCP request through the MCP SDK's handler.
	// Default (false): a plain tools/call of a served tool is answered by
	// the api itself, with what the SDK would answer but without a server
	// session per request (api/mcpfast.go); everything else goes to the
	// SDK either way.
	SDKOnlyMCP bool
	// AllowedOrigins are the origins (scheme://host[:port]) from which a
	// browser page may call /mcp and the REST routes; a request with
	// another Origin header is refused with 403, one without Origin (a
	// non-browser client) is served. Empty (the default): only the
	// server's own origin, the one whose host and port are the request's
	// Host. New refuses an entry that is not an http(s) origin.
	AllowedOrigins []string
	// StateSecret keys the requestState of 2026-07-28 input_required
	// answers (IDEMGATE_SECRET). Empty: a random key of the process, so
	// that a state does not cross replicas or restarts (the client is
	// asked again).
	StateSecret []byte
}

// Server serves MCP, REST and health routes.
type Server struct {
	gate  *core.Gate
	auth  Authenticator
	tools *toolspec.Registry
	// getOperation and listOperationsTool are the built-in reads.
	getOperation       *toolspec.Spec
	listOperationsTool *toolspec.Spec
	// jobs cancels a cancelled task's job.
	jobs core.JobControl
	wait time.Duration
	// publicURL is Config.PublicURL.
	publicURL string
	dbTimeout time.Duration
	maxBody   int64
	ready     func(ctx context.Context) error
	limiter   *limiter
	metrics   *metrics
	// registerer receives the api's metrics and those of the routes it
	// was given (RouteKit.Registerer).
	registerer prometheus.Registerer
	logger     *slog.Logger
	router     chi.Router
	// tracerProvider is Config.TracerProvider.
	tracerProvider trace.TracerProvider
	// sdkOnlyMCP is Config.SDKOnlyMCP.
	sdkOnlyMCP bool
	// allowedOrigins are Config.AllowedOrigins, normalized.
	allowedOrigins map[string]bool
	// methods are the MCP methods served: the SDK's and the custom ones,
	// with their flags (checkRequest).
	methods map[string]int
	// mcpTelemetry records the MCP spans and metric; nil when off.
	mcpTelemetry *mcpTelemetry
	// mcp serves /mcp, without the router's middleware.
	mcp http.Handler
	// states signs and verifies MRTR requestState (mrtr.go).
	states *stateSigner
}

// New returns a Server. It refuses to start when a mutating tool has no gate
// policy: nothing mutates outside the gate.
func New(cfg *Config) (*Server, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	s := newServer(cfg)
	for _, o := range cfg.AllowedOrigins {
		n, ok := normalizeOrigin(o)
		if !ok {
			return nil, fmt.Errorf("api: allowed origin %q is not an http(s) origin (scheme://host[:port])", o)
		}
		s.allowedOrigins[n] = true
	}
	var err error
	if s.getOperation, err = s.getOperationSpec(); err != nil {
		return nil, err
	}
	if s.listOperationsTool, err = s.listOperationsSpec(); err != nil {
		return nil, err
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.registerer = reg
	if s.metrics, err = newMetrics(reg); err != nil {
		return nil, err
	}
	s.methods = make(map[string]int, len(sdkMethods)+len(taskMethods))
	for m, f := range sdkMethods {
		s.methods[m] = f
	}
	for _, m := range taskMethods {
		s.methods[m] = methodParamsOptional
	}
	if s.mcpTelemetry, err = newMCPTelemetry(cfg.TracerProvider, cfg.MeterProvider, s.methods, s.allTools()); err != nil {
		return nil, err
	}
	if s.mcp, err = s.mcpHandler(); err != nil {
		return nil, err
	}
	if s.router, err = s.routes(s.mcp, cfg.Routes); err != nil {
		return nil, err
	}
	return s, nil
}

// checkConfig refuses a Config without its required parts, with a mutating
// tool that has no gate policy, or with a tool named like a built-in.
func checkConfig(cfg *Config) error {
	if cfg.Gate == nil || cfg.Auth == nil || cfg.Tools == nil || cfg.Jobs == nil {
		return errors.New("api: Config.Gate, Config.Auth, Config.Tools and Config.Jobs are required")
	}
	// Nothing mutates outside the gate: every mutation needs its policy.
	for _, name := range cfg.Tools.MutationNames() {
		if _, ok := cfg.Gate.Policy(name); !ok {
			return fmt.Errorf("api: mutating tool %q has no gate policy; refusing to start", name)
		}
	}
	for _, name := range []string{GetOperation, ListOperations} {
		if _, dup := cfg.Tools.Get(name); dup {
			return fmt.Errorf("api: %s is built in; a registered tool may not take its name", name)
		}
	}
	return nil
}

// newServer returns a Server with cfg's settings and the defaults of those
// left unset; the built-in tools, metrics and routes are New's.
func newServer(cfg *Config) *Server {
	s := &Server{
		states:    newStateSigner(cfg.StateSecret),
		gate:      cfg.Gate,
		auth:      cfg.Auth,
		tools:     cfg.Tools,
		jobs:      cfg.Jobs,
		wait:      cfg.Wait,
		publicURL: strings.TrimRight(cfg.PublicURL, "/"),
		dbTimeout: cfg.DBTimeout,
		maxBody:   cfg.MaxBodyBytes,
		ready:     cfg.Ready,
		logger:    cfg.Logger,

		tracerProvider: cfg.TracerProvider,
		sdkOnlyMCP:     cfg.SDKOnlyMCP,
		allowedOrigins: map[string]bool{},
	}
	if s.dbTimeout == 0 {
		s.dbTimeout = core.DefaultDBTimeout
	}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	rl, burst := cfg.RateLimit, cfg.RateBurst
	if rl == 0 {
		rl = DefaultRateLimit
	}
	if burst == 0 {
		burst = DefaultRateBurst
	}
	s.limiter = newLimiter(rl, burst)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// MCP returns the handler of /mcp alone, at whatever path it is mounted,
// with the middleware the router gives it (Wrap).
func (s *Server) MCP() http.Handler { return s.Wrap(s.mcp) }

// Wrap puts h behind the middleware of the api's authenticated routes:
// tracing, request id, access log, panic recovery, the body limit, the
// Origin check and authentication.
func (s *Server) Wrap(h http.Handler) http.Handler {
	return chi.Chain(s.traced, requestID, s.accessLog, middleware.Recoverer, s.limitBody,
		s.checkOrigin, s.authenticate, s.readBody).Handler(h)
}

// Router returns the router, so that the binary can mount more routes
// (metrics, River UI) beside the api's.
func (s *Server) Router() chi.Router { return s.router }

// routes is the api's router: its own routes and those extra adds.
func (s *Server) routes(mcpHandler http.Handler, extra Routes) (chi.Router, error) {
	r := chi.NewRouter()
	r.Use(s.traced, requestID, s.accessLog, middleware.Recoverer, s.limitBody)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", s.readyz)
	if m, ok := s.auth.(ResourceMetadata); ok {
		r.Get(m.MetadataPath(), m.Metadata().ServeHTTP)
	}
	if extra != nil {
		var err error
		r.Group(func(r chi.Router) { err = extra(r, &RouteKit{s: s}) })
		if err != nil {
			return nil, fmt.Errorf("api: contributed routes: %w", err)
		}
	}
	r.Get(ApprovalPagePath+"{id}", approvalPage.ServeHTTP)
	r.Group(func(r chi.Router) {
		r.Use(s.checkOrigin, s.authenticate, s.readBody)
		r.Handle("/mcp", mcpHandler)
		r.Post("/v1/tools/{tool}", s.restTool)
		r.Get("/v1/operations", s.restListOperations)
		r.Get("/v1/operations/{tool}/{key}", s.restOperation)
		r.Get("/v1/approvals", s.restListApprovals)
		r.Get("/v1/approvals/{id}", s.restApproval)
		r.Post("/v1/approvals/{id}", s.restDecide)
	})
	return r, nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.dbTimeout)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			s.logger.WarnContext(r.Context(), "not ready", "error", err)
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// limitBody bounds every request body.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.maxBody {
			s.bodyTooLarge(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		next.ServeHTTP(w, r)
	})
}

// readBody reads, after authentication, a body sent without a
// Content-Length (chunked), so that one over the limit is refused here like
// one announcing its length: 413 problem+json, whichever handler (ours or
// the MCP SDK's) would have read it.
func (s *Server) readBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				s.bodyTooLarge(w, r)
				return
			}
			writeProblem(w, r, http.StatusBadRequest, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "body", "the request body could not be read")})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func (s *Server) bodyTooLarge(w http.ResponseWriter, r *http.Request) {
	writeProblem(w, r, http.StatusRequestEntityTooLarge, &callError{err: vocab.Errorf(vocab.CodeInvalidArgument, "body", "request body is larger than %d bytes", s.maxBody)})
}

type ctxKey int

const (
	requestIDKey ctxKey = iota
	clientRequestIDKey
)

// ActorFromContext returns the authenticated actor of a request.
func ActorFromContext(ctx context.Context) (vocab.Actor, bool) {
	return tenancy.ActorFromContext(ctx)
}

// RequestIDFromContext returns the request id of a request.
func RequestIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// requestID mints the request's id (our log lines, audit rows and the
// X-Request-Id answer name it) and keeps the caller's own X-Request-Id
// apart, when it is shaped like an id (vocab.ValidID): a caller must
// not choose the id that names our records.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := "req_" + hex.EncodeToString(b[:])
		ctx := context.WithValue(r.Context(), requestIDKey, id)
		if client := r.Header.Get("X-Request-Id"); vocab.ValidID(client) {
			ctx = context.WithValue(ctx, clientRequestIDKey, client)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ClientRequestIDFromContext returns the caller's validated X-Request-Id,
// or "".
func ClientRequestIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(clientRequestIDKey).(string)
	return id
}

// requestLog is filled in by later middleware for the access log line.
type requestLog struct {
	tenant, user string
}

const requestLogKey ctxKey = 100

// accessLog writes one structured line per request: never a token.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestLog{}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), requestLogKey, info)))
		s.logger.LogAttrs(r.Context(), slog.LevelInfo, "http request",
			slog.String("request_id", RequestIDFromContext(r.Context())),
			slog.String("client_request_id", ClientRequestIDFromContext(r.Context())),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", ww.Status()),
			slog.Duration("duration", time.Since(start)),
			slog.String("tenant", info.tenant),
			slog.String("user", info.user),
		)
	})
}

// authenticate refuses requests without valid credentials (401, no audit
// row: there is no tenant) and answers 503 when it cannot tell. An Auth
// that is a RequestAuthenticator reads the request itself; any other reads
// the bearer token. A Challenger writes the 401's WWW-Authenticate.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			actor vocab.Actor
			err   error
		)
		ctx, cancel := context.WithTimeout(r.Context(), s.dbTimeout)
		if ra, ok := s.auth.(RequestAuthenticator); ok {
			actor, err = ra.AuthenticateRequest(r.WithContext(ctx))
		} else if token, ok := tenancy.BearerFromHeader(r.Header.Get("Authorization")); ok {
			actor, err = s.auth.Authenticate(ctx, token)
		} else {
			err = errNoCredentials
		}
		cancel()
		if err != nil {
			s.refuse(w, r, err)
			return
		}
		setLogCaller(r.Context(), actor.TenantID, actor.UserID)
		next.ServeHTTP(w, r.WithContext(withCaller(r.Context(), actor)))
	})
}

// errNoCredentials is authenticate's error for a request without a bearer
// token.
var errNoCredentials = vocab.Errorf(vocab.CodeUnauthenticated, "Authorization", "a bearer token is required")

// refuse answers a request authenticate refused: 503 when the
// authenticator could not tell, else 401 with the challenge.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, vocab.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		cerr := unavailableFor(err)
		if _, oauth := s.auth.(ResourceMetadata); oauth && !tooManyClients(err) {
			cerr.err = vocab.Errorf(vocab.CodeUnavailable, "", "the authorization server's keys could not be fetched; retry")
		}
		s.logger.WarnContext(r.Context(), "credentials could not be checked", "request_id", RequestIDFromContext(r.Context()), "error", err)
		writeProblem(w, r, http.StatusServiceUnavailable, cerr)
		return
	}
	if ie := (*vocab.IdentityError)(nil); errors.As(err, &ie) {
		s.logger.WarnContext(r.Context(), "identity refused", "request_id", RequestIDFromContext(r.Context()),
			"field", ie.Field, "reason", ie.Reason)
	}
	challenge := `Bearer realm="idemgate"`
	if err != errNoCredentials {
		challenge += `, error="invalid_token"`
	}
	if c, ok := s.auth.(Challenger); ok {
		var tokenErr error
		if err != errNoCredentials {
			tokenErr = err
		}
		challenge = c.Challenge(tokenErr)
	}
	w.Header().Set("WWW-Authenticate", challenge)
	shown := vocab.Errorf(vocab.CodeUnauthenticated, "Authorization", "the bearer token is unknown, revoked or expired")
	var de *vocab.Error
	if _, custom := s.auth.(RequestAuthenticator); custom {
		shown = vocab.Errorf(vocab.CodeUnauthenticated, "", "the request's credentials were refused")
	}
	if errors.As(err, &de) && de.Code == vocab.CodeUnauthenticated {
		shown = de
	} else {
		s.logger.InfoContext(r.Context(), "credentials refused", "request_id", RequestIDFromContext(r.Context()), "error", err)
	}
	writeProblem(w, r, http.StatusUnauthorized, &callError{err: shown})
}

// RequestAuthenticator is an Auth that reads the whole request (its own
// headers, a session cookie, a signed request) rather than a bearer token.
// Its error is a 401 (a *domain.Error with code unauthenticated is shown as
// it is; any other is logged, not shown) or, wrapping
// vocab.ErrUnavailable, a 503.
type RequestAuthenticator interface {
	Authenticator
	AuthenticateRequest(r *http.Request) (vocab.Actor, error)
}

// Challenger is an Auth that writes its own WWW-Authenticate on a 401
// (OAuth's resource_metadata): err is why the credentials were refused,
// nil when there were none.
type Challenger interface {
	Challenge(err error) string
}

// ResourceMetadata is an Auth that publishes OAuth protected-resource
// metadata (RFC 9728): the api serves Metadata at MetadataPath, without
// authentication.
type ResourceMetadata interface {
	MetadataPath() string
	Metadata() http.Handler
}

// limiter is a token bucket per (tenant, tool).
type limiter struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	m     map[[2]string]*rate.Limiter
}

func newLimiter(perSecond float64, burst int) *limiter {
	if perSecond < 0 {
		return nil
	}
	return &limiter{limit: rate.Limit(perSecond), burst: burst, m: map[[2]string]*rate.Limiter{}}
}

// allow takes a token for (tenant, tool), or says how long to wait.
func (l *limiter) allow(tenant, tool string) (time.Duration, bool) {
	if l == nil {
		return 0, true
	}
	l.mu.Lock()
	lim, ok := l.m[[2]string{tenant, tool}]
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[[2]string{tenant, tool}] = lim
	}
	l.mu.Unlock()
	r := lim.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return max(d, time.Millisecond), false
	}
	return 0, true
}

// metrics are the api's Prometheus series.
type metrics struct {
	outcomes   *prometheus.CounterVec
	rateLimits *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	// mcpFast and mcpSDK count the POSTs to /mcp answered by the fast
	// path and by the MCP SDK.
	mcpFast, mcpSDK prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_gate_outcomes_total",
			Help: "Mutation calls by tool and outcome (accepted, replayed, conflict, in_flight, denied).",
		}, []string{"tool", "outcome"}),
		rateLimits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_rate_limited_total",
			Help: "Mutation calls refused by the per-tenant rate limit, by tool.",
		}, []string{"tool"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_call_duration_seconds",
			Help:    "Mutation call latency by tool and result (an outcome or an error code), waiting included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"tool", "result"}),
	}
	mcpRequests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgate_mcp_requests_total",
		Help: "POST requests to /mcp by the path that answered them: fast (a plain tools/call, answered without an SDK session) or sdk.",
	}, []string{"path"})
	m.mcpFast, m.mcpSDK = mcpRequests.WithLabelValues("fast"), mcpRequests.WithLabelValues("sdk")
	for _, c := range []prometheus.Collector{m.outcomes, m.rateLimits, m.latency, mcpRequests} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) outcome(tool string, o vocab.Outcome) {
	m.outcomes.WithLabelValues(tool, string(o)).Inc()
}
func (m *metrics) rateLimited(tool string) { m.rateLimits.WithLabelValues(tool).Inc() }

func (m *metrics) observe(tool, result string, d time.Duration) {
	m.latency.WithLabelValues(tool, result).Observe(d.Seconds())
}
