package api_test

// The transport rules (api/transport.go) on every path: the fast path, the
// task layer and the SDK, and the REST twin.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/vocab"
)

// A foreign Origin is refused with 403 before anything runs, on the fast
// path's request, a task call, the SDK's methods and the REST routes; the
// server's own origin and a request without Origin are served.
func TestForeignOriginIsRefusedOnEveryPath(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	credit := `{"customer_id":"cus_1","amount_cents":250,"currency":"usd","idempotency_key":"origin-key-0001"}`
	bodies := map[string]string{
		"fast":    call("1", "apply_credit", credit, false),
		"task":    `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"apply_credit","arguments":` + credit + `,"task":{}}}`,
		"sdk":     `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
		"init":    `{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		"unknown": `{"jsonrpc":"2.0","id":5,"method":"no/such/method"}`,
	}
	before := p.rows(t)
	for _, srv := range []*httptest.Server{p.fast, p.sdk} {
		for name, body := range bodies {
			for _, origin := range []string{"http://evil.example.com", "null", srv.URL + ".evil.example.com", "http://localhost:1"} {
				a := p.send(t, srv, mcpRequest{header: with(legacy, "Origin", origin), body: body})
				require.Equal(t, http.StatusForbidden, a.status, "%s %s", name, a)
				require.Equal(t, "application/json", a.header.Get("Content-Type"), "%s", a)
				code, msg := rpcErrorOf(t, a)
				require.EqualValues(t, -32000, code, "%s", a)
				require.Contains(t, msg, "Origin", "%s", a)
				require.Contains(t, a.body, `"id":null`, "%s", a)
			}
		}
		// REST: problem+json naming the header.
		for _, req := range []*http.Request{
			mustRequest(t, http.MethodPost, srv.URL+"/v1/tools/apply_credit", credit),
			mustRequest(t, http.MethodGet, srv.URL+"/v1/operations", ""),
			mustRequest(t, http.MethodGet, srv.URL+"/v1/operations/apply_credit/origin-key-0001", ""),
		} {
			req.Header.Set("Origin", "https://evil.example.com")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", b)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			require.Contains(t, string(b), `"field":"Origin"`)
		}
	}
	require.Equal(t, before, p.rows(t), "a refused Origin writes nothing")

	// The server's own origin, and no Origin at all, are served.
	for _, srv := range []*httptest.Server{p.fast, p.sdk} {
		for _, origin := range []string{srv.URL, ""} {
			a := p.send(t, srv, mcpRequest{header: with(legacy, "Origin", origin), body: bodies["sdk"]})
			require.Equal(t, http.StatusOK, a.status, "%s", a)
			require.Contains(t, a.body, `"tools":[`)
		}
	}
}

func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+fuzzTokenAll)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// Every JSON-RPC request is answered in JSON-RPC with application/json, on
// the legacy revisions (status 200, which the TypeScript SDK reads as an
// McpError) and on 2026-07-28 (the SDK's statuses); notifications and
// bodies that are not JSON-RPC keep their HTTP answers.
func TestJSONRPCRequestsGetJSONRPCErrors(t *testing.T) {
	t.Parallel()
	p := mcpPairSetup(t)
	sessionless := func(method string) map[string]string {
		return map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, c := range []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   int64
		id     string
	}{
		{"UnknownMethod", legacy, `{"jsonrpc":"2.0","id":1,"method":"no/such/method"}`, 200, -32601, `1`},
		{"UnknownMethodNoHeader", nil, `{"jsonrpc":"2.0","id":"a","method":"no/such/method","params":{}}`, 200, -32601, `"a"`},
		{"InitializeWithoutParams", nil, `{"jsonrpc":"2.0","id":2,"method":"initialize"}`, 200, -32602, `2`},
		{"ToolsCallWithoutParams", legacy, `{"jsonrpc":"2.0","id":3,"method":"tools/call"}`, 200, -32602, `3`},
		{"NotificationWithID", legacy, `{"jsonrpc":"2.0","id":4,"method":"notifications/initialized"}`, 200, -32600, `4`},
		{"UnknownMethodSessionless", sessionless("no/such"), `{"jsonrpc":"2.0","id":5,"method":"no/such","params":{` + meta + `}}`, 404, -32601, `5`},
		{"ToolsCallWithoutParamsSessionless", sessionless("tools/call"), `{"jsonrpc":"2.0","id":6,"method":"tools/call"}`, 400, -32602, `6`},
		{"NotificationWithIDSessionless", sessionless("notifications/cancelled"), `{"jsonrpc":"2.0","id":7,"method":"notifications/cancelled","params":{}}`, 200, -32600, `7`},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, srv := range []*httptest.Server{p.fast, p.sdk} {
				a := p.send(t, srv, mcpRequest{header: c.header, body: c.body})
				require.Equal(t, c.status, a.status, "%s", a)
				require.Equal(t, "application/json", a.header.Get("Content-Type"), "%s", a)
				code, _ := rpcErrorOf(t, a)
				require.Equal(t, c.code, code, "%s", a)
				var msg struct {
					ID json.RawMessage `json:"id"`
				}
				require.NoError(t, json.Unmarshal([]byte(a.body), &msg))
				require.Equal(t, c.id, string(msg.ID))
			}
		})
	}
	// Not JSON-RPC requests: their HTTP errors stay.
	for _, srv := range []*httptest.Server{p.fast, p.sdk} {
		a := p.send(t, srv, mcpRequest{header: with(legacy, "Content-Type", "text/plain"), body: `{"jsonrpc":"2.0","id":1,"method":"ping"}`})
		require.Equal(t, http.StatusUnsupportedMediaType, a.status, "%s", a)
		a = p.send(t, srv, mcpRequest{method: http.MethodGet, header: legacy})
		require.Equal(t, http.StatusMethodNotAllowed, a.status, "%s", a)
		// A notification of an unknown method has no answer to carry an id.
		a = p.send(t, srv, mcpRequest{header: legacy, body: `{"jsonrpc":"2.0","method":"notifications/no_such"}`})
		require.Equal(t, http.StatusBadRequest, a.status, "%s", a)
	}
}

// downAuth fails as an authenticator does when Postgres refuses the
// connection for too many clients.
type downAuth struct{}

func (downAuth) Authenticate(context.Context, string) (vocab.Actor, error) {
	return vocab.Actor{}, fmt.Errorf("%w: %w", vocab.ErrUnavailable,
		&pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"})
}

// When Postgres refuses connections for too many clients (53300), the 503
// says so and names pool_max_conns, over REST and MCP.
func TestTooManyClientsAnswerNamesPoolMaxConns(t *testing.T) {
	t.Parallel()
	st := unusedStore(t)
	g, err := core.New(&core.Config{Store: st, Enqueuer: noEnqueue{}, Policies: coretest.Policies()})
	require.NoError(t, err)
	srv, err := api.New(&api.Config{Gate: g, Auth: downAuth{}, Tools: builtinTools(t, st), Jobs: &jobs.Control[pgx.Tx]{},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for _, path := range []string{"/v1/tools/apply_credit", "/mcp"} {
		req := mustRequest(t, http.MethodPost, ts.URL+path, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		resp, err := ts.Client().Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
		require.Contains(t, string(b), "too many clients")
		require.Contains(t, string(b), "53300")
		require.Contains(t, string(b), "pool_max_conns")
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	}
}
