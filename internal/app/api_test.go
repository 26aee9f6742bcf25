package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

const (
	tokenAcme     = "idg_test_acme_support"
	tokenAcmeRead = "idg_test_acme_readonly"
	tokenGlobex   = "idg_test_globex_support"
)

type testBundle struct {
	url  string
	pool *pgxpool.Pool
	api  *app.API
}

func seedFile() *store.SeedFile {
	all := []string{"billing:refund", "billing:credit", "seats:reset", "users:password_reset", "operations:read"}
	return &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{
			{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"},
			{Tenant: "globex", OrderID: "ord_9f2", ChargeID: "ch_456", AmountCents: 7000, Currency: "usd"},
		}},
		Tokens: []store.SeedToken{
			{Tenant: "acme", User: "support-bot", Scopes: all, Token: tokenAcme},
			{Tenant: "acme", User: "auditor", Scopes: []string{"operations:read"}, Token: tokenAcmeRead},
			{Tenant: "globex", User: "support-bot", Scopes: all, Token: tokenGlobex},
		},
	}
}

// setup runs the api in process on a fresh database reached through dbURL
// (by default the test database itself).
func setup(t *testing.T, viaProxy func(dbURL string) string) *testBundle {
	t.Helper()
	ctx := context.Background()
	dbURL, seedPool := pgtest.NewDB(t)
	_, err := pgengine.New(seedPool).Seed(ctx, seedFile())
	require.NoError(t, err)
	if viaProxy != nil {
		dbURL = viaProxy(dbURL)
	}
	pool, err := pgengine.OpenPostgres(ctx, dbURL, 20, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	a, err := app.NewAPI(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil)
	require.NoError(t, err)
	return &testBundle{url: serveAPI(ctx, t, a), pool: seedPool, api: a}
}

// serveAPI runs a until the test ends and serves its handler on a test
// server, whose URL it returns.
func serveAPI(ctx context.Context, t *testing.T, a *app.API) string {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.Run(runCtx) }()
	srv := httptest.NewServer(a.Handler)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return srv.URL
}

// startHTTP serves the api on a test HTTP server.
func startHTTP(t *testing.T, a *app.API) string {
	t.Helper()
	srv := httptest.NewServer(a.Handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func connect(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "idemgate-test", Version: "1"}, nil)
	session, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   url + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token: token}, Timeout: 30 * time.Second},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })
	return session
}

// result is a tool result's structured content, decoded.
type result struct {
	Outcome      vocab.Outcome    `json:"outcome"`
	Replayed     bool             `json:"replayed"`
	RetryAfterMS int64            `json:"retry_after_ms"`
	Operation    *vocab.Operation `json:"operation"`
	Error        *struct {
		Code    vocab.Code `json:"code"`
		Message string     `json:"message"`
		Field   string     `json:"field"`
		Fields  []string   `json:"fields"`
	} `json:"error"`
}

func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (*result, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	require.Len(t, res.Content, 1)
	var out result
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out))
	if res.IsError {
		require.NotNil(t, out.Error, "a tool error carries a code")
	}
	return &out, res.IsError
}

func refund(key string, amount int) map[string]any {
	return map[string]any{"order_id": "ord_9f2", "amount_cents": amount, "idempotency_key": key}
}

func auditDecisions(t *testing.T, pool *pgxpool.Pool, tenant, tool string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT decision || ':' || reason FROM audit_events WHERE tenant_id = $1 AND tool = $2 ORDER BY id`, tenant, tool)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// complete plays the worker's part: lease the claim and store a result.
func complete(t *testing.T, b *testBundle, op *vocab.Operation) {
	t.Helper()
	completeIn(t, b.api.Gate.Store(), op)
}

// completeIn is complete on the gate's store s.
func completeIn(t *testing.T, s core.Store, op *vocab.Operation) {
	t.Helper()
	ctx := context.Background()
	c, err := s.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: op.Tool, IdempotencyKey: op.IdempotencyKey})
	require.NoError(t, err)
	c, err = s.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	_, err = s.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: c.ID, Epoch: c.Epoch, Result: json.RawMessage(`{"refund_id":"re_test_1","status":"succeeded"}`)})
	require.NoError(t, err)
}

func TestMCPToolsAreListedWithSchemasAndAnnotations(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := connect(t, b.url, tokenAcme)
	res, err := s.ListTools(context.Background(), nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		byName[tool.Name] = tool
	}
	require.Len(t, byName, 7)
	for name, tool := range byName {
		require.NotNil(t, tool.OutputSchema, "%s has an outputSchema", name)
	}
	// The tool list never changes: no listChanged promise.
	caps := s.InitializeResult().Capabilities
	require.NotNil(t, caps.Tools)
	require.False(t, caps.Tools.ListChanged)
	for _, name := range []string{"refund_order", "apply_credit", "reset_seat", "send_password_reset"} {
		tool := byName[name]
		require.NotNil(t, tool, name)
		require.True(t, tool.Annotations.IdempotentHint, name)
		require.True(t, *tool.Annotations.DestructiveHint, name)
		require.False(t, tool.Annotations.ReadOnlyHint, name)
		schema, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		var sch struct {
			Required             []string                  `json:"required"`
			AdditionalProperties bool                      `json:"additionalProperties"`
			Properties           map[string]map[string]any `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(schema, &sch))
		require.Contains(t, sch.Required, "idempotency_key", name)
		require.False(t, sch.AdditionalProperties, name)
		require.Equal(t, "^[A-Za-z0-9._:-]+$", sch.Properties["idempotency_key"]["pattern"], name)
	}
	for _, name := range []string{"get_operation", "list_operations", "get_order"} {
		require.True(t, byName[name].Annotations.ReadOnlyHint, name)
	}
}

func TestMCPRefundAcceptedThenReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := connect(t, b.url, tokenAcme)

	first, isErr := callTool(t, s, "refund_order", refund("refund-9f2-0001", 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeAccepted, first.Outcome)
	require.NotZero(t, first.Operation.JobID)
	require.Equal(t, vocab.StatusQueued, first.Operation.Status)
	require.Positive(t, first.RetryAfterMS)

	// While queued, a retry gets the handle, not a second run.
	again, isErr := callTool(t, s, "refund_order", refund("refund-9f2-0001", 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeInFlight, again.Outcome)
	require.Equal(t, first.Operation.OperationID, again.Operation.OperationID)

	complete(t, b, first.Operation)
	replay, isErr := callTool(t, s, "refund_order", refund("refund-9f2-0001", 1500))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeReplayed, replay.Outcome)
	require.True(t, replay.Replayed)
	require.Equal(t, first.Operation.OperationID, replay.Operation.OperationID)
	require.Equal(t, first.Operation.JobID, replay.Operation.JobID)
	require.JSONEq(t, `{"refund_id":"re_test_1","status":"succeeded"}`, string(replay.Operation.Result))

	// get_operation by key shows the same.
	op, isErr := callTool(t, s, "get_operation", map[string]any{"tool": "refund_order", "idempotency_key": "refund-9f2-0001"})
	require.False(t, isErr)
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM river_job`))
	_ = op
	require.Equal(t, []string{"accepted:", "in_flight:", "replayed:"}, auditDecisions(t, b.pool, "acme", "refund_order"))
}

func TestMCPRejectionsCarryCodesAndOneAuditRow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := connect(t, b.url, tokenAcme)
	_, isErr := callTool(t, s, "refund_order", refund("refund-conflict-1", 1500))
	require.False(t, isErr)

	cases := []struct {
		name  string
		args  map[string]any
		code  vocab.Code
		field string
	}{
		{"Conflict", refund("refund-conflict-1", 2500), vocab.CodeKeyReuseDifferentArgs, "idempotency_key"},
		{"MissingKey", map[string]any{"order_id": "ord_9f2", "amount_cents": 100}, vocab.CodeIdempotencyKeyRequired, "idempotency_key"},
		{"EmptyKey", refund("   ", 100), vocab.CodeIdempotencyKeyRequired, "idempotency_key"},
		{"MalformedKey", refund("bad key!", 100), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"ShortKey", refund("short", 100), vocab.CodeInvalidIdempotencyKey, "idempotency_key"},
		{"UnknownArgument", map[string]any{"order_id": "ord_9f2", "amount_cents": 100, "idempotency_key": "refund-unknown-1", "tenant_id": "globex"}, vocab.CodeInvalidArgument, "tenant_id"},
		{"NegativeAmount", refund("refund-negative-1", -5), vocab.CodeInvalidArgument, "amount_cents"},
		{"FractionalAmount", refund("refund-fraction-1", 0) /* replaced below */, vocab.CodeInvalidArgument, "amount_cents"},
		{"MissingOrder", map[string]any{"amount_cents": 100, "idempotency_key": "refund-missing-1"}, vocab.CodeInvalidArgument, "order_id"},
	}
	cases[7].args["amount_cents"] = 10.5
	for _, tc := range cases {
		res, isErr := callTool(t, s, "refund_order", tc.args)
		require.True(t, isErr, tc.name)
		require.Equal(t, tc.code, res.Error.Code, tc.name)
		require.Equal(t, tc.field, res.Error.Field, tc.name)
		if tc.code == vocab.CodeKeyReuseDifferentArgs {
			require.Equal(t, []string{"amount_cents"}, res.Error.Fields)
		}
	}
	// One claim; every rejection but the conflict is a denied row.
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE decision = 'conflict'`))
	require.Equal(t, len(cases)-1, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE decision = 'denied'`))
}

func TestMCPAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	// No token: 401 before MCP, no audit row (there is no tenant).
	resp, err := http.Post(b.url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")

	client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	_, err = client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: b.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token: "idg_not_a_real_token"}},
	}, nil)
	require.Error(t, err)

	// A token without the scope: forbidden, with one denied row.
	s := connect(t, b.url, tokenAcmeRead)
	res, isErr := callTool(t, s, "refund_order", refund("refund-forbidden-1", 100))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeForbidden, res.Error.Code)
	rows := auditDecisions(t, b.pool, "acme", "refund_order")
	require.Len(t, rows, 1)
	require.True(t, strings.HasPrefix(rows[0], "denied:forbidden"), rows[0])
	require.Equal(t, 0, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims`))
}

func TestMCPConcurrentIdenticalCallsMakeOneClaimAndJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := connect(t, b.url, tokenAcme)
	const n = 200
	var (
		wg    sync.WaitGroup
		jobs  = make([]int64, n)
		ops   = make([]string, n)
		errs  = make([]error, n)
		start = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// As an agent does: "unavailable" (the database did not answer
			// within its timeout, as on a loaded machine) is retried with
			// the same key.
			for attempt := 0; ; attempt++ {
				res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund_order", Arguments: refund("storm-9f2-000001", 1500)})
				if err != nil {
					errs[i] = err
					return
				}
				var out result
				if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &out); err != nil {
					errs[i] = err
					return
				}
				if res.IsError && out.Error.Code == vocab.CodeUnavailable && attempt < 20 {
					continue
				}
				if res.IsError {
					errs[i] = fmt.Errorf("tool error %s: %s", out.Error.Code, out.Error.Message)
					return
				}
				jobs[i], ops[i] = out.Operation.JobID, out.Operation.OperationID
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "call %d", i)
		require.Equal(t, jobs[0], jobs[i])
		require.Equal(t, ops[0], ops[i])
	}
	require.NotZero(t, jobs[0])
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM idempotency_claims`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM river_job`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE decision = 'accepted'`))
}

func TestTenantsCannotSeeOrReplayEachOther(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	acme := connect(t, b.url, tokenAcme)
	globex := connect(t, b.url, tokenGlobex)

	a, isErr := callTool(t, acme, "refund_order", refund("shared-key-0001", 1500))
	require.False(t, isErr)
	complete(t, b, a.Operation)

	// Globex cannot read acme's operation by the same key string.
	res, isErr := callTool(t, globex, "get_operation", map[string]any{"tool": "refund_order", "idempotency_key": "shared-key-0001"})
	require.True(t, isErr)
	require.Equal(t, vocab.CodeNotFound, res.Error.Code)

	// Nor replay it, nor conflict with it: its call is its own.
	g, isErr := callTool(t, globex, "refund_order", refund("shared-key-0001", 900))
	require.False(t, isErr)
	require.Equal(t, vocab.OutcomeAccepted, g.Outcome)
	require.NotEqual(t, a.Operation.OperationID, g.Operation.OperationID)
	require.Nil(t, g.Operation.Result)

	// REST likewise.
	req, _ := http.NewRequest(http.MethodGet, b.url+"/v1/operations/refund_order/shared-key-0001", nil)
	req.Header.Set("Authorization", "Bearer "+tokenGlobex)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var got vocab.Operation
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, g.Operation.OperationID, got.OperationID)

	order, isErr := callTool(t, globex, "get_order", map[string]any{"order_id": "ord_9f2", "idempotency_key": "ignored-key-1"})
	require.False(t, isErr)
	_ = order
}

func rest(t *testing.T, method, url, token, key string, body any) (*http.Response, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(mustJSON(t, body))
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp, out
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestRESTFollowsIdempotencyKeyDraft(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	u := b.url + "/v1/tools/refund_order"
	body := map[string]any{"order_id": "ord_9f2", "amount_cents": 1200}

	resp, out := rest(t, http.MethodPost, u, tokenAcme, "", body)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Equal(t, "idempotency_key_required", out["error"].(map[string]any)["code"])

	resp, out = rest(t, http.MethodPost, u, tokenAcme, `"rest-key-00001"`, body) // structured-field string
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Equal(t, "/v1/operations/refund_order/rest-key-00001", resp.Header.Get("Location"))
	require.Equal(t, "accepted", out["outcome"])

	resp, _ = rest(t, http.MethodPost, u, tokenAcme, "rest-key-00001", body) // bare
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	resp, out = rest(t, http.MethodPost, u, tokenAcme, "rest-key-00001", map[string]any{"order_id": "ord_9f2", "amount_cents": 1300})
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Equal(t, "idempotency_key_reuse_with_different_args", out["error"].(map[string]any)["code"])

	op := &vocab.Operation{Tool: "refund_order", IdempotencyKey: "rest-key-00001"}
	complete(t, b, op)
	resp, out = rest(t, http.MethodPost, u, tokenAcme, "rest-key-00001", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "replayed", out["outcome"])

	resp, out = rest(t, http.MethodGet, b.url+"/v1/operations/refund_order/rest-key-00001", tokenAcme, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "succeeded", out["status"])

	resp, _ = rest(t, http.MethodPost, u, tokenAcme, "bad key!", body)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = rest(t, http.MethodPost, u, tokenAcmeRead, "rest-key-00002", body)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// proxy is a TCP proxy to Postgres that the test can cut and restore.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

// setCut drops every connection and refuses new ones, or lets them through.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

func TestUnreachableDatabaseAnswersUnavailableAndRecovers(t *testing.T) {
	t.Parallel()
	var p *proxy
	b := setup(t, func(dbURL string) string {
		// Whatever server TEST_DATABASE_URL names, reached through the proxy.
		u, err := url.Parse(dbURL)
		require.NoError(t, err)
		port := u.Port()
		if port == "" {
			port = "5432"
		}
		p = newProxy(t, net.JoinHostPort(u.Hostname(), port))
		u.Host = p.ln.Addr().String()
		return u.String()
	})
	s := connect(t, b.url, tokenAcme)
	res, isErr := callTool(t, s, "refund_order", refund("before-cut-0001", 100))
	require.False(t, isErr, "%+v", res.Error)

	p.setCut(true)
	for i := range 3 {
		start := time.Now()
		res, isErr = callTool(t, s, "refund_order", refund(fmt.Sprintf("during-cut-%04d", i), 100))
		require.True(t, isErr)
		require.Equal(t, vocab.CodeUnavailable, res.Error.Code)
		// Bounded by the gate's database timeout, not hanging on the pool;
		// the bound is loose so that a busy machine cannot miss it.
		require.Less(t, time.Since(start), 30*time.Second)
	}
	start := time.Now()
	resp, _ := rest(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, "during-cut-rest1", map[string]any{"order_id": "ord_9f2", "amount_cents": 100})
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Less(t, time.Since(start), 30*time.Second)

	p.setCut(false)
	require.Eventually(t, func() bool {
		res, isErr := callTool(t, s, "refund_order", refund("during-cut-0000", 100))
		return !isErr && res.Outcome == vocab.OutcomeAccepted
	}, 60*time.Second, 200*time.Millisecond)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
