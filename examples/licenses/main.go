// Command licenses is a team's own service with idemgate inside its stack:
// the team's chi router, middleware and go-sdk MCP server, its own API
// keys, one ungated read tool of its own (list_plans, which reads the
// caller with domain.CallerFromContext) and three idemgate tools:
// grant_license (in-transaction, with the team's sqlc-shaped pgx queries on
// the gate's own transaction), provision_workspace (an external call to
// the team's provisioning API, with op.DownstreamKey as its
// Idempotency-Key) and get_license (a read on idemgate's read-only
// transaction).
//
//	go run ./examples/licenses token acme alice licenses:grant licenses:read workspaces:provision
//	go run ./examples/licenses migrate         # apply the migrations and exit
//	go run ./examples/licenses                 # migrate and serve: SQLite file idemgate.db
//	DATABASE_URL=postgres://… go run ./examples/licenses
//
// # The team's stack
//
// On Postgres the team opens one pgx pool (application_name "licenses";
// DATABASE_URL's pool_max_conns bounds it, default 10) and hands it to
// idemgate (idemgate.Options.Pool): the gate, its reads and River's job
// inserts run on it, and no other pool is opened. The team runs one River
// client (riverpgxv5) on the same pool, with a job of its own (usage_report,
// every minute) and idemgate's jobs added by jobs.Configure(riverCfg, svc):
// that client works both, so the program never runs idemgate's own worker
// (Service.Run). On SQLite (the default) the team opens the file itself
// (idemgate.Options.DB: one connection, BEGIN IMMEDIATE, a busy timeout) and
// runs Service.Run, idemgate's worker in process: SQLite's River is
// idemgate's alone, so there is no team client and no usage_report there.
//
// # Migrations, two ways
//
// The program applies every migration with the team's own tools
// (Stack.Migrate, at start and by the migrate command): River's with
// rivermigrate up to migrations.RiverVersion, idemgate's SQL from
// migrations.Core with goose in idemgate's version table
// (goose.WithTableName(migrations.Table)), then the team's own
// (migrations/{postgres,sqlite}) in goose's default table, goose_db_version.
// The other way is to let idemgate apply them: pass
// idemgate.Options{Migrations: Migrations} and call svc.Migrate(ctx), which
// applies River's, idemgate's and then the team's, these in idemgate's
// table for a team's own (app_goose_db_version). Use one way per database:
// the two record the team's versions in different tables, so the second
// would apply them again. idemgate's own lines are the same either way.
//
// LICENSES_SIGNING_KEY (at least 32 bytes) signs the keys; LICENSES_ADDR
// (default 127.0.0.1:8090) is where it listens: MCP at /mcp, idemgate's
// REST twin, operations and operator routes at their own paths, the
// team's /whoami. WORKSPACES_API_URL is the provisioning API; unset, a
// stand-in is served in process at /provisioning.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/jobs"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "licenses:", err)
		os.Exit(1)
	}
}

func run(argv []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := idemgate.LoadConfig(argv)
	if errors.Is(err, idemgate.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	keys, err := NewKeys(os.Getenv("LICENSES_SIGNING_KEY"))
	if err != nil {
		return err
	}
	migrateOnly := false
	switch args := cfg.Args(); {
	case len(args) >= 3 && args[0] == "token":
		fmt.Println(keys.Mint(args[1], args[2], 24*time.Hour, args[3:]...))
		return nil
	case len(args) == 1 && args[0] == "migrate":
		migrateOnly = true
	case len(args) == 0 || len(args) == 1 && args[0] == "serve":
	default:
		return fmt.Errorf("unknown command %q (serve, migrate, or token TENANT USER SCOPE…)", strings.Join(args, " "))
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	stack, err := OpenStack(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer stack.Close()
	if err := stack.Migrate(ctx, logger); err != nil || migrateOnly {
		return err
	}
	addr := os.Getenv("LICENSES_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8090"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("LICENSES_ADDR: %w", err)
	}
	workspaces := os.Getenv("WORKSPACES_API_URL")
	if workspaces == "" {
		workspaces = "http://" + ln.Addr().String() + "/provisioning"
	}
	svc, err := NewService(ctx, cfg, stack, keys, &WorkspaceClient{BaseURL: workspaces}, logger)
	if err != nil {
		return err
	}
	defer svc.Close()
	handler := svc.Handler
	if os.Getenv("WORKSPACES_API_URL") == "" {
		r := chi.NewRouter()
		r.Mount("/provisioning", http.StripPrefix("/provisioning", NewWorkspaceAPI()))
		r.Mount("/", handler)
		handler = r
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	work := make(chan error, 1)
	go func() { work <- svc.Run(ctx) }()
	logger.Info("licenses listening", "mcp", "http://"+ln.Addr().String()+"/mcp", "engine", stack.Engine)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-work
}

// Service is the team's service: idemgate on the team's database handle,
// the team's router, and on Postgres the team's River client.
type Service struct {
	// Idemgate is idemgate inside the service.
	Idemgate *idemgate.Service
	// Handler is the team's router: its middleware, its go-sdk MCP server
	// at /mcp (list_plans beside idemgate's tools), its /whoami, and
	// idemgate's other routes.
	Handler http.Handler
	// River is the team's River client on the team's pool, working the
	// team's jobs and idemgate's (Postgres; nil on SQLite).
	River *river.Client[pgx.Tx]
	// Usage works the team's usage_report job (Postgres).
	Usage *UsageReportWorker
}

// riverStopTimeout is how long running jobs may finish when the team's
// River client stops.
const riverStopTimeout = 30 * time.Second

// NewService opens idemgate on the team's handle (stack, migrated) with
// the team's tools and keys, builds the team's router and, on Postgres,
// the team's River client with idemgate's jobs inside it. Run the
// background work (Run) beside the router.
func NewService(ctx context.Context, cfg *idemgate.Config, stack *Stack, keys *Keys, workspaces *WorkspaceClient, logger *slog.Logger) (*Service, error) {
	reg := gate.NewRegistry()
	if err := reg.Add(GrantLicense, GetLicense, ProvisionWorkspace(workspaces)); err != nil {
		return nil, err
	}
	// No Options.Migrations: the team's goose applies its own tables
	// (Stack.Migrate).
	opts := &idemgate.Options{Pool: stack.Pool, DB: stack.DB, Authenticate: keys.Authenticate, Logger: logger}
	ig, err := idemgate.Open(ctx, cfg, reg, opts)
	if err != nil {
		return nil, err
	}
	s := &Service{Idemgate: ig}
	if stack.Engine == gate.Postgres {
		if err := s.newRiver(stack, logger); err != nil {
			ig.Close()
			return nil, err
		}
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "licenses", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "list_plans", Description: "The plans a license may be granted for, and who asks."}, listPlans)
	mcpHandler, err := ig.AddTo(server)
	if err != nil {
		ig.Close()
		return nil, err
	}
	r := chi.NewRouter()
	r.Use(middleware.RealIP, poweredBy)
	r.Handle("/mcp", mcpHandler)
	r.Get("/whoami", func(w http.ResponseWriter, r *http.Request) {
		c, err := keys.Authenticate(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "%s/%s\n", c.TenantID, c.UserID)
	})
	r.Mount("/", ig)
	s.Handler = r
	return s, nil
}

// newRiver builds the team's River client on the team's pool: its own
// queue (River's default) and usage_report, and idemgate's queues,
// workers and periodic jobs (jobs.Configure).
func (s *Service) newRiver(stack *Stack, logger *slog.Logger) error {
	s.Usage = &UsageReportWorker{Queries: New(stack.Pool), Logger: logger}
	workers := river.NewWorkers()
	river.AddWorker(workers, s.Usage)
	riverCfg := &river.Config{
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}},
		Workers:      workers,
		PeriodicJobs: []*river.PeriodicJob{usageReportJob()},
		Logger:       logger,
	}
	if err := jobs.Configure(riverCfg, s.Idemgate); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(stack.Pool), riverCfg)
	if err != nil {
		return err
	}
	s.River = client
	return nil
}

// Run runs the background work until ctx ends: on Postgres the team's
// River client (the team's jobs and idemgate's tools' jobs, reaper and
// pruner); on SQLite idemgate's worker (Service.Run).
func (s *Service) Run(ctx context.Context) error {
	if s.River == nil {
		return s.Idemgate.Run(ctx)
	}
	if err := s.River.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), riverStopTimeout)
	defer cancel()
	return s.River.Stop(stopCtx)
}

// Close closes idemgate; the team's handle stays open (Stack.Close).
func (s *Service) Close() { s.Idemgate.Close() }

// poweredBy is the team's own middleware, run before idemgate's.
func poweredBy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Powered-By", "licenses")
		next.ServeHTTP(w, r)
	})
}

// Plans is list_plans's answer: the plans, and the caller's tenant and
// user as idemgate authenticated them.
type Plans struct {
	Plans  []string `json:"plans"`
	Tenant string   `json:"tenant"`
	User   string   `json:"user"`
}

// listPlans is the team's own MCP tool, not gated: it changes nothing. It
// reads the caller idemgate's authentication put in the request's context.
func listPlans(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, Plans, error) {
	c, ok := domain.CallerFromContext(ctx)
	if !ok {
		return nil, Plans{}, errors.New("no caller: list_plans is served only behind idemgate's authentication")
	}
	return nil, Plans{Plans: []string{"team", "enterprise"}, Tenant: c.TenantID, User: c.UserID}, nil
}
