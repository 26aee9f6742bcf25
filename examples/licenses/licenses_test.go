package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
	"github.com/idemgate/idemgate/migrations"
)

const testSigningKey = "licenses-test-signing-key-0123456789abcdef"

// cases are the guarantees gatetest.Check proves for the team's two
// mutations, counting effects where they land: the licenses table, and
// the provisioning API's workspaces (and the team's copy of them).
func cases(api *WorkspaceAPI) []*gatetest.Case {
	return []*gatetest.Case{{
		Tool:        "grant_license",
		Args:        map[string]any{"customer_id": "cus_1", "plan": "team", "seats": 5},
		Differ:      map[string]any{"customer_id": "cus_1", "plan": "team", "seats": 6},
		DifferField: "seats",
		Effects: func(t testing.TB, h *gatetest.Harness, op *domain.Operation) int {
			return h.Count(t, `SELECT count(*) FROM licenses WHERE operation_id = $1`, op.OperationID)
		},
	}, {
		Tool:        "provision_workspace",
		Args:        map[string]any{"name": "acme-prod"},
		Differ:      map[string]any{"name": "acme-staging"},
		DifferField: "name",
		Effects: func(t testing.TB, h *gatetest.Harness, op *domain.Operation) int {
			copies := h.Count(t, `SELECT count(*) FROM workspaces WHERE operation_id = $1`, op.OperationID)
			made := api.Made(op.OperationID)
			if copies > made {
				t.Errorf("%d copies of %d workspaces made for %s", copies, made, op.OperationID)
			}
			return made
		},
	}}
}

func registry(api *WorkspaceAPI) (*gate.Registry, func()) {
	srv := httptest.NewServer(api)
	reg := gate.NewRegistry().MustAdd(GrantLicense, GetLicense, ProvisionWorkspace(&WorkspaceClient{BaseURL: srv.URL}))
	return reg, srv.Close
}

func TestToolsOnPostgres(t *testing.T) {
	t.Parallel()
	api := NewWorkspaceAPI()
	reg, stop := registry(api)
	t.Cleanup(stop)
	h := gatetest.Postgres(t, reg, &gatetest.Options{Migrations: Migrations})
	for _, c := range cases(api) {
		t.Run(c.Tool, func(t *testing.T) { gatetest.Check(t, h, c) })
	}
	t.Run("ReadBack", func(t *testing.T) { readBack(t, h) })
}

func TestToolsOnSQLite(t *testing.T) {
	t.Parallel()
	api := NewWorkspaceAPI()
	reg, stop := registry(api)
	t.Cleanup(stop)
	h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: Migrations})
	for _, c := range cases(api) {
		t.Run(c.Tool, func(t *testing.T) { gatetest.Check(t, h, c) })
	}
	t.Run("ReadBack", func(t *testing.T) { readBack(t, h) })
}

// readBack grants a license through the harness and reads it with
// get_license, over the REST twin (Harness.Read) and over MCP
// (Harness.MCP); another license id is not found.
func readBack(t *testing.T, h *gatetest.Harness) {
	h.Call(t, "grant_license", "read-back-0001", map[string]any{"customer_id": "cus_7", "plan": "team", "seats": 3})
	op := h.Await(t, "grant_license", "read-back-0001")
	require.Equal(t, domain.StatusSucceeded, op.Status)
	var granted License
	require.NoError(t, json.Unmarshal(op.Result, &granted))
	var got License
	require.NoError(t, h.Read(t, "get_license", map[string]any{"license_id": granted.LicenseID}, &got))
	require.Equal(t, granted, got)
	var e *domain.Error
	require.ErrorAs(t, h.Read(t, "get_license", map[string]any{"license_id": "lic_nope"}, &got), &e)
	require.Equal(t, domain.CodeNotFound, e.Code)
	res, err := h.MCP(t).CallTool(t.Context(), &mcp.CallToolParams{Name: "get_license", Arguments: map[string]any{"license_id": granted.LicenseID}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Equal(t, float64(3), structured(t, res)["seats"])
}

// testMaxConns bounds the team's pool in the tests: idemgate, the team's
// River client (its LISTEN included) and the migrations share it.
const testMaxConns = 4

// adminURL is the test server's admin database, found as gatetest finds
// it: TEST_DATABASE_URL, or the local server.
func adminURL() string {
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// testDB is an empty Postgres database of the test's own.
type testDB struct {
	Name string
	// URL names the database, with pool_max_conns=testMaxConns.
	URL string
	// Admin is a connection to the admin database, for pg_stat_activity.
	Admin *pgx.Conn
}

// newDatabase creates an empty database (no migrations), dropped when t
// ends. Its name starts with idemgate_t_ and the creation time, as the
// repository's tests name theirs, so that leftovers of a killed run are
// found.
func newDatabase(t *testing.T) *testDB {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, adminURL())
	require.NoError(t, err)
	var random [8]byte
	_, _ = rand.Read(random[:])
	name := fmt.Sprintf("idemgate_t_%d_%s", time.Now().Unix(), hex.EncodeToString(random[:]))
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
		_ = admin.Close(context.Background())
	})
	u, err := url.Parse(adminURL())
	require.NoError(t, err)
	u.Path = "/" + name
	q := u.Query()
	q.Set("pool_max_conns", fmt.Sprint(testMaxConns))
	u.RawQuery = q.Encode()
	return &testDB{Name: name, URL: u.String(), Admin: admin}
}

// running is the team's service running on a listener of its own.
type running struct {
	Base  string
	Keys  *Keys
	API   *WorkspaceAPI
	Svc   *Service
	Stack *Stack
	// DB is the Postgres database (nil on SQLite).
	DB *testDB
}

// service runs the team's service as main does (OpenStack, the team's
// Migrate, NewService, Run beside the router) on a fresh database of
// engine.
func service(t *testing.T, engine string) *running {
	t.Helper()
	rn := &running{}
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "licenses.db")
	if engine == gate.Postgres {
		rn.DB = newDatabase(t)
		dbURL = rn.DB.URL
	}
	ctx, cancel := context.WithCancel(context.Background())
	stack, err := OpenStack(ctx, dbURL)
	require.NoError(t, err)
	rn.Stack = stack
	t.Cleanup(stack.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, stack.Migrate(ctx, logger))
	// The configuration in code: the team's handle names the database.
	cfg := idemgate.DefaultConfig()
	cfg.Wait = 10 * time.Second
	rn.Keys, err = NewKeys(testSigningKey)
	require.NoError(t, err)
	rn.API = NewWorkspaceAPI()
	apiSrv := httptest.NewServer(rn.API)
	t.Cleanup(apiSrv.Close)
	rn.Svc, err = NewService(ctx, cfg, stack, rn.Keys, &WorkspaceClient{BaseURL: apiSrv.URL}, logger)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- rn.Svc.Run(ctx) }()
	srv := httptest.NewServer(rn.Svc.Handler)
	rn.Base = srv.URL
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
		rn.Svc.Close()
	})
	return rn
}

// bearer adds a key to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

func connect(t *testing.T, base, key string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "licenses-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key: key, next: http.DefaultTransport}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// structured is a tool result's structured content.
func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func TestServiceInOwnRouter(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.SQLite, gate.Postgres} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			rn := service(t, engine)
			base, keys, api := rn.Base, rn.Keys, rn.API
			key := keys.Mint("acme", "alice", time.Hour, "licenses:grant", "licenses:read", "workspaces:provision")
			cs := connect(t, base, key)
			ctx := context.Background()

			// One server: the team's tool beside idemgate's.
			list, err := cs.ListTools(ctx, nil)
			require.NoError(t, err)
			var names []string
			for _, tl := range list.Tools {
				names = append(names, tl.Name)
			}
			require.ElementsMatch(t, []string{"list_plans", "grant_license", "get_license", "provision_workspace", "get_operation", "list_operations"}, names)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_plans", Arguments: map[string]any{}})
			require.NoError(t, err)
			require.False(t, res.IsError)
			// The team's tool reads the caller idemgate authenticated.
			require.Equal(t, map[string]any{"plans": []any{"team", "enterprise"}, "tenant": "acme", "user": "alice"}, structured(t, res))

			// A gated mutation, retried: one license, the retry replayed.
			grant := map[string]any{"idempotency_key": "grant-0001", "customer_id": "cus_9", "plan": "enterprise", "seats": 40}
			first, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "grant_license", Arguments: grant})
			require.NoError(t, err)
			require.False(t, first.IsError, "%s", first.Content[0].(*mcp.TextContent).Text)
			again, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "grant_license", Arguments: grant})
			require.NoError(t, err)
			op := structured(t, first)["operation"].(map[string]any)
			require.Equal(t, "succeeded", op["status"], "%v", structured(t, first))
			require.Equal(t, "replayed", structured(t, again)["outcome"])
			licenseID := op["result"].(map[string]any)["license_id"].(string)

			// The read goes through idemgate's read-only handle.
			got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_license", Arguments: map[string]any{"license_id": licenseID}})
			require.NoError(t, err)
			require.False(t, got.IsError, "%s", got.Content[0].(*mcp.TextContent).Text)
			require.Equal(t, map[string]any{"license_id": licenseID, "customer_id": "cus_9", "plan": "enterprise", "seats": float64(40)}, structured(t, got))
			other := connect(t, base, keys.Mint("globex", "bob", time.Hour, "licenses:read"))
			miss, err := other.CallTool(ctx, &mcp.CallToolParams{Name: "get_license", Arguments: map[string]any{"license_id": licenseID}})
			require.NoError(t, err)
			require.True(t, miss.IsError, "another tenant's license is not found")

			// The external effect, retried: one workspace in the API.
			prov := map[string]any{"idempotency_key": "workspace-0001", "name": "acme-prod"}
			for range 3 {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "provision_workspace", Arguments: prov})
				require.NoError(t, err)
				require.False(t, res.IsError, "%s", res.Content[0].(*mcp.TextContent).Text)
			}
			require.Equal(t, 1, api.Created())

			// A scope the key lacks is refused by the gate.
			noScope := connect(t, base, keys.Mint("acme", "carol", time.Hour, "licenses:read"))
			res, err = noScope.CallTool(ctx, &mcp.CallToolParams{Name: "grant_license", Arguments: map[string]any{"idempotency_key": "grant-0002", "customer_id": "cus_9", "plan": "team", "seats": 1}})
			require.NoError(t, err)
			require.True(t, res.IsError)
			require.Equal(t, "forbidden", structured(t, res)["error"].(map[string]any)["code"])

			// The team's keys guard every route, with the team's message;
			// the team's middleware runs in front of idemgate's.
			for _, path := range []string{"/mcp", "/v1/tools/grant_license", "/v1/operations/grant_license/grant-0001"} {
				method := http.MethodPost
				if strings.HasPrefix(path, "/v1/operations") {
					method = http.MethodGet
				}
				for name, auth := range map[string]string{
					"none":    "",
					"forged":  "Bearer lic_e30.AAAA",
					"expired": "Bearer " + expiredKey(keys),
				} {
					req, _ := http.NewRequest(method, base+path, strings.NewReader(`{}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Accept", "application/json, text/event-stream")
					if auth != "" {
						req.Header.Set("Authorization", auth)
					}
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s: %s", path, name, body)
					require.Equal(t, "licenses", resp.Header.Get("X-Powered-By"))
					require.Contains(t, string(body), "unauthenticated")
				}
			}
			// The REST twin and the operation under the team's router.
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/operations/grant_license/grant-0001", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.Contains(t, string(body), `"status":"succeeded"`)
			who, err := http.Get(base + "/whoami?" + url.Values{}.Encode())
			require.NoError(t, err)
			who.Body.Close()
			require.Equal(t, http.StatusUnauthorized, who.StatusCode)
		})
	}
}

// expiredKey is a key whose expiry has passed.
func expiredKey(k *Keys) string {
	past := &Keys{secret: k.secret, now: func() time.Time { return time.Now().Add(-2 * time.Hour) }}
	return past.Mint("acme", "alice", time.Hour, "licenses:grant")
}

// The team's stack on Postgres: one pool and one River client. The
// service makes grants (each sent twice, at once) while no worker of
// idemgate's own runs: the team's River client works them, and its own
// usage_report. Every connection to the database is the team's pool's
// (application_name "licenses"), within its MaxConns and the one River's
// listener takes out of it; each grant made one license.
func TestOnePoolOneRiverClient(t *testing.T) {
	t.Parallel()
	rn := service(t, gate.Postgres)
	ctx := context.Background()
	cs := connect(t, rn.Base, rn.Keys.Mint("acme", "alice", time.Hour, "licenses:grant", "licenses:read"))
	const grants = 8
	var wg sync.WaitGroup
	errs := make([]error, 2*grants)
	for i := range 2 * grants {
		wg.Go(func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "grant_license", Arguments: map[string]any{
				"idempotency_key": fmt.Sprintf("pool-grant-%04d", i%grants), "customer_id": fmt.Sprintf("cus_%d", i%grants), "plan": "team", "seats": 2}})
			if err == nil && res.IsError {
				err = fmt.Errorf("%s", res.Content[0].(*mcp.TextContent).Text)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "call %d", i)
	}

	count := func(query string) int {
		var n int
		require.NoError(t, rn.Stack.Pool.QueryRow(ctx, query).Scan(&n))
		return n
	}
	grantJobs := func() int {
		return count(`SELECT count(*) FROM river_job WHERE kind = 'idemgate.grant_license' AND queue = 'idemgate' AND state = 'completed'`)
	}
	reports := func() int {
		return count(`SELECT count(*) FROM river_job WHERE kind = 'usage_report' AND queue = 'default' AND state = 'completed'`)
	}
	deadline := time.Now().Add(2 * time.Minute) // a bound for a stuck test, not a speed requirement
	for time.Now().Before(deadline) && (count(`SELECT count(*) FROM licenses`) < grants || grantJobs() < grants ||
		reports() < 1 || rn.Svc.Usage.Runs.Load() < 1) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, grants, count(`SELECT count(*) FROM licenses`), "one license per grant")
	require.Equal(t, grants, count(`SELECT count(DISTINCT operation_id) FROM licenses`))
	require.Equal(t, grants, grantJobs(), "the team's client worked idemgate's jobs")
	require.GreaterOrEqual(t, reports(), 1, "the team's client worked its own periodic job")
	require.GreaterOrEqual(t, rn.Svc.Usage.Runs.Load(), int64(1))
	require.Zero(t, count(`SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'scheduled', 'available', 'running')`),
		"no job failed or was discarded")

	// Every connection to the database is the team's pool's.
	rows, err := rn.DB.Admin.Query(ctx, `SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity
		WHERE datname = $1 GROUP BY 1 ORDER BY 1`, rn.DB.Name)
	require.NoError(t, err)
	byApp := map[string]int{}
	total := 0
	for rows.Next() {
		var app string
		var n int
		require.NoError(t, rows.Scan(&app, &n))
		byApp[app] = n
		total += n
	}
	require.NoError(t, rows.Err())
	t.Logf("connections to the database by application_name: %v; the team's pool: %d of at most %d",
		byApp, rn.Stack.Pool.Stat().TotalConns(), rn.Stack.Pool.Config().MaxConns)
	require.Equal(t, map[string]int{AppName: total}, byApp, "a connection that is not the team's pool's")
	// River's LISTEN connection is taken out of the pool (pgxpool's
	// Hijack), which may then open one more.
	require.LessOrEqual(t, total, int(rn.Stack.Pool.Config().MaxConns)+1)
	require.EqualValues(t, testMaxConns, rn.Stack.Pool.Config().MaxConns)
}

// versions are the applied versions in a goose version table.
func versions(t *testing.T, stack *Stack, table string) []int64 {
	t.Helper()
	query := "SELECT version_id FROM " + table + " WHERE version_id > 0 AND is_applied ORDER BY version_id"
	var out []int64
	if stack.Pool != nil {
		rows, err := stack.Pool.Query(context.Background(), query)
		require.NoError(t, err)
		out, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return out
	}
	rows, err := stack.DB.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// fileVersions are the goose versions of the SQL files in fsys.
func fileVersions(t *testing.T, fsys fs.FS) []int64 {
	t.Helper()
	names, err := fs.Glob(fsys, "*.sql")
	require.NoError(t, err)
	var out []int64
	for _, name := range names {
		v, err := strconv.ParseInt(strings.SplitN(name, "_", 2)[0], 10, 64)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// hasTable reports whether the database has table.
func hasTable(t *testing.T, stack *Stack, table string) bool {
	t.Helper()
	var ok bool
	if stack.Pool != nil {
		require.NoError(t, stack.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok))
		return ok
	}
	require.NoError(t, stack.DB.QueryRow("SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&ok))
	return ok
}

// openStack opens a fresh database of engine with the team's stack.
func openStack(t *testing.T, engine string) *Stack {
	t.Helper()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "licenses.db")
	if engine == gate.Postgres {
		dbURL = newDatabase(t).URL
	}
	stack, err := OpenStack(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(stack.Close)
	return stack
}

// The team's goose: goose's default table holds the team's versions
// alone, idemgate's table idemgate's, River is at migrations.RiverVersion;
// a second run applies nothing, and idemgate's own Migrate then finds
// nothing to do either (both ways record idemgate's lines alike).
func TestTeamMigrations(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.SQLite, gate.Postgres} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stack := openStack(t, engine)
			require.NoError(t, stack.Migrate(ctx, nil))
			require.NoError(t, stack.Migrate(ctx, nil), "a second run")
			team := fileVersions(t, Migrations(engine))
			core := fileVersions(t, migrations.Core(migrations.Engine(engine)))
			require.Equal(t, team, versions(t, stack, "goose_db_version"))
			require.Equal(t, core, versions(t, stack, migrations.Table))
			var river int
			if stack.Pool != nil {
				require.NoError(t, stack.Pool.QueryRow(ctx, "SELECT max(version) FROM river_migration").Scan(&river))
			} else {
				require.NoError(t, stack.DB.QueryRow("SELECT max(version) FROM river_migration").Scan(&river))
			}
			require.Equal(t, migrations.RiverVersion, river)

			svc, err := idemgate.Open(ctx, idemgate.DefaultConfig(), gate.NewRegistry().MustAdd(GrantLicense),
				&idemgate.Options{Pool: stack.Pool, DB: stack.DB, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			defer svc.Close()
			require.NoError(t, svc.Migrate(ctx))
			require.Equal(t, team, versions(t, stack, "goose_db_version"))
			require.Equal(t, core, versions(t, stack, migrations.Table))
			require.False(t, hasTable(t, stack, "app_goose_db_version"))
			rec := httptest.NewRecorder()
			svc.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			require.Equal(t, http.StatusOK, rec.Code, "%s", rec.Body)
		})
	}
}

// The other way: idemgate applies everything (Options.Migrations and
// svc.Migrate), the team's versions in idemgate's table for a team's own,
// and goose's default table is never made.
func TestIdemgateMigrates(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{gate.SQLite, gate.Postgres} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stack := openStack(t, engine)
			svc, err := idemgate.Open(ctx, idemgate.DefaultConfig(), gate.NewRegistry().MustAdd(GrantLicense),
				&idemgate.Options{Pool: stack.Pool, DB: stack.DB, Migrations: Migrations, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			defer svc.Close()
			require.NoError(t, svc.Migrate(ctx))
			require.Equal(t, fileVersions(t, Migrations(engine)), versions(t, stack, "app_goose_db_version"))
			require.Equal(t, fileVersions(t, migrations.Core(migrations.Engine(engine))), versions(t, stack, migrations.Table))
			require.False(t, hasTable(t, stack, "goose_db_version"))
			require.True(t, hasTable(t, stack, "licenses"))
		})
	}
}
