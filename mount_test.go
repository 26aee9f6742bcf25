package idemgate_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
)

// A team mounts idemgate's MCP alone under a path of its own, and the
// rest of it under a prefix of its router: both work, authenticated as at
// the root.
func TestMountedUnderPrefixes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	svc := runService(t, "sqlite:"+filepath.Join(t.TempDir(), "mount.db"), gate.NewRegistry().MustAdd(addNote), nil)
	token, err := svc.CreateToken(ctx, "acme", "bot", "notes:write")
	require.NoError(t, err)

	r := chi.NewRouter()
	r.Handle("/agents/mcp", svc.MCPHandler())
	r.Mount("/idem", svc)
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the team's home") })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	client := mcp.NewClient(&mcp.Implementation{Name: "mount-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/agents/mcp", HTTPClient: &http.Client{Transport: bearerRT{token}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"idempotency_key": "mounted-note-01", "text": "hi"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)

	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get("/idem/v1/operations/add_note/mounted-note-01", token)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"status":"succeeded"`)
	status, _ = get("/idem/v1/operations/add_note/mounted-note-01", "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, body = get("/idem/healthz", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ok", strings.TrimSpace(body))
	status, body = get("/", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "the team's home", body)
	// Without a token, MCP is refused too.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/agents/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
