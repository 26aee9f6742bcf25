package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
	"github.com/idemgate/idemgate/internal/pgtest"
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

// service runs the team's service (NewService: its router, middleware,
// go-sdk server and keys) on a listener of its own, with the worker
// (Service.Run) beside it, on a fresh database of engine.
func service(t *testing.T, engine string) (base string, keys *Keys, api *WorkspaceAPI) {
	t.Helper()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "licenses.db")
	if engine == gate.Postgres {
		u, _ := pgtest.NewDB(t)
		dbURL = u + "&pool_max_conns=6"
		if !strings.Contains(u, "?") {
			dbURL = u + "?pool_max_conns=6"
		}
	}
	cfg, err := idemgate.LoadConfig([]string{"--database-url=" + dbURL, "--log-level=warn", "--wait=10s"})
	require.NoError(t, err)
	keys, err = NewKeys(testSigningKey)
	require.NoError(t, err)
	api = NewWorkspaceAPI()
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	svc, handler, err := NewService(ctx, cfg, keys, &WorkspaceClient{BaseURL: apiSrv.URL})
	require.NoError(t, err)
	require.NoError(t, svc.Migrate(ctx))
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
		svc.Close()
	})
	return srv.URL, keys, api
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
			base, keys, api := service(t, engine)
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
			require.Equal(t, []any{"team", "enterprise"}, structured(t, res)["plans"])

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
