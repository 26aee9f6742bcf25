// Command licenses is a team's own service with idemgate inside it: the
// team's chi router, middleware and go-sdk MCP server, its own API keys,
// one ungated read tool of its own (list_plans) and three idemgate tools:
// grant_license (in-transaction), provision_workspace (an external call to
// the team's provisioning API, with op.DownstreamKey as its
// Idempotency-Key) and get_license (a read on idemgate's database handle).
//
//	go run ./examples/licenses token acme alice licenses:grant licenses:read workspaces:provision
//	go run ./examples/licenses                 # serve: SQLite file idemgate.db
//	DATABASE_URL=postgres://… go run ./examples/licenses
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
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/gate"
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
	switch args := cfg.Args(); {
	case len(args) >= 3 && args[0] == "token":
		fmt.Println(keys.Mint(args[1], args[2], 24*time.Hour, args[3:]...))
		return nil
	case len(args) == 0 || len(args) == 1 && args[0] == "serve":
	default:
		return fmt.Errorf("unknown command %q (serve, or token TENANT USER SCOPE…)", strings.Join(args, " "))
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
	svc, handler, err := NewService(ctx, cfg, keys, &WorkspaceClient{BaseURL: workspaces})
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
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
	slog.Info("licenses listening", "mcp", "http://"+ln.Addr().String()+"/mcp")
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-work
}

// NewService opens idemgate with the team's tools and keys and returns it
// with the team's router: its middleware, its go-sdk MCP server at /mcp
// (list_plans beside idemgate's tools), its /whoami, and idemgate's other
// routes. Run svc.Run beside the router.
func NewService(ctx context.Context, cfg *idemgate.Config, keys *Keys, workspaces *WorkspaceClient) (*idemgate.Service, http.Handler, error) {
	reg := gate.NewRegistry()
	if err := reg.Add(GrantLicense, GetLicense, ProvisionWorkspace(workspaces)); err != nil {
		return nil, nil, err
	}
	svc, err := idemgate.Open(ctx, cfg, reg, &idemgate.Options{Migrations: Migrations, Authenticate: keys.Authenticate})
	if err != nil {
		return nil, nil, err
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "licenses", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "list_plans", Description: "The plans a license may be granted for."}, listPlans)
	mcpHandler, err := svc.AddTo(server)
	if err != nil {
		svc.Close()
		return nil, nil, err
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
	r.Mount("/", svc)
	return svc, r, nil
}

// poweredBy is the team's own middleware, run before idemgate's.
func poweredBy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Powered-By", "licenses")
		next.ServeHTTP(w, r)
	})
}

// Plans is list_plans's answer.
type Plans struct {
	Plans []string `json:"plans"`
}

// listPlans is the team's own MCP tool, not gated: it changes nothing.
func listPlans(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, Plans, error) {
	return nil, Plans{Plans: []string{"team", "enterprise"}}, nil
}
