package idemgate_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/oauth/oauthtest"
)

type noteArgs struct {
	Text string `json:"text" idem:"minlen=1,maxlen=40"`
}

type noteResult struct {
	Text string `json:"text"`
}

// addNote is a mutation with no effect of its own: the test counts the
// gate's rows and audit events.
var addNote = &gate.Mutation[noteArgs, noteResult]{
	Name: "add_note", Title: "Add a note", Description: "Adds a note.", Scope: "notes:write",
	InTx: func(_ context.Context, _ gate.Tx, op *gate.Op[noteArgs]) (*noteResult, error) {
		return &noteResult{Text: op.Args.Text}, nil
	},
}

// bearerRT adds a bearer token to every request.
type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// In OAuth mode (IDEMGATE_OAUTH_ISSUER) every route takes the JWT access
// tokens of a real OpenID provider: a valid one's call succeeds and is
// audited with its subject; expired, wrong-audience, wrong-issuer and
// tampered ones are 401 with a challenge naming the resource metadata, and
// write nothing (as a call without a token); the metadata validates.
func TestOAuthResourceServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	op := oauthtest.Start(t, nil)
	other := oauthtest.Start(t, nil)
	dbURL, pool := postgresDB(t, 4)
	// The resource is this api's public URL (behind its proxy), where the
	// metadata is published; the test serves the same routes locally.
	svc := runService(t, dbURL, gate.NewRegistry().MustAdd(addNote), nil,
		"--oauth-issuer="+op.Issuer(), "--oauth-audience="+oauthtest.DefaultAudience, "--oauth-resource=https://idemgate.test/mcp")
	srv := httptest.NewServer(svc)
	t.Cleanup(srv.Close)

	rows := func() (claims, audits int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM idempotency_claims), (SELECT count(*) FROM audit_events)`).Scan(&claims, &audits))
		return
	}

	// The metadata document (RFC 9728), without authentication.
	resp, err := http.Get(srv.URL + "/.well-known/oauth-protected-resource/mcp")
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&meta))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "https://idemgate.test/mcp", meta["resource"])
	require.Equal(t, []any{op.Issuer()}, meta["authorization_servers"])
	require.Equal(t, []any{"header"}, meta["bearer_methods_supported"])

	// A valid token: the call succeeds, audited with the token's subject.
	good := op.Token(t, &oauthtest.TokenParams{Subject: "alice", Tenant: "acme", Scopes: []string{"notes:write"}})
	client := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{good}}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"idempotency_key": "oauth-note-0001", "text": "hi"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	var tenant, user string
	require.NoError(t, pool.QueryRow(ctx, `SELECT tenant_id, user_id FROM audit_events WHERE decision = 'accepted'`).Scan(&tenant, &user))
	require.Equal(t, "acme", tenant)
	require.Equal(t, "alice", user)

	// What an unauthenticated call writes: nothing.
	call := func(token string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/tools/add_note", strings.NewReader(`{"text":"x"}`))
		req.Header.Set("Idempotency-Key", "oauth-note-0002")
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	claims0, audits0 := rows()
	resp, body := call("")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	require.Equal(t, `Bearer resource_metadata="https://idemgate.test/.well-known/oauth-protected-resource/mcp"`, resp.Header.Get("WWW-Authenticate"))
	claims1, audits1 := rows()
	require.Equal(t, claims0, claims1)
	require.Equal(t, audits0, audits1)

	// Expired an hour ago, beyond any clock leeway: no wait for it to expire.
	expired := op.Token(t, &oauthtest.TokenParams{Subject: "alice", Tenant: "acme", Scopes: []string{"notes:write"}, Lifetime: -time.Hour})
	tampered := []byte(op.Token(t, &oauthtest.TokenParams{Subject: "alice", Tenant: "acme", Scopes: []string{"notes:write"}}))
	dot := strings.IndexByte(string(tampered), '.')
	tampered[dot+5] ^= 1
	for name, token := range map[string]string{
		"expired":        expired,
		"wrong audience": op.Token(t, &oauthtest.TokenParams{Subject: "alice", Tenant: "acme", Audience: []string{"https://elsewhere.test"}}),
		"wrong issuer":   other.Token(t, &oauthtest.TokenParams{Subject: "alice", Tenant: "acme", Scopes: []string{"notes:write"}}),
		"tampered":       string(tampered),
	} {
		resp, body := call(token)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", name, body)
		challenge := resp.Header.Get("WWW-Authenticate")
		require.Contains(t, challenge, `resource_metadata="https://idemgate.test/.well-known/oauth-protected-resource/mcp"`, name)
		require.Contains(t, challenge, `error="invalid_token"`, name)
		require.Contains(t, body, `"unauthenticated"`, name)
		c, a := rows()
		require.Equal(t, claims0, c, "%s wrote a claim", name)
		require.Equal(t, audits0, a, "%s wrote an audit row", name)
	}
}
