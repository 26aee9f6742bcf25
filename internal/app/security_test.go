package app_test

// Security and bad input: tenant isolation, scopes, tokens, limits,
// redaction and rate limits, each proven against the assembled api on a
// real Postgres database (see docs/security.md for the threat model).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/vocab"
)

// rowCounts are the rows a call can write.
type rowCounts struct{ Claims, Jobs, Audit, Denied int }

func countAll(t *testing.T, pool *pgxpool.Pool) rowCounts {
	t.Helper()
	var c rowCounts
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM idempotency_claims),
		(SELECT count(*) FROM river_job),
		(SELECT count(*) FROM audit_events),
		(SELECT count(*) FROM audit_events WHERE decision = 'denied')`).Scan(&c.Claims, &c.Jobs, &c.Audit, &c.Denied))
	return c
}

// requireOneDenied checks that exactly one audit row, a denied one, was
// written since before, and nothing else: no claim, no job.
func requireOneDenied(t *testing.T, pool *pgxpool.Pool, before rowCounts, msg string) {
	t.Helper()
	after := countAll(t, pool)
	want := before
	want.Audit++
	want.Denied++
	require.Equal(t, want, after, "%s: one denied audit row and nothing else", msg)
}

// requireNoRows checks that nothing was written since before.
func requireNoRows(t *testing.T, pool *pgxpool.Pool, before rowCounts, msg string) {
	t.Helper()
	require.Equal(t, before, countAll(t, pool), "%s: no rows at all", msg)
}

// lastDenied is the newest audit row's tenant, tool, token and reason.
func lastDenied(t *testing.T, pool *pgxpool.Pool) (tenant, tool, tokenID, reason string) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT tenant_id, tool, token_id, reason FROM audit_events WHERE decision = 'denied' ORDER BY id DESC LIMIT 1`).
		Scan(&tenant, &tool, &tokenID, &reason))
	return
}

// setupWith is setup with api options and a logger (nil: defaults).
func setupWith(t *testing.T, opts *app.APIOptions, logger *slog.Logger) *testBundle {
	t.Helper()
	ctx := context.Background()
	dbURL, pool := pgtest.NewDB(t)
	_, err := pgengine.New(pool).Seed(ctx, seedFile())
	require.NoError(t, err)
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), logger, opts)
	require.NoError(t, err)
	return &testBundle{url: serveAPI(ctx, t, a), pool: pool, api: a}
}

func seedTokens(t *testing.T, pool *pgxpool.Pool, tokens ...store.SeedToken) {
	t.Helper()
	_, err := pgengine.New(pool).Seed(context.Background(), &store.SeedFile{Tokens: tokens})
	require.NoError(t, err)
}

// callToolRaw calls a tool with raw JSON arguments, as a client that
// builds its own JSON would.
func callToolRaw(t *testing.T, s *mcp.ClientSession, name, raw string) (*result, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(raw)})
	require.NoError(t, err)
	require.Len(t, res.Content, 1)
	var out result
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out))
	if res.IsError {
		require.NotNil(t, out.Error, "a tool error carries a code")
	}
	return &out, res.IsError
}

// httpResult is a raw HTTP answer: status, headers, body, and the body
// decoded when it is JSON.
type httpResult struct {
	status int
	header http.Header
	raw    string
	json   map[string]any
}

func (r *httpResult) code() string {
	e, _ := r.json["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// doHTTP sends a request with an optional bearer token, header pairs and
// body; chunked sends the body without a Content-Length.
func doHTTP(t *testing.T, method, url, token string, body []byte, chunked bool, headers ...string) *httpResult {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length
		}
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if chunked {
		req.ContentLength = -1
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := &httpResult{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if strings.Contains(resp.Header.Get("Content-Type"), "json") {
		require.NoError(t, json.Unmarshal(b, &out.json), "%s", b)
	}
	return out
}

// mcpPost posts one raw JSON-RPC message to /mcp.
func mcpPost(t *testing.T, url, token string, body []byte, chunked bool) *httpResult {
	t.Helper()
	return doHTTP(t, http.MethodPost, url+"/mcp", token, body, chunked,
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream")
}

func TestSecurityTenantIsolationOnEveryTool(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acme := connect(t, b.url, tokenAcme)
	globex := connect(t, b.url, tokenGlobex)
	const key = "tenant-shared-0001"
	acmeArgs := map[string]map[string]any{
		"refund_order":        {"order_id": "ord_9f2", "amount_cents": 1500},
		"apply_credit":        {"customer_id": "cus_1", "amount_cents": 250, "currency": "usd"},
		"reset_seat":          {"seat_id": "seat_1"},
		"send_password_reset": {"user_id": "usr_1"},
	}
	globexArgs := map[string]map[string]any{
		"refund_order":        {"order_id": "ord_9f2", "amount_cents": 900},
		"apply_credit":        {"customer_id": "cus_1", "amount_cents": 999, "currency": "eur"},
		"reset_seat":          {"seat_id": "seat_9"},
		"send_password_reset": {"user_id": "usr_9"},
	}
	withKey := func(args map[string]any, k string) map[string]any {
		out := map[string]any{"idempotency_key": k}
		for n, v := range args {
			out[n] = v
		}
		return out
	}
	acmeOps := map[string]*vocab.Operation{}
	for tool, args := range acmeArgs {
		res, isErr := callTool(t, acme, tool, withKey(args, key))
		require.False(t, isErr, tool)
		acmeOps[tool] = res.Operation
		_, isErr = callTool(t, acme, tool, withKey(args, key+"-rest"))
		require.False(t, isErr, tool)
	}
	complete(t, b, acmeOps["refund_order"]) // a terminal claim could be replayed: it must not be, across tenants
	hashes := func(tenant string) string {
		var s string
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT coalesce(string_agg(tool || '=' || args_hash || '/' || status || '/' || operation_id, ',' ORDER BY tool), '') FROM idempotency_claims WHERE tenant_id = $1`, tenant).Scan(&s))
		return s
	}
	acmeBefore := hashes("acme")

	for tool := range acmeArgs {
		// Reading: get_operation over MCP and REST find nothing for globex.
		res, isErr := callTool(t, globex, "get_operation", map[string]any{"tool": tool, "idempotency_key": key})
		require.True(t, isErr, tool)
		require.Equal(t, vocab.CodeNotFound, res.Error.Code, tool)
		require.Nil(t, res.Operation, tool)
		r := doHTTP(t, http.MethodGet, b.url+"/v1/operations/"+tool+"/"+key, tokenGlobex, nil, false)
		require.Equal(t, http.StatusNotFound, r.status, "%s: %s", tool, r.raw)
		require.NotContains(t, r.raw, acmeOps[tool].OperationID, tool)

		// Writing with acme's key and other arguments: neither replay nor
		// conflict, a claim of globex's own, over MCP ...
		g, isErr := callTool(t, globex, tool, withKey(globexArgs[tool], key))
		require.False(t, isErr, "%s: %+v", tool, g.Error)
		require.Equal(t, vocab.OutcomeAccepted, g.Outcome, tool)
		require.False(t, g.Replayed, tool)
		require.NotEqual(t, acmeOps[tool].OperationID, g.Operation.OperationID, tool)
		require.Nil(t, g.Operation.Result, tool)

		// ... and over REST with a second shared key: acme's claim by that
		// key exists, globex's call is accepted as new.
		k2 := key + "-rest"
		r = doHTTP(t, http.MethodPost, b.url+"/v1/tools/"+tool, tokenGlobex, mustJSON(t, globexArgs[tool]), false, "Idempotency-Key", k2)
		require.Equal(t, http.StatusAccepted, r.status, "%s: %s", tool, r.raw)
		require.Equal(t, "accepted", r.json["outcome"], tool)
		require.Empty(t, r.header.Get("Idempotent-Replayed"))

		// A conflict is only ever with the tenant's own claim.
		c, isErr := callTool(t, globex, tool, withKey(acmeArgs[tool], key))
		require.True(t, isErr, tool)
		require.Equal(t, vocab.CodeKeyReuseDifferentArgs, c.Error.Code, tool)
		require.Equal(t, g.Operation.OperationID, c.Operation.OperationID, tool)
	}
	require.Equal(t, acmeBefore, hashes("acme"), "acme's claims are untouched by globex")
	require.Equal(t, 8, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims WHERE tenant_id = 'globex'`))

	// Audit rows are the tenant's own: no globex row names an acme operation.
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM audit_events a JOIN idempotency_claims c
		ON a.operation_id = c.operation_id WHERE a.tenant_id <> c.tenant_id`))

	// Orders: each tenant sees its own ord_9f2 only.
	for _, tc := range []struct {
		token  string
		amount float64
	}{{tokenAcme, 5000}, {tokenGlobex, 7000}} {
		r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/get_order", tc.token, []byte(`{"order_id":"ord_9f2"}`), false)
		require.Equal(t, http.StatusOK, r.status, r.raw)
		require.Equal(t, tc.amount, r.json["amount_cents"])
	}
}

// allScopes are every scope a tool needs, plus the operator's.
var allScopes = []string{"billing:refund", "billing:credit", "seats:reset", "users:password_reset", "operations:read", "ops:admin"}

// tokenLacking is a seeded acme token with every scope but scope.
func tokenLacking(scope string) string {
	return "idg_test_acme_no_" + strings.NewReplacer(":", "_").Replace(scope)
}

func TestSecurityScopesOnEveryToolAndRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var tokens []store.SeedToken
	for _, scope := range allScopes[:5] {
		var scopes []string
		for _, s := range allScopes {
			// get_operation also reads with the polled mutation's scope:
			// the token without operations:read lacks refund_order's too.
			if s != scope && (scope != "operations:read" || s != "billing:refund") {
				scopes = append(scopes, s)
			}
		}
		tokens = append(tokens, store.SeedToken{Tenant: "acme", User: "lacks-" + scope, Scopes: scopes, Token: tokenLacking(scope)})
	}
	seedTokens(t, b.pool, tokens...)
	tokenIDs := map[string]string{}
	list, err := pgengine.New(b.pool).TokenList(context.Background(), &store.TokenListParams{TenantID: "acme"})
	require.NoError(t, err)
	for _, tok := range list {
		tokenIDs[tok.UserID] = tok.ID
	}

	cases := []struct {
		tool, scope string
		args        map[string]any
	}{
		{"refund_order", "billing:refund", map[string]any{"order_id": "ord_9f2", "amount_cents": 100}},
		{"apply_credit", "billing:credit", map[string]any{"customer_id": "cus_1", "amount_cents": 100, "currency": "usd"}},
		{"reset_seat", "seats:reset", map[string]any{"seat_id": "seat_1"}},
		{"send_password_reset", "users:password_reset", map[string]any{"user_id": "usr_1"}},
		{"get_operation", "operations:read", map[string]any{"tool": "refund_order"}},
		{"get_order", "operations:read", map[string]any{"order_id": "ord_9f2"}},
	}
	for _, tc := range cases {
		token := tokenLacking(tc.scope)
		s := connect(t, b.url, token)
		args := map[string]any{"idempotency_key": "scope-key-0001"}
		for n, v := range tc.args {
			args[n] = v
		}
		check := func(label string) {
			t.Helper()
			tenant, tool, tokenID, reason := lastDenied(t, b.pool)
			require.Equal(t, "acme", tenant, label)
			require.Equal(t, tc.tool, tool, label)
			require.Equal(t, tokenIDs["lacks-"+tc.scope], tokenID, label)
			require.True(t, strings.HasPrefix(reason, "forbidden"), "%s: %s", label, reason)
			require.Contains(t, reason, tc.scope, label)
		}

		// MCP, with valid arguments.
		before := countAll(t, b.pool)
		res, isErr := callTool(t, s, tc.tool, args)
		require.True(t, isErr, tc.tool)
		require.Equal(t, vocab.CodeForbidden, res.Error.Code, tc.tool)
		requireOneDenied(t, b.pool, before, tc.tool+" over MCP")
		check(tc.tool + " over MCP")

		// MCP with invalid arguments: the scope is checked first.
		before = countAll(t, b.pool)
		res, isErr = callToolRaw(t, s, tc.tool, `{"bogus":[1,2,3],"idempotency_key":"no"}`)
		require.True(t, isErr, tc.tool)
		require.Equal(t, vocab.CodeForbidden, res.Error.Code, tc.tool)
		requireOneDenied(t, b.pool, before, tc.tool+" over MCP with bad arguments")

		// REST: POST /v1/tools/{tool}, with and without a key.
		for _, key := range []string{"scope-key-0002", ""} {
			before = countAll(t, b.pool)
			var headers []string
			if key != "" {
				headers = []string{"Idempotency-Key", key}
			}
			r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/"+tc.tool, token, mustJSON(t, tc.args), false, headers...)
			require.Equal(t, http.StatusForbidden, r.status, "%s: %s", tc.tool, r.raw)
			require.Equal(t, "forbidden", r.code())
			require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
			requireOneDenied(t, b.pool, before, tc.tool+" over REST")
			check(tc.tool + " over REST")
		}
		if tc.tool == "get_operation" {
			before = countAll(t, b.pool)
			r := doHTTP(t, http.MethodGet, b.url+"/v1/operations/refund_order/scope-key-0001", token, nil, false)
			require.Equal(t, http.StatusForbidden, r.status, r.raw)
			requireOneDenied(t, b.pool, before, "GET /v1/operations over REST")
			check("GET /v1/operations")
		}
	}
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims`))
	require.Zero(t, countRows(t, b.pool, `SELECT count(*) FROM river_job`))

	// The tokens work for what they do hold: forbidden above is the scope.
	res, isErr := callTool(t, connect(t, b.url, tokenLacking("billing:refund")), "apply_credit",
		map[string]any{"customer_id": "cus_1", "amount_cents": 100, "currency": "usd", "idempotency_key": "scope-control-01"})
	require.False(t, isErr, "%+v", res.Error)
	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/apply_credit", tokenLacking("operations:read"),
		[]byte(`{"customer_id":"cus_1","amount_cents":100,"currency":"usd"}`), false, "Idempotency-Key", "scope-control-02")
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	// Without operations:read, the polled mutation's own scope reads it.
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations/apply_credit/scope-control-02", tokenLacking("operations:read"), nil, false)
	require.Equal(t, http.StatusOK, r.status, r.raw)
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations/refund_order/scope-control-02", tokenLacking("operations:read"), nil, false)
	require.Equal(t, http.StatusForbidden, r.status, r.raw)
}

func TestSecurityExpiredRevokedAndMalformedTokensAre401(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)
	const expired, revoked = "idg_test_acme_expired", "idg_test_acme_revoked"
	seedTokens(t, b.pool,
		store.SeedToken{Tenant: "acme", User: "expired-bot", Scopes: allScopes, Token: expired, ExpiresAt: &past},
		store.SeedToken{Tenant: "acme", User: "revoked-bot", Scopes: allScopes, Token: revoked},
	)
	data := pgengine.New(b.pool)
	list, err := data.TokenList(ctx, &store.TokenListParams{TenantID: "acme"})
	require.NoError(t, err)
	for _, tok := range list {
		if tok.UserID == "revoked-bot" {
			_, err := data.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID, TenantID: "acme"})
			require.NoError(t, err)
		}
	}

	before := countAll(t, b.pool)
	refundBody := []byte(`{"order_id":"ord_9f2","amount_cents":100}`)
	initialize := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	for _, tc := range []struct{ name, authorization string }{
		{"Expired", "Bearer " + expired},
		{"Revoked", "Bearer " + revoked},
		{"Unknown", "Bearer idg_test_acme_supporT"},
		{"NotWellFormed", "Bearer idg_test_acme_support!"},
		{"TooLong", "Bearer idg_" + strings.Repeat("a", 600)},
		{"OtherScheme", "Basic " + tokenAcme},
		{"NoToken", "Bearer "},
		{"SchemeOnly", "Bearer"},
		{"Missing", ""},
	} {
		for _, target := range []struct {
			method, path string
			body         []byte
			headers      []string
		}{
			{http.MethodPost, "/v1/tools/refund_order", refundBody, []string{"Idempotency-Key", "auth-key-0001"}},
			{http.MethodGet, "/v1/operations/refund_order/auth-key-0001", nil, nil},
			{http.MethodPost, "/mcp", initialize, []string{"Content-Type", "application/json", "Accept", "application/json, text/event-stream"}},
		} {
			headers := target.headers
			if tc.authorization != "" {
				headers = append(headers[:len(headers):len(headers)], "Authorization", tc.authorization)
			}
			r := doHTTP(t, target.method, b.url+target.path, "", target.body, false, headers...)
			require.Equal(t, http.StatusUnauthorized, r.status, "%s %s: %s", tc.name, target.path, r.raw)
			require.Equal(t, "unauthenticated", r.code(), tc.name)
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer", tc.name)
			require.NotContains(t, r.raw, "expired-bot")
		}
	}
	requireNoRows(t, b.pool, before, "401s: there is no tenant to audit")

	// The scheme is case-insensitive (RFC 9110): a control that the same
	// requests pass with a live token.
	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", "", refundBody, false,
		"Authorization", "bEaReR "+tokenAcme, "Idempotency-Key", "auth-key-0001")
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
}

// TestSecurityRevocationTakesEffectWithinCacheTTL runs the api on the same
// gate and database with a token cache on a test clock, revokes a token that
// was just used, and sees it refused as soon as the cache entry ages out.
func TestSecurityRevocationTakesEffectWithinCacheTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	const ttl = 5 * time.Second
	const secret = "idg_test_acme_soon_revoked"
	seedTokens(t, b.pool, store.SeedToken{Tenant: "acme", User: "soon-revoked", Scopes: allScopes, Token: secret})
	data := pgengine.New(b.pool)
	var clockMu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		clockMu.Lock()
		defer clockMu.Unlock()
		now = now.Add(d)
	}
	srv, err := api.New(&api.Config{Gate: b.api.Gate, Auth: tenancy.NewAuthenticator(data, ttl, clock), Tools: b.api.Tools, Jobs: b.api.Jobs})
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)

	get := func() int {
		return doHTTP(t, http.MethodGet, ts.URL+"/v1/operations/refund_order/revoke-key-0001", secret, nil, false).status
	}
	require.Equal(t, http.StatusNotFound, get(), "authenticated: no such operation")
	tok, err := data.TokenGetByHash(ctx, tenancy.HashToken(secret))
	require.NoError(t, err)
	_, err = data.TokenRevoke(ctx, &store.TokenRevokeParams{ID: tok.ID})
	require.NoError(t, err)
	advance(ttl - time.Millisecond)
	require.Equal(t, http.StatusNotFound, get(), "still cached just inside the TTL")
	advance(2 * time.Millisecond)
	require.Equal(t, http.StatusUnauthorized, get(), "refused once the cache entry is older than the TTL")
}

func TestSecurityTokensAreStoredOnlyAsHashes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Use every token once, so any cache or audit path has seen it.
	for _, tok := range seedFile().Tokens {
		doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tok.Token, []byte(`{"order_id":"ord_9f2","amount_cents":100}`), false, "Idempotency-Key", "hash-key-0001")
	}
	var dump string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT string_agg(row_to_json(t)::text, E'\n') FROM api_tokens t`).Scan(&dump))
	for _, tok := range seedFile().Tokens {
		require.NotContains(t, dump, tok.Token)
		require.NotContains(t, dump, strings.TrimPrefix(tok.Token, "idg_"))
		sum := sha256.Sum256([]byte(tok.Token))
		require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM api_tokens WHERE token_hash = $1`, sum[:]), tok.User)
		require.Contains(t, dump, hex.EncodeToString(sum[:]))
	}
	for _, table := range []string{"audit_events", "idempotency_claims", "river_job"} {
		var rows string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(row_to_json(t)::text, E'\n'), '') FROM `+table+` t`).Scan(&rows))
		for _, tok := range seedFile().Tokens {
			require.NotContains(t, rows, tok.Token, table)
		}
	}
}

func TestSecurityAuditIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, isErr := callTool(t, connect(t, b.url, tokenAcmeRead), "refund_order", refund("append-only-0001", 100))
	require.True(t, isErr)
	ctx := context.Background()
	for _, stmt := range []string{
		`UPDATE audit_events SET reason = 'rewritten'`,
		`DELETE FROM audit_events`,
		`TRUNCATE audit_events`,
	} {
		_, err := b.pool.Exec(ctx, stmt)
		require.ErrorContains(t, err, "append-only", stmt)
	}
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE reason LIKE 'forbidden%'`))
}

// nested returns n nested arrays around 1.
func nested(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }

func TestSecurityLimitsOverMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := connect(t, b.url, tokenAcme)
	refundRaw := func(key, amount string) string {
		return `{"order_id":"ord_9f2","amount_cents":` + amount + `,"idempotency_key":` + key + `}`
	}
	credit := func(currency string) string {
		return `{"customer_id":"cus_1","amount_cents":100,"currency":` + currency + `,"idempotency_key":"limit-credit-01"}`
	}
	q := strconv.Quote
	cases := []struct {
		name, tool, raw string
		code            vocab.Code
		field           string
	}{
		// Keys: length and characters.
		{"Key7", "refund_order", refundRaw(`"abcdefg"`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"Key129", "refund_order", refundRaw(q(strings.Repeat("k", 129)), "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeySpace", "refund_order", refundRaw(`"refund key 01"`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeySlash", "refund_order", refundRaw(`"../../etc/passwd"`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeyUnicode", "refund_order", refundRaw(`"ключ-возврата-1"`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeyNUL", "refund_order", refundRaw(`"refund-key\u0000-01"`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeyLongUnicode", "refund_order", refundRaw(q(strings.Repeat("€", 128)), "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeyNumber", "refund_order", refundRaw(`12345678`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"KeyNull", "refund_order", refundRaw(`null`, "100"), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		// Amounts (negative and fractional: TestMCPRejectionsCarryCodesAndOneAuditRow).
		{"AmountZero", "refund_order", refundRaw(`"limit-amount-01"`, "0"), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountMinusZero", "refund_order", refundRaw(`"limit-amount-02"`, "-0"), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountOverMax", "refund_order", refundRaw(`"limit-amount-03"`, strconv.Itoa(maxAmountCents+1)), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountOverMaxExponent", "refund_order", refundRaw(`"limit-amount-04"`, "1e10"), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountAbove2e53", "refund_order", refundRaw(`"limit-amount-05"`, "9007199254740993"), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountString", "refund_order", refundRaw(`"limit-amount-07"`, `"1500"`), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountBool", "refund_order", refundRaw(`"limit-amount-08"`, `true`), vocab.CodeInvalidArgument, "amount_cents"},
		{"AmountTiny", "refund_order", refundRaw(`"limit-amount-09"`, `1e-400`), vocab.CodeInvalidArgument, "amount_cents"},
		// Currencies: Stripe's lowercase ISO 4217 form only.
		{"CurrencyUpper", "apply_credit", credit(`"USD"`), vocab.CodeInvalidArgument, "currency"},
		{"Currency4", "apply_credit", credit(`"usdd"`), vocab.CodeInvalidArgument, "currency"},
		{"Currency2", "apply_credit", credit(`"us"`), vocab.CodeInvalidArgument, "currency"},
		{"CurrencyUnicode", "apply_credit", credit(`"€ur"`), vocab.CodeInvalidArgument, "currency"},
		{"CurrencyNumber", "apply_credit", credit(`840`), vocab.CodeInvalidArgument, "currency"},
		// IDs: 1 to 64 of [A-Za-z0-9_.:-].
		{"IDSpace", "refund_order", `{"order_id":"ord 9f2","amount_cents":100,"idempotency_key":"limit-id-000001"}`, vocab.CodeInvalidArgument, "order_id"},
		{"ID65", "refund_order", `{"order_id":` + q(strings.Repeat("o", 65)) + `,"amount_cents":100,"idempotency_key":"limit-id-000002"}`, vocab.CodeInvalidArgument, "order_id"},
		{"IDUnicode", "reset_seat", `{"seat_id":"seat_ü","idempotency_key":"limit-id-000003"}`, vocab.CodeInvalidArgument, "seat_id"},
		{"IDEmpty", "send_password_reset", `{"user_id":"","idempotency_key":"limit-id-000004"}`, vocab.CodeInvalidArgument, "user_id"},
		{"IDNewline", "apply_credit", `{"customer_id":"cus_1\n","amount_cents":100,"currency":"usd","idempotency_key":"limit-id-000005"}`, vocab.CodeInvalidArgument, "customer_id"},
		{"IDPath", "refund_order", `{"order_id":"../ord_9f2","amount_cents":100,"idempotency_key":"limit-id-000006"}`, vocab.CodeInvalidArgument, "order_id"},
		{"IDObject", "refund_order", `{"order_id":{"$ne":""},"amount_cents":100,"idempotency_key":"limit-id-000007"}`, vocab.CodeInvalidArgument, "order_id"},
		// Free text.
		{"Reason501", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"reason":` + q(strings.Repeat("é", 501)) + `,"idempotency_key":"limit-text-0001"}`, vocab.CodeInvalidArgument, "reason"},
		{"ReasonNUL", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"reason":"a\u0000b","idempotency_key":"limit-text-0002"}`, vocab.CodeInvalidArgument, "reason"},
		{"MemoNUL", "apply_credit", `{"customer_id":"cus_1","amount_cents":100,"currency":"usd","memo":"\u0000","idempotency_key":"limit-text-0003"}`, vocab.CodeInvalidArgument, "memo"},
		// Shape of the arguments: size, depth, duplicates, odd names.
		{"ArgsOver64KiB", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"reason":"` + strings.Repeat("a", 70_000) + `","idempotency_key":"limit-shape-001"}`, vocab.CodeInvalidArgument, "arguments"},
		{"Depth33", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"x":` + nested(32) + `,"idempotency_key":"limit-shape-002"}`, vocab.CodeInvalidArgument, ""},
		{"Depth32IsUnknownArgument", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"x":` + nested(31) + `,"idempotency_key":"limit-shape-003"}`, vocab.CodeInvalidArgument, "x"},
		{"DuplicateOrderID", "refund_order", `{"order_id":"ord_other","order_id":"ord_9f2","amount_cents":100,"idempotency_key":"limit-shape-004"}`, vocab.CodeInvalidArgument, "order_id"},
		{"DuplicateKey", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"limit-shape-005","idempotency_key":"limit-shape-006"}`, vocab.CodeInvalidArgument, "idempotency_key"},
		{"NULArgumentName", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"\u0000":1,"idempotency_key":"limit-shape-007"}`, vocab.CodeInvalidArgument, "\x00"},
		{"LoneSurrogate", "refund_order", `{"order_id":"ord_9f2","amount_cents":100,"reason":"\ud800","idempotency_key":"limit-shape-008"}`, vocab.CodeInvalidArgument, "reason"},
		{"TenantArgument", "reset_seat", `{"seat_id":"seat_1","tenant_id":"globex","idempotency_key":"limit-shape-009"}`, vocab.CodeInvalidArgument, "tenant_id"},
		// Reads are checked (and audited) alike.
		{"ReadOrderID", "get_order", `{"order_id":"ord 9f2"}`, vocab.CodeInvalidArgument, "order_id"},
		{"ReadToolName", "get_operation", `{"tool":"drop_tables","idempotency_key":"limit-read-0001"}`, vocab.CodeInvalidArgument, "tool"},
		{"ReadKey", "get_operation", `{"tool":"refund_order","idempotency_key":"short"}`, vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"ReadUnknownArgument", "get_order", `{"order_id":"ord_9f2","tenant_id":"globex"}`, vocab.CodeInvalidArgument, "tenant_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := countAll(t, b.pool)
			res, isErr := callToolRaw(t, s, tc.tool, tc.raw)
			require.True(t, isErr, "accepted: %+v", res)
			require.Equal(t, tc.code, res.Error.Code, res.Error.Message)
			if tc.field != "" {
				require.Equal(t, tc.field, res.Error.Field, res.Error.Message)
			}
			requireOneDenied(t, b.pool, before, tc.name)
			tenant, tool, _, reason := lastDenied(t, b.pool)
			require.Equal(t, "acme", tenant)
			require.Equal(t, tc.tool, tool)
			require.True(t, strings.HasPrefix(reason, string(tc.code)), reason)
		})
	}

	// The boundaries themselves are accepted.
	for _, raw := range []string{
		refundRaw(`"k1234567"`, "100"),
		refundRaw(q(strings.Repeat("K", 128)), "100"),
		refundRaw(`"limit-boundary-1"`, strconv.Itoa(maxAmountCents)),
		refundRaw(`"limit-boundary-2"`, "1e3"),
		`{"order_id":` + q(strings.Repeat("o", 64)) + `,"amount_cents":1,"reason":` + q(strings.Repeat("é", 500)) + `,"idempotency_key":"limit-boundary-3"}`,
	} {
		res, isErr := callToolRaw(t, s, "refund_order", raw)
		require.False(t, isErr, "%.80s: %+v", raw, res.Error)
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	}
}

func TestSecurityLimitsOverREST(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	u := b.url + "/v1/tools/refund_order"
	body := `{"order_id":"ord_9f2","amount_cents":100}`
	cases := []struct {
		name    string
		body    string
		headers []string
		code    vocab.Code
	}{
		{"KeyMissing", body, nil, vocab.CodeIdempotencyKeyRequired},
		{"KeyEmpty", body, []string{"Idempotency-Key", ""}, vocab.CodeIdempotencyKeyRequired},
		{"KeyTwice", body, []string{"Idempotency-Key", "rest-limit-0001", "Idempotency-Key", "rest-limit-0002"}, vocab.CodeInvalidIdempotencyKey},
		{"Key7", body, []string{"Idempotency-Key", "abcdefg"}, vocab.CodeInvalidIdempotencyKey},
		{"Key129", body, []string{"Idempotency-Key", strings.Repeat("k", 129)}, vocab.CodeInvalidIdempotencyKey},
		{"KeyUnicode", body, []string{"Idempotency-Key", "ключ-возврата-1"}, vocab.CodeInvalidIdempotencyKey},
		{"KeyUnterminatedQuote", body, []string{"Idempotency-Key", `"rest-limit-0003`}, vocab.CodeInvalidIdempotencyKey},
		{"KeyParameters", body, []string{"Idempotency-Key", `"rest-limit-0004";a=1`}, vocab.CodeInvalidIdempotencyKey},
		{"KeyQuotedSpace", body, []string{"Idempotency-Key", `"rest limit 0005"`}, vocab.CodeInvalidIdempotencyKey},
		{"BodyKeyDiffers", `{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"rest-limit-0007"}`, []string{"Idempotency-Key", "rest-limit-0006"}, vocab.CodeInvalidArgument},
		{"AmountNegative", `{"order_id":"ord_9f2","amount_cents":-1}`, []string{"Idempotency-Key", "rest-limit-0008"}, vocab.CodeInvalidArgument},
		{"AmountFraction", `{"order_id":"ord_9f2","amount_cents":10.5}`, []string{"Idempotency-Key", "rest-limit-0009"}, vocab.CodeInvalidArgument},
		{"AmountZero", `{"order_id":"ord_9f2","amount_cents":0}`, []string{"Idempotency-Key", "rest-limit-0010"}, vocab.CodeInvalidArgument},
		{"AmountOverMax", `{"order_id":"ord_9f2","amount_cents":1000000001}`, []string{"Idempotency-Key", "rest-limit-0011"}, vocab.CodeInvalidArgument},
		// Over MCP the SDK's transport refuses 1e400 itself (it decodes
		// the params into float64 to read the tool's name).
		{"AmountHuge", `{"order_id":"ord_9f2","amount_cents":1e400}`, []string{"Idempotency-Key", "rest-limit-0021"}, vocab.CodeInvalidArgument},
		{"IDSpace", `{"order_id":"ord 9f2","amount_cents":100}`, []string{"Idempotency-Key", "rest-limit-0012"}, vocab.CodeInvalidArgument},
		{"NotJSON", `order_id=ord_9f2&amount_cents=100`, []string{"Idempotency-Key", "rest-limit-0013"}, vocab.CodeInvalidArgument},
		{"Array", `[{"order_id":"ord_9f2","amount_cents":100}]`, []string{"Idempotency-Key", "rest-limit-0014"}, vocab.CodeInvalidArgument},
		{"TrailingData", body + `{}`, []string{"Idempotency-Key", "rest-limit-0015"}, vocab.CodeInvalidArgument},
		{"InvalidUTF8", "{\"order_id\":\"ord_9f2\",\"amount_cents\":100,\"reason\":\"\xff\"}", []string{"Idempotency-Key", "rest-limit-0016"}, vocab.CodeInvalidArgument},
		{"Depth33", `{"order_id":"ord_9f2","amount_cents":100,"x":` + nested(32) + `}`, []string{"Idempotency-Key", "rest-limit-0017"}, vocab.CodeInvalidArgument},
		{"ArgsOver64KiB", `{"order_id":"ord_9f2","amount_cents":100,"reason":"` + strings.Repeat("a", 70_000) + `"}`, []string{"Idempotency-Key", "rest-limit-0018"}, vocab.CodeInvalidArgument},
		{"ReasonNUL", `{"order_id":"ord_9f2","amount_cents":100,"reason":"\u0000"}`, []string{"Idempotency-Key", "rest-limit-0019"}, vocab.CodeInvalidArgument},
		{"NULArgumentName", `{"order_id":"ord_9f2","amount_cents":100,"\u0000\u0000":1}`, []string{"Idempotency-Key", "rest-limit-0020"}, vocab.CodeInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := countAll(t, b.pool)
			r := doHTTP(t, http.MethodPost, u, tokenAcme, []byte(tc.body), false, tc.headers...)
			require.Equal(t, http.StatusBadRequest, r.status, r.raw)
			require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
			require.Equal(t, string(tc.code), r.code(), r.raw)
			requireOneDenied(t, b.pool, before, tc.name)
			// The denied row names the key as received, so that support can
			// find the attempt by it; storable whatever it holds.
			if len(tc.headers) == 2 {
				var key string
				require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT idempotency_key FROM audit_events ORDER BY id DESC LIMIT 1`).Scan(&key))
				require.Equal(t, tc.headers[1], key)
			}
		})
	}

	// A reason whose HTML characters JSON would escape six-fold still fits
	// when the raw arguments do.
	r := doHTTP(t, http.MethodPost, u, tokenAcme, []byte(`{"order_id":"ord_9f2","amount_cents":100,"reason":"`+strings.Repeat("<", 400)+`"}`), false, "Idempotency-Key", "rest-limit-html")
	require.Equal(t, http.StatusAccepted, r.status, r.raw)

	// The read route checks its key too.
	before := countAll(t, b.pool)
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations/refund_order/short", tokenAcme, nil, false)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	require.Equal(t, "invalid_idempotency_key", r.code())
	requireOneDenied(t, b.pool, before, "GET /v1/operations with a short key")
	before = countAll(t, b.pool)
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations/drop_tables/rest-limit-0001", tokenAcme, nil, false)
	require.Equal(t, http.StatusBadRequest, r.status, r.raw)
	requireOneDenied(t, b.pool, before, "GET /v1/operations of no tool")
}

func TestSecurityBodyLimitIs413ProblemJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	big := strings.Repeat("a", api.DefaultMaxBodyBytes)
	mcpBody := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"ord_9f2","amount_cents":100,"idempotency_key":"body-limit-0001","reason":"` + big + `"}}}`)
	restBody := []byte(`{"order_id":"ord_9f2","amount_cents":100,"reason":"` + big + `"}`)
	before := countAll(t, b.pool)
	for _, chunked := range []bool{false, true} {
		name := fmt.Sprintf("chunked=%v", chunked)
		for _, r := range []*httpResult{
			mcpPost(t, b.url, tokenAcme, mcpBody, chunked),
			doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, restBody, chunked, "Idempotency-Key", "body-limit-0002"),
		} {
			require.Equal(t, http.StatusRequestEntityTooLarge, r.status, "%s: %.200s", name, r.raw)
			require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "%s: %.200s", name, r.raw)
			require.Equal(t, "invalid_argument", r.code(), name)
		}
	}
	requireNoRows(t, b.pool, before, "413 is answered before any tool runs")

	// Just under the body limit, over the arguments limit: the tool's own
	// rejection, with its denied row.
	s := connect(t, b.url, tokenAcme)
	res, isErr := callTool(t, s, "refund_order", map[string]any{"order_id": "ord_9f2", "amount_cents": 100, "idempotency_key": "body-limit-0003", "reason": strings.Repeat("a", api.DefaultMaxBodyBytes/2)})
	require.True(t, isErr)
	require.Equal(t, vocab.CodeInvalidArgument, res.Error.Code)
	require.Equal(t, "arguments", res.Error.Field)
	requireOneDenied(t, b.pool, before, "arguments over 64 KiB")
}

// metricValue reads one series from /metrics (0 when absent).
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	r := doHTTP(t, http.MethodGet, url+"/metrics", "", nil, false)
	require.Equal(t, http.StatusOK, r.status)
	for _, line := range strings.Split(r.raw, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

func TestSecurityRateLimitPerTenantAndTool(t *testing.T) {
	t.Parallel()
	// One call per 100 s after a burst of 3: nothing refills during the test.
	b := setupWith(t, &app.APIOptions{RateLimit: 0.01, RateBurst: 3}, nil)
	acme := connect(t, b.url, tokenAcme)
	const series = `idemgate_rate_limited_total{tool="refund_order"}`
	for i := range 3 {
		res, isErr := callTool(t, acme, "refund_order", refund(fmt.Sprintf("rate-key-%06d", i), 100))
		require.False(t, isErr, "%+v", res.Error)
	}
	before := countAll(t, b.pool)

	// MCP: a rate_limited tool error, for a new key and for a retry alike.
	for _, key := range []string{"rate-key-000003", "rate-key-000000"} {
		res, isErr := callTool(t, acme, "refund_order", refund(key, 100))
		require.True(t, isErr)
		require.Equal(t, vocab.CodeRateLimited, res.Error.Code)
		require.Positive(t, res.RetryAfterMS)
	}
	// REST shares the bucket: 429 with Retry-After.
	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, []byte(`{"order_id":"ord_9f2","amount_cents":100}`), false, "Idempotency-Key", "rate-key-000004")
	require.Equal(t, http.StatusTooManyRequests, r.status, r.raw)
	require.Equal(t, "rate_limited", r.code())
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, retry)
	requireNoRows(t, b.pool, before, "rate-limited calls: no claim and no audit row")
	require.Equal(t, 3.0, metricValue(t, b.url, series))

	// Rejections come before the limit (docs/design.md, "The gate"): still audited.
	res, isErr := callTool(t, acme, "refund_order", refund("bad key!", 100))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeInvalidIdempotencyKey, res.Error.Code)
	requireOneDenied(t, b.pool, before, "a bad key while limited")

	// Another tool of the same tenant and the same tool of another tenant
	// are not limited; reads are not limited.
	res, isErr = callTool(t, acme, "reset_seat", map[string]any{"seat_id": "seat_1", "idempotency_key": "rate-seat-00001"})
	require.False(t, isErr, "%+v", res.Error)
	globex := connect(t, b.url, tokenGlobex)
	for i := range 3 {
		res, isErr = callTool(t, globex, "refund_order", refund(fmt.Sprintf("rate-key-%06d", i), 100))
		require.False(t, isErr, "globex call %d: %+v", i, res.Error)
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	}
	_, isErr = callTool(t, acme, "get_operation", map[string]any{"tool": "refund_order", "idempotency_key": "rate-key-000000"})
	require.False(t, isErr)
	require.Equal(t, 3.0, metricValue(t, b.url, series))
}

const stripeKey = "sk_test_idemgate_redaction_0123456789"

// card4242 finds 4242 standing alone (a card's last four), not inside a
// longer number, hex id or decimal.
var card4242 = regexp.MustCompile(`(^|[^0-9a-fA-F.])4242([^0-9a-fA-F.]|$)`)

func TestSecurityRedactionOfCardDetailsAndSecrets(t *testing.T) {
	t.Parallel()
	logger, logs := logtest.New()
	b := setupWorkerLogged(t, 10*time.Second, logger)
	const pii = "ana@example.com"
	var answers []string // every answer a client saw

	// A refund over MCP and one over REST, both succeeding.
	first, isErr := callTool(t, b.session, "refund_order", map[string]any{"order_id": "ord_9f2", "amount_cents": 1500, "reason": "asked by " + pii, "idempotency_key": "redact-mcp-00001"})
	require.False(t, isErr, "%+v", first.Error)
	require.Equal(t, vocab.StatusSucceeded, first.Operation.Status)
	answers = append(answers, string(mustJSON(t, first)))
	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, []byte(`{"order_id":"ord_9f2","amount_cents":1000}`), false, "Idempotency-Key", "redact-rest-0001")
	require.Equal(t, http.StatusOK, r.status, r.raw)
	answers = append(answers, r.raw)

	// Over what is still refundable (2500 of 5000 left): the worker refuses
	// before Stripe.
	over, isErr := callTool(t, b.session, "refund_order", refund("redact-over-0001", 4000))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeAmountExceedsRefundable, over.Error.Code)
	require.Equal(t, vocab.StatusFailed, over.Operation.Status)
	answers = append(answers, string(mustJSON(t, over)))
	// A card error from Stripe.
	declined, isErr := callTool(t, b.session, "refund_order", map[string]any{"order_id": "ord_declined", "amount_cents": 100, "idempotency_key": "redact-decl-0001"})
	require.True(t, isErr)
	require.Equal(t, vocab.CodeCardDeclined, declined.Error.Code)
	answers = append(answers, string(mustJSON(t, declined)))
	// Replays and reads.
	for _, key := range []string{"redact-mcp-00001", "redact-rest-0001", "redact-over-0001"} {
		answers = append(answers, string(mustJSON(t, getOperation(t, b.session, "refund_order", key))))
		r = doHTTP(t, http.MethodGet, b.url+"/v1/operations/refund_order/"+key, tokenAcme, nil, false)
		answers = append(answers, r.raw)
	}
	// A wrong secret, for the logs.
	r = doHTTP(t, http.MethodGet, b.url+"/v1/operations/refund_order/redact-mcp-00001", "idg_test_acme_wrong_secret", nil, false)
	require.Equal(t, http.StatusUnauthorized, r.status)

	// Stripe did send card details, receipt and ARN; and refunded acme's
	// charge only (globex's ord_9f2 is ch_456).
	_, stored, ok := b.stripe.StoredResponse(intentKey(t, strings.Repeat("s", 32), "acme", "refund_order",
		map[string]any{"order_id": "ord_9f2", "amount_cents": 1500, "idempotency_key": "redact-mcp-00001"}, 0))
	require.True(t, ok)
	var obj struct {
		ReceiptNumber        string `json:"receipt_number"`
		PaymentMethodDetails struct {
			Card struct{ Last4, Fingerprint string }
		} `json:"payment_method_details"`
		DestinationDetails struct {
			Card struct{ Reference string }
		} `json:"destination_details"`
	}
	require.NoError(t, json.Unmarshal(stored, &obj))
	require.Equal(t, "4242", obj.PaymentMethodDetails.Card.Last4)
	require.Equal(t, "fp_secret", obj.PaymentMethodDetails.Card.Fingerprint)
	require.NotEmpty(t, obj.ReceiptNumber)
	require.NotEmpty(t, obj.DestinationDetails.Card.Reference)
	require.Equal(t, map[string]int{"ch_123": 2, "ch_declined": 0}, withZero(b.stripe.RefundsByCharge(), "ch_declined"))

	// The worker logs a failure after its transaction commits, which may be
	// just after the client saw the outcome.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "operation failed") },
		60*time.Second, 20*time.Millisecond, "the logs were captured")

	dump := func(table string) string {
		var s string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(row_to_json(t)::text, E'\n'), '') FROM `+table+` t`).Scan(&s))
		return s
	}
	secrets := []string{"fp_secret", "last4", "payment_method_details", "destination_details", obj.ReceiptNumber,
		obj.DestinationDetails.Card.Reference, tokenAcme, "idg_test_acme_wrong_secret", stripeKey}
	places := map[string]string{
		"idempotency_claims": dump("idempotency_claims"),
		"audit_events":       dump("audit_events"),
		"refunds":            dump("refunds"),
		"river_job":          dump("river_job"),
		"answers":            strings.Join(answers, "\n"),
		"logs":               logs.String(),
	}
	require.Contains(t, places["audit_events"], `"succeeded"`)
	for place, text := range places {
		for _, secret := range secrets {
			require.NotContains(t, text, secret, place)
		}
		require.False(t, card4242.MatchString(text), "%s holds 4242: %s", place, card4242.FindString(text))
	}
	// Free text is kept with the claim (it is the intent) but audit rows
	// keep only each tool's allowlisted arguments.
	require.Contains(t, places["idempotency_claims"], pii)
	require.NotContains(t, places["audit_events"], pii)
	require.NotContains(t, places["logs"], pii)
}

func withZero(m map[string]int, keys ...string) map[string]int {
	for _, k := range keys {
		m[k] += 0
	}
	return m
}

// maxAmountCents is the largest amount `idem:"cents"` accepts.
const maxAmountCents = 1_000_000_000
