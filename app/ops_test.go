package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/app"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/ops"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/pgstore"
)

const (
	tokenAcmeOps = "idg_test_acme_ops_admin"
	// tokenOperator is an ops:admin token of the deployment's operator
	// tenant: the only bearer tokens River UI accepts.
	tokenOperator = "idg_test_operator_ops_admin"
	opsUser       = "ops-oncall"
	opsPassword   = "correct horse battery staple"
)

// newOps assembles the operators' parts on the bundle's database, as
// idemctl does.
func newOps(t *testing.T, pool *pgxpool.Pool) *app.Ops {
	t.Helper()
	cfg := config.Defaults()
	cfg.DatabaseURL = pool.Config().ConnString()
	o, err := app.NewOps(cfg, pool, nil)
	require.NoError(t, err)
	return o
}

// snapshot is the claims, the claim jobs and the audit row count: the
// reaper's and pruner's periodic jobs (queue maintenance) come and go on
// their own schedule and are left out.
func snapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT coalesce((SELECT json_agg(c ORDER BY id)::text FROM idempotency_claims c), '')
		    || coalesce((SELECT json_agg(json_build_array(id, state, attempt, max_attempts) ORDER BY id)::text FROM river_job WHERE queue <> 'maintenance'), '')
		    || (SELECT count(*)::text FROM audit_events)`).Scan(&s))
	return s
}

// TestOpsRedriveDeclinedRefundEndsInOneRefund re-drives, through the code
// path idemctl uses, a refund whose card was declined once the charge is
// fixed: the next generation's downstream key is used, the operation ends
// succeeded with exactly one refund at the test Stripe, a dry run changes
// nothing, and re-driving the succeeded operation is refused.
func TestOpsRedriveDeclinedRefundEndsInOneRefund(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, 10*time.Second)
	ctx := context.Background()
	const key = "refund-redrive-01"
	res, isErr := callTool(t, b.session, "refund_order", map[string]any{"order_id": "ord_declined", "amount_cents": 1000, "idempotency_key": key})
	require.True(t, isErr)
	require.Equal(t, domain.CodeCardDeclined, res.Error.Code)
	require.Equal(t, domain.StatusFailed, res.Operation.Status)
	opID, jobID := res.Operation.OperationID, res.Operation.JobID
	require.Eventually(t, func() bool {
		return countRows(t, b.pool, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'`, jobID) == 1
	}, 60*time.Second, 50*time.Millisecond)
	require.Empty(t, b.stripe.Refunds())

	// The charge is fixed; an operator re-drives.
	b.stripe.ClearChargeError("ch_declined")
	o := newOps(t, b.pool)
	params := &ops.RedriveParams{TenantID: "acme", Tool: "refund_order", Key: key, Operator: "alice", Reason: "card fixed", DryRun: true}

	before := snapshot(t, b.pool)
	line, err := o.Redriver.Redrive(ctx, params)
	require.NoError(t, err)
	require.Equal(t, &ops.RedriveLine{
		OperationID: opID, Tool: "refund_order", Key: key, Action: ops.ActionWouldRedrive, Status: domain.StatusFailed,
		NextGeneration: true, FreshJob: true, Reason: "card fixed",
	}, line, "the worker cancelled the failed job: a fresh one would run it")
	require.Equal(t, before, snapshot(t, b.pool), "a dry run changes nothing")

	params.DryRun = false
	line, err = o.Redriver.Redrive(ctx, params)
	require.NoError(t, err)
	require.Equal(t, ops.ActionRedriven, line.Action)
	require.True(t, line.NextGeneration, "card_declined: nothing happened, so the next generation")
	require.True(t, line.FreshJob, "a fresh job, never the cancelled one a late cancellation could reach")
	require.NotEqual(t, jobID, line.JobID)
	nextKey := "idg_" + opID + "_1"
	require.Equal(t, nextKey, line.DownstreamKey)

	op := awaitStatus(t, b.session, "refund_order", key, domain.StatusSucceeded)
	require.Equal(t, opID, op.OperationID)
	require.Equal(t, map[string]int{nextKey: 1}, b.stripe.RefundsByKey(), "one refund, with the new downstream key")
	require.Len(t, b.stripe.Refunds(), 1)
	require.Equal(t, int64(1000), b.stripe.RefundedAmount("ch_declined"))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM refunds`))
	require.Equal(t, 1000, countRows(t, b.pool, `SELECT refunded_cents FROM orders WHERE tenant_id = 'acme' AND order_id = 'ord_declined'`))

	// Re-driving the succeeded operation is refused, and changes nothing.
	before = snapshot(t, b.pool)
	line, err = o.Redriver.Redrive(ctx, params)
	require.ErrorIs(t, err, gate.ErrRedriveSucceeded)
	require.True(t, ops.Refused(err))
	require.Equal(t, ops.ActionRefused, line.Action)
	require.Equal(t, domain.StatusSucceeded, line.Status)
	require.Equal(t, before, snapshot(t, b.pool))
	require.Len(t, b.stripe.Refunds(), 1)

	// The audit trail tells the story, the operator named.
	d, err := ops.GetOperation(ctx, o.Gate.Store(), "acme", "refund_order", key)
	require.NoError(t, err)
	var decisions []string
	for _, e := range d.Audit {
		decisions = append(decisions, string(e.Decision))
		if e.Decision == domain.DecisionRedriven {
			require.Equal(t, "alice", e.UserID)
			require.Contains(t, e.Reason, "card fixed")
			require.Contains(t, e.Reason, nextKey)
		}
	}
	require.Equal(t, []string{"accepted", "started", "failed", "redriven", "started", "succeeded"}, decisions)
	require.Equal(t, 1, d.Generation)
	require.Equal(t, nextKey, d.DownstreamKey)
}

type opsBundle struct {
	url  string
	pool *pgxpool.Pool
	api  *app.API
	logs *logtest.Buffer
}

// setupOpsAPI runs the api in process with the operator's Basic
// credentials in env (nil: none), its logs captured.
func setupOpsAPI(t *testing.T, env map[string]string) *opsBundle {
	t.Helper()
	ctx := context.Background()
	dbURL, pool := pgtest.NewDB(t)
	seed := seedFile()
	seed.Tokens = append(seed.Tokens,
		store.SeedToken{Tenant: "acme", User: "oncall", Scopes: []string{"ops:admin"}, Token: tokenAcmeOps},
		store.SeedToken{Tenant: config.DefaultOperatorTenant, User: "sre", Scopes: []string{"ops:admin"}, Token: tokenOperator})
	_, err := pgstore.New(pool).Seed(ctx, seed)
	require.NoError(t, err)
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	logger, logs := logtest.New()
	cfg.OpsUser, cfg.OpsPassword = env[ops.EnvOpsUser], env[ops.EnvOpsPassword]
	a, err := app.NewAPIWithOptions(cfg, pool, logger, nil)
	require.NoError(t, err)
	return &opsBundle{url: serveAPI(ctx, t, a), pool: pool, api: a, logs: logs}
}

var opsEnv = map[string]string{ops.EnvOpsUser: opsUser, ops.EnvOpsPassword: opsPassword}

type opsAuth func(r *http.Request)

func basicAuth(user, password string) opsAuth {
	return func(r *http.Request) { r.SetBasicAuth(user, password) }
}

func bearerAuth(token string) opsAuth {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

// opsDo sends a request without following redirects.
func opsDo(t *testing.T, method, url string, auth opsAuth, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if auth != nil {
		auth(req)
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestOpsRiverUIAuthentication(t *testing.T) {
	t.Parallel()
	b := setupOpsAPI(t, opsEnv)

	// The subtests run in parallel inside this group, and the checks of the
	// logs below run after all of them.
	t.Run("Requests", func(t *testing.T) { opsAuthCases(t, b) })

	// A browser holding the Basic credentials cannot be made to retry,
	// cancel or delete jobs by another site.
	resp, body := opsDo(t, http.MethodPost, b.url+ops.RiverUIPath+"/api/jobs/retry", basicAuth(opsUser, opsPassword),
		`{"ids":["1"]}`, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, body)

	// The api's own routes are unchanged.
	resp, _ = opsDo(t, http.MethodGet, b.url+"/healthz", nil, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.Contains(t, b.logs.String(), "basic credentials refused")
	require.NotContains(t, b.logs.String(), opsPassword, "credentials are never logged")
	require.NotContains(t, b.logs.String(), tokenAcmeOps)
}

func opsAuthCases(t *testing.T, b *opsBundle) {
	ui := b.url + ops.RiverUIPath + "/"
	jobsAPI := b.url + ops.RiverUIPath + "/api/jobs?state=cancelled"
	for _, tt := range []struct {
		name       string
		url        string
		auth       opsAuth
		wantStatus int
		wantBasic  bool
	}{
		{"NoCredentials", ui, nil, http.StatusUnauthorized, true},
		{"NoCredentialsAPI", jobsAPI, nil, http.StatusUnauthorized, true},
		{"NoCredentialsBareRoot", b.url + ops.RiverUIPath, nil, http.StatusUnauthorized, true},
		{"WrongPassword", ui, basicAuth(opsUser, opsPassword+"x"), http.StatusUnauthorized, true},
		{"WrongUser", ui, basicAuth("root", opsPassword), http.StatusUnauthorized, true},
		{"EmptyBasic", ui, basicAuth("", ""), http.StatusUnauthorized, true},
		{"UnknownScheme", ui, func(r *http.Request) { r.Header.Set("Authorization", "Digest x") }, http.StatusUnauthorized, true},
		{"UnknownToken", ui, bearerAuth("idg_not_a_token"), http.StatusUnauthorized, false},
		{"TokenWithoutOpsAdmin", ui, bearerAuth(tokenAcme), http.StatusForbidden, false},
		{"TokenWithoutOpsAdminAPI", jobsAPI, bearerAuth(tokenAcme), http.StatusForbidden, false},
		{"Basic", ui, basicAuth(opsUser, opsPassword), http.StatusOK, false},
		{"BasicAPI", jobsAPI, basicAuth(opsUser, opsPassword), http.StatusOK, false},
		// A tenant's ops:admin token may not see every tenant's jobs.
		{"TenantOpsAdminToken", ui, bearerAuth(tokenAcmeOps), http.StatusForbidden, false},
		{"TenantOpsAdminTokenAPI", jobsAPI, bearerAuth(tokenAcmeOps), http.StatusForbidden, false},
		{"OperatorToken", ui, bearerAuth(tokenOperator), http.StatusOK, false},
		{"OperatorTokenAPI", jobsAPI, bearerAuth(tokenOperator), http.StatusOK, false},
		{"BareRootRedirects", b.url + ops.RiverUIPath, basicAuth(opsUser, opsPassword), http.StatusMovedPermanently, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body := opsDo(t, http.MethodGet, tt.url, tt.auth, "", nil)
			require.Equal(t, tt.wantStatus, resp.StatusCode, body)
			if tt.wantBasic {
				require.Equal(t, `Basic realm="idemgate ops"`, resp.Header.Get("WWW-Authenticate"))
			}
			require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
			if resp.StatusCode == http.StatusOK && tt.url == ui {
				require.Contains(t, body, "<html")
				require.Contains(t, body, ops.RiverUIPath+"/", "River UI knows its prefix")
			}
			if resp.StatusCode == http.StatusOK && tt.url == jobsAPI {
				require.JSONEq(t, `{"data":[]}`, body)
			}
		})
	}
}

func TestOpsBasicDisabledWithoutEnvironment(t *testing.T) {
	t.Parallel()
	b := setupOpsAPI(t, nil)
	ui := b.url + ops.RiverUIPath + "/"
	resp, _ := opsDo(t, http.MethodGet, ui, basicAuth(opsUser, opsPassword), "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, `Bearer realm="idemgate ops"`, resp.Header.Get("WWW-Authenticate"))
	resp, _ = opsDo(t, http.MethodGet, ui, bearerAuth(tokenOperator), "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestOpsBasicCredentialsMisconfigured(t *testing.T) {
	t.Parallel()
	dbURL, pool := pgtest.NewDB(t)
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"UserOnly", map[string]string{ops.EnvOpsUser: opsUser}, "IDEMGATE_OPS_PASSWORD is required when IDEMGATE_OPS_USER is set"},
		{"PasswordOnly", map[string]string{ops.EnvOpsPassword: opsPassword}, "IDEMGATE_OPS_USER is required when IDEMGATE_OPS_PASSWORD is set"},
		{"ShortPassword", map[string]string{ops.EnvOpsUser: opsUser, ops.EnvOpsPassword: "hunter2"}, "IDEMGATE_OPS_PASSWORD: must be at least 12 characters"},
		{"ColonInUser", map[string]string{ops.EnvOpsUser: "a:b", ops.EnvOpsPassword: opsPassword}, "IDEMGATE_OPS_USER: must be"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := *cfg
			cfg.OpsUser, cfg.OpsPassword = tt.env[ops.EnvOpsUser], tt.env[ops.EnvOpsPassword]
			_, err := app.NewAPIWithOptions(&cfg, pool, nil, nil)
			require.ErrorContains(t, err, tt.wantErr)
			if p := tt.env[ops.EnvOpsPassword]; p != "" {
				require.NotContains(t, err.Error(), p)
			}
		})
	}
}

// failClaim plays a worker that failed the claim definitively.
func failClaim(t *testing.T, s gate.Store, key string, code domain.Code) *gate.Claim {
	t.Helper()
	ctx := context.Background()
	c, err := s.ClaimGetByKey(ctx, &gate.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
	require.NoError(t, err)
	c, err = s.ClaimLease(ctx, &gate.ClaimLeaseParams{ID: c.ID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	c, err = s.ClaimFail(ctx, &gate.ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: domain.ErrorInfo{Code: code, Message: string(code)}})
	require.NoError(t, err)
	return c
}

func TestOpsRedriveRoute(t *testing.T) {
	t.Parallel()
	b := setupOpsAPI(t, opsEnv)
	s := b.api.Gate.Store()
	session := connect(t, b.url, tokenAcme)
	for _, key := range []string{"route-declined-1", "route-unknown-01", "route-success-01"} {
		_, isErr := callTool(t, session, "refund_order", refund(key, 100))
		require.False(t, isErr)
	}
	declined := failClaim(t, s, "route-declined-1", domain.CodeCardDeclined)
	unknown := failClaim(t, s, "route-unknown-01", domain.CodeOutcomeUnknown)
	complete(t, &testBundle{api: b.api}, &domain.Operation{Tool: "refund_order", IdempotencyKey: "route-success-01"})
	route := b.url + ops.RedrivePath

	decode := func(body string) ops.RedriveLine {
		var l ops.RedriveLine
		require.NoError(t, json.Unmarshal([]byte(body), &l), body)
		return l
	}

	// Dry run with the tenant's ops:admin token: nothing changes.
	before := snapshot(t, b.pool)
	resp, body := opsDo(t, http.MethodPost, route, bearerAuth(tokenAcmeOps),
		`{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"card fixed","dry_run":true}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	line := decode(body)
	require.Equal(t, ops.ActionWouldRedrive, line.Action)
	require.True(t, line.NextGeneration)
	require.Equal(t, before, snapshot(t, b.pool))

	resp, body = opsDo(t, http.MethodPost, route, bearerAuth(tokenAcmeOps),
		`{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"card fixed"}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	line = decode(body)
	require.Equal(t, ops.ActionRedriven, line.Action)
	require.Equal(t, "idg_"+declined.OperationID+"_1", line.DownstreamKey)
	events, err := s.AuditListByKey(context.Background(), &gate.AuditListByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "route-declined-1"})
	require.NoError(t, err)
	require.Equal(t, domain.DecisionRedriven, events[len(events)-1].Decision)
	require.Equal(t, "oncall", events[len(events)-1].UserID, "the token's user is the operator")

	// Basic credentials name the tenant; the operator is the Basic user.
	resp, body = opsDo(t, http.MethodPost, route, basicAuth(opsUser, opsPassword),
		`{"tenant":"acme","tool":"refund_order","idempotency_key":"route-unknown-01","reason":"stripe outage over"}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	line = decode(body)
	require.False(t, line.NextGeneration, "an unknown outcome keeps the downstream key")
	require.Equal(t, "idg_"+unknown.OperationID+"_0", line.DownstreamKey)
	events, err = s.AuditListByKey(context.Background(), &gate.AuditListByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "route-unknown-01"})
	require.NoError(t, err)
	require.Equal(t, opsUser, events[len(events)-1].UserID)

	// Refused: succeeded.
	before = snapshot(t, b.pool)
	resp, body = opsDo(t, http.MethodPost, route, basicAuth(opsUser, opsPassword),
		`{"tenant":"acme","tool":"refund_order","idempotency_key":"route-success-01","reason":"again"}`, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	line = decode(body)
	require.Equal(t, ops.ActionRefused, line.Action)
	require.Equal(t, domain.StatusSucceeded, line.Status)
	require.Equal(t, before, snapshot(t, b.pool))

	for _, tt := range []struct {
		name       string
		auth       opsAuth
		body       string
		wantStatus int
		wantCode   domain.Code
	}{
		{"OtherTenantsOperation", bearerAuth(tokenAcmeOps), `{"tenant":"globex","tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusForbidden, domain.CodeForbidden},
		{"BasicWithoutTenant", basicAuth(opsUser, opsPassword), `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusBadRequest, domain.CodeInvalidArgument},
		{"NoReason", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"route-declined-1"}`, http.StatusBadRequest, domain.CodeInvalidArgument},
		{"UnknownField", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"k","reason":"r","operator":"mallory"}`, http.StatusBadRequest, domain.CodeInvalidArgument},
		{"Unknown", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"no-such-key-01","reason":"r"}`, http.StatusNotFound, domain.CodeNotFound},
		{"NoOpsAdmin", bearerAuth(tokenAcme), `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusForbidden, domain.CodeForbidden},
		{"NoCredentials", nil, `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusUnauthorized, domain.CodeUnauthenticated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := opsDo(t, http.MethodPost, route, tt.auth, tt.body, nil)
			require.Equal(t, tt.wantStatus, resp.StatusCode, body)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var p struct {
				Error struct {
					Code domain.Code `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &p))
			require.Equal(t, tt.wantCode, p.Error.Code)
		})
	}
	require.NotContains(t, b.logs.String(), opsPassword)
}
