package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/oauth"
	"github.com/idemgate/idemgate/internal/oauth/oauthtest"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// whoami is what the team's own tool answers: the caller as
// domain.CallerFromContext gives it and go-sdk's TokenInfo.
type whoami struct {
	Tenant      string   `json:"tenant"`
	User        string   `json:"user"`
	Scopes      []string `json:"scopes"`
	TokenUser   string   `json:"token_user"`
	TokenScopes []string `json:"token_scopes"`
}

// TestCallerInTheTeamsOwnTools: ids as identity providers issue them
// (auth0|…, an email, 74 characters, non-ASCII) pass the OAuth resource
// server, and the team's own ungated tool on the same go-sdk server, and
// its own REST route behind the api's authentication, read the caller
// (domain.CallerFromContext, go-sdk's TokenInfo). An id with a control
// character is refused with 401 and a WARN line that says which claim
// and why, without the token. Nothing here reads the environment.
func TestCallerInTheTeamsOwnTools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	op := oauthtest.Start(t, nil)
	verifier, err := oauth.New(ctx, &oauth.Config{Issuer: op.Issuer(), Audience: oauthtest.DefaultAudience, TenantClaim: "tenant"})
	require.NoError(t, err)
	st := unusedStore(t)
	g, err := core.New(&core.Config{Store: st, Enqueuer: noEnqueue{}})
	require.NoError(t, err)
	logger, logs := logtest.New()
	srv, err := api.New(&api.Config{Gate: g, Auth: verifier, Tools: toolspec.NewRegistry(), Jobs: &jobs.Control[pgx.Tx]{}, Logger: logger})
	require.NoError(t, err)

	server := mcp.NewServer(&mcp.Implementation{Name: "team", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "whoami", Description: "Who calls."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, whoami, error) {
		var out whoami
		if c, ok := domain.CallerFromContext(ctx); ok {
			out.Tenant, out.User, out.Scopes = c.TenantID, c.UserID, c.Scopes
		}
		if ti := req.Extra.TokenInfo; ti != nil {
			out.TokenUser, out.TokenScopes = ti.UserID, ti.Scopes
		}
		return nil, out, nil
	})
	h, err := srv.MCPFor(server)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	mux.Handle("/team/whoami", srv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := domain.CallerFromContext(r.Context())
		require.True(t, ok)
		_ = json.NewEncoder(w).Encode(whoami{Tenant: c.TenantID, User: c.UserID, Scopes: c.Scopes})
	})))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	post := func(token, path, body string) (int, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`

	for _, ids := range []struct{ tenant, user string }{
		{"acme", "auth0|64f1c2"},
		{"ann@example.com", "google-oauth2|1044"},
		{strings.Repeat("t", 74), "Zoë Åström"},
	} {
		token := op.Token(t, &oauthtest.TokenParams{Tenant: ids.tenant, Subject: ids.user, Scopes: []string{"notes:read"}})
		status, body := post(token, "/mcp", call)
		require.Equal(t, http.StatusOK, status, "%s", body)
		var answer struct {
			Result struct {
				StructuredContent whoami `json:"structuredContent"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(body, &answer), "%s", body)
		require.Equal(t, whoami{Tenant: ids.tenant, User: ids.user, Scopes: []string{"notes:read"},
			TokenUser: ids.user, TokenScopes: []string{"notes:read"}}, answer.Result.StructuredContent, "%s", body)

		status, body = post(token, "/team/whoami", `{}`)
		require.Equal(t, http.StatusOK, status, "%s", body)
		var rest whoami
		require.NoError(t, json.Unmarshal(body, &rest))
		require.Equal(t, whoami{Tenant: ids.tenant, User: ids.user, Scopes: []string{"notes:read"}}, rest)
	}
	require.NotContains(t, logs.String(), "identity refused")

	token := op.Token(t, &oauthtest.TokenParams{Tenant: "acme\u0007", Subject: "u1"})
	status, body := post(token, "/mcp", call)
	require.Equal(t, http.StatusUnauthorized, status, "%s", body)
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "identity refused") {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.NotNil(t, line, "%s", logs.String())
	require.Equal(t, "WARN", line["level"])
	require.Equal(t, "tenant", line["field"])
	require.Contains(t, line["reason"], "U+0007")
	require.NotContains(t, logs.String(), token)
}
