package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/enginetest"
	"github.com/idemgate/idemgate/internal/logtest"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/jobs"
)

// The operator tests run on both engines: on Postgres the api (and the
// worker) as separate parts, on SQLite the embedded process.

const (
	tokenAcmeOps = "idg_test_acme_ops_admin"
	// tokenOperator is an ops:admin token of the deployment's operator
	// tenant: the only bearer tokens River UI accepts.
	tokenOperator = "idg_test_operator_ops_admin"
	opsUser       = "ops-oncall"
	opsPassword   = "correct horse battery staple"
)

var opsEnv = map[string]string{ops.EnvOpsUser: opsUser, ops.EnvOpsPassword: opsPassword}

// opsConfig is the api's configuration on d with the operator's Basic
// credentials in env (nil: none).
func opsConfig(d *enginetest.DB, env map[string]string) *config.Config {
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = d.URL
	cfg.Wait = 0
	cfg.OpsUser, cfg.OpsPassword = env[ops.EnvOpsUser], env[ops.EnvOpsPassword]
	// The embedded process builds the worker's tools, which need these.
	cfg.StripeAPIKey = stripeKey
	cfg.Secret = strings.Repeat("s", 32)
	return cfg
}

// newOps assembles the operators' parts as idemctl does: on SQLite on a
// connection of its own, as a second process.
func newOps(t *testing.T, d *enginetest.DB) *app.Ops {
	t.Helper()
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	cfg.DatabaseURL = d.URL
	var o *app.Ops
	var err error
	if d.Pool != nil {
		o, err = app.NewOps(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil)
	} else {
		o, err = app.NewOps(cfg, sqliteengine.NewDriver(sqlitetest.Open(t, d.Path)), nil)
	}
	require.NoError(t, err)
	return o
}

// snapshot is every claim row, every claim job's state and the count of
// audit rows, for "changes nothing". The reaper's and pruner's jobs are left
// out: they run on their own schedule.
func snapshot(t *testing.T, d *enginetest.DB) []string {
	t.Helper()
	rows := d.Rows(t, `SELECT * FROM idempotency_claims ORDER BY id`)
	rows = append(rows, d.Rows(t, `SELECT id, CAST(state AS TEXT), attempt, max_attempts FROM river_job
		WHERE queue <> '`+jobs.MaintenanceQueue+`' ORDER BY id`)...)
	return append(rows, strconv.Itoa(d.Count(t, `SELECT count(*) FROM audit_events`)))
}

// plusAudit is snap with n more audit rows: a refusal changes nothing but
// its audit row.
func plusAudit(snap []string, n int) []string {
	out := slices.Clone(snap)
	count, err := strconv.Atoi(out[len(out)-1])
	if err != nil {
		panic(err)
	}
	out[len(out)-1] = strconv.Itoa(count + n)
	return out
}

type opsBundle struct {
	url  string
	db   *enginetest.DB
	gate *core.Gate
	logs *logtest.Buffer
}

// setupOpsAPI runs the api in process on a fresh database of engine, with
// the operator's Basic credentials in env (nil: none) and its logs
// captured. No worker runs: the tests play its part.
func setupOpsAPI(t *testing.T, engine string, env map[string]string) *opsBundle {
	t.Helper()
	d := enginetest.New(t, engine, nil)
	seed := seedFile()
	seed.Tokens = append(seed.Tokens,
		store.SeedToken{Tenant: "acme", User: "oncall", Scopes: []string{"ops:admin"}, Token: tokenAcmeOps},
		store.SeedToken{Tenant: config.DefaultOperatorTenant, User: "sre", Scopes: []string{"ops:admin"}, Token: tokenOperator})
	_, err := d.Store.Seed(context.Background(), seed)
	require.NoError(t, err)
	logger, logs := logtest.New()
	url, g := serveOpsAPI(t, opsConfig(d, env), d, logger)
	return &opsBundle{url: url, db: d, gate: g, logs: logs}
}

// serveOpsAPI serves the api on d until the test ends, River UI's
// background services started; on SQLite, the embedded process without its
// worker.
func serveOpsAPI(t *testing.T, cfg *config.Config, d *enginetest.DB, logger *slog.Logger) (string, *core.Gate) {
	t.Helper()
	if d.Pool != nil {
		a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), logger, nil)
		require.NoError(t, err)
		return serveAPI(context.Background(), t, a), a.Gate
	}
	e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(d.SQL), logger, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, e.Ops.Start(ctx))
	srv := httptest.NewServer(e.Handler)
	t.Cleanup(func() { srv.Close(); cancel() })
	return srv.URL, e.Gate
}

// opsWorker is the api and the worker on one engine, with the test Stripe
// (whose charge ch_declined declines refunds) and an MCP session of acme.
type opsWorker struct {
	url     string
	db      *enginetest.DB
	stripe  *stripetest.Server
	session *mcp.ClientSession
}

func setupOpsWorker(t *testing.T, engine string) *opsWorker {
	t.Helper()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_declined", 5000, "usd")
	stripeSrv.SetChargeError("ch_declined", http.StatusPaymentRequired, "card_error", "card_declined")
	d := enginetest.New(t, engine, &enginetest.Options{MaxConns: 30})
	seed := seedFile()
	seed.Rows.(*tools.Seed).Orders = append(seed.Rows.(*tools.Seed).Orders, tools.SeedOrder{Tenant: "acme", OrderID: "ord_declined", ChargeID: "ch_declined", AmountCents: 5000, Currency: "usd"})
	_, err := d.Store.Seed(context.Background(), seed)
	require.NoError(t, err)
	cfg := opsConfig(d, opsEnv)
	cfg.Wait = 10 * time.Second
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.InflightTimeout = 10 * time.Second
	url := runAPIAndWorker(t, cfg, d)
	return &opsWorker{url: url, db: d, stripe: stripeSrv, session: connect(t, url, tokenAcme)}
}

// runAPIAndWorker runs the api and the worker on d until the test ends
// and returns the api's URL: two parts on Postgres, the embedded process on
// SQLite.
func runAPIAndWorker(t *testing.T, cfg *config.Config, d *enginetest.DB) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	var handler http.Handler
	if d.Pool != nil {
		a, err := app.NewAPI(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil)
		require.NoError(t, err)
		w, err := app.NewWorker(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil, &app.WorkerOptions{MaxWorkers: 10})
		require.NoError(t, err)
		go func() { a.Run(ctx); done <- nil }()
		go func() { done <- w.Run(ctx, 10*time.Second) }()
		handler = a.Handler
	} else {
		e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(d.SQL), nil, nil, &app.WorkerOptions{MaxWorkers: 4})
		require.NoError(t, err)
		done <- nil
		go func() { done <- e.Run(ctx, 10*time.Second) }()
		handler = e.Handler
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	})
	return srv.URL
}

// failDeclinedRefund makes a refund of ord_declined, whose card the test
// Stripe declines, and waits until the worker has failed it and cancelled
// its job.
func (b *opsWorker) failDeclinedRefund(t *testing.T, key string) *vocab.Operation {
	t.Helper()
	callPatiently(t, b.session, "refund_order", declinedRefund(key))
	op := awaitPatiently(t, b.session, key, vocab.StatusFailed)
	require.NotNil(t, op.Error)
	require.Equal(t, vocab.CodeCardDeclined, op.Error.Code)
	require.Eventually(t, func() bool {
		return b.db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'`, op.JobID) == 1
	}, 60*time.Second, 50*time.Millisecond)
	require.Empty(t, b.stripe.Refunds())
	return op
}

// declinedRefund is the arguments of failDeclinedRefund's call.
func declinedRefund(key string) map[string]any {
	return map[string]any{"order_id": "ord_declined", "amount_cents": 1000, "idempotency_key": key}
}

// callPatiently calls a tool and, while the api answers unavailable (HTTP
// 503, or the code unavailable), calls again with the same arguments, as
// clients are told to: on a loaded machine the embedded process's one SQLite
// connection can stay busy past the api's bounds. It returns the tool's
// text answer.
func callPatiently(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		var last string
		if err != nil {
			require.ErrorContains(t, err, http.StatusText(http.StatusServiceUnavailable))
			last = err.Error()
		} else {
			last = res.Content[0].(*mcp.TextContent).Text
			var body struct {
				Error *struct {
					Code vocab.Code `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(last), &body), last)
			if !res.IsError || body.Error == nil || body.Error.Code != vocab.CodeUnavailable {
				return last
			}
		}
		require.True(t, time.Now().Before(deadline), "%s still unavailable after 60s: %s", name, last)
		time.Sleep(100 * time.Millisecond) // the retry's pace, not an assertion
	}
}

// awaitPatiently polls get_operation (callPatiently) until the refund with
// key reaches status.
func awaitPatiently(t *testing.T, s *mcp.ClientSession, key string, status vocab.Status) *vocab.Operation {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var op vocab.Operation
		text := callPatiently(t, s, "get_operation", map[string]any{"tool": "refund_order", "idempotency_key": key})
		require.NoError(t, json.Unmarshal([]byte(text), &op), text)
		if op.Status == status {
			return &op
		}
		require.True(t, time.Now().Before(deadline), "refund_order/%s never reached %s: %s", key, status, text)
		time.Sleep(50 * time.Millisecond)
	}
}

// auditTrail is the decisions of the operation's audit rows, oldest first,
// and the user of its redriven row.
func auditTrail(t *testing.T, d *enginetest.DB, key string) (decisions []string, redrivenBy string) {
	t.Helper()
	detail, err := ops.GetOperation(context.Background(), d.Store, "acme", "refund_order", key)
	require.NoError(t, err)
	for _, e := range detail.Audit {
		decisions = append(decisions, string(e.Decision))
		if e.Decision == vocab.DecisionRedriven {
			redrivenBy = e.UserID
		}
	}
	return decisions, redrivenBy
}

// TestOpsRedriveDeclinedRefundEndsInOneRefund re-drives, through the code
// path idemctl uses, a refund whose card was declined once the charge is
// fixed: the next generation's downstream key is used, the operation ends
// succeeded with exactly one refund at the test Stripe, a dry run changes
// nothing, and re-driving the succeeded operation is refused.
func TestOpsRedriveDeclinedRefundEndsInOneRefund(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOpsWorker(t, engine)
		ctx := context.Background()
		const key = "refund-redrive-01"
		failed := b.failDeclinedRefund(t, key)
		opID, jobID := failed.OperationID, failed.JobID

		// The charge is fixed; an operator re-drives.
		b.stripe.ClearChargeError("ch_declined")
		o := newOps(t, b.db)
		params := &ops.RedriveParams{TenantID: "acme", Tool: "refund_order", Key: key, Operator: "alice", Reason: "card fixed", DryRun: true}

		before := snapshot(t, b.db)
		line, err := o.Redriver.Redrive(ctx, params)
		require.NoError(t, err)
		require.Equal(t, &ops.RedriveLine{
			OperationID: opID, Tool: "refund_order", Key: key, Action: ops.ActionWouldRedrive, Status: vocab.StatusFailed,
			NextGeneration: true, FreshJob: true, Reason: "card fixed",
		}, line, "the worker cancelled the failed job: a fresh one would run it")
		require.Equal(t, before, snapshot(t, b.db), "a dry run changes nothing")

		params.DryRun = false
		line, err = o.Redriver.Redrive(ctx, params)
		require.NoError(t, err)
		require.Equal(t, ops.ActionRedriven, line.Action)
		require.True(t, line.NextGeneration, "card_declined: nothing happened, so the next generation")
		require.True(t, line.FreshJob, "a fresh job, never the cancelled one a late cancellation could reach")
		require.NotEqual(t, jobID, line.JobID)
		nextKey := intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", declinedRefund(key), 1)
		require.Equal(t, nextKey, line.DownstreamKey)

		op := awaitPatiently(t, b.session, key, vocab.StatusSucceeded)
		require.Equal(t, opID, op.OperationID)
		require.Equal(t, map[string]int{nextKey: 1}, b.stripe.RefundsByKey(), "one refund, with the new downstream key")
		require.Len(t, b.stripe.Refunds(), 1)
		require.Equal(t, int64(1000), b.stripe.RefundedAmount("ch_declined"))
		require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM refunds`))
		require.Equal(t, 1000, b.db.Count(t, `SELECT refunded_cents FROM orders WHERE tenant_id = 'acme' AND order_id = 'ord_declined'`))

		// Re-driving the succeeded operation is refused, and changes nothing.
		before = snapshot(t, b.db)
		line, err = o.Redriver.Redrive(ctx, params)
		require.ErrorIs(t, err, core.ErrRedriveSucceeded)
		require.True(t, ops.Refused(err))
		require.Equal(t, ops.ActionRefused, line.Action)
		require.Equal(t, vocab.StatusSucceeded, line.Status)
		require.Equal(t, plusAudit(before, 1), snapshot(t, b.db), "nothing changes but the refusal's audit row")
		require.Len(t, b.stripe.Refunds(), 1)

		// The audit trail tells the story, the operator named.
		decisions, by := auditTrail(t, b.db, key)
		require.Equal(t, []string{"accepted", "started", "failed", "redriven", "started", "succeeded", "denied"}, decisions)
		require.Equal(t, "alice", by)
	})
}

// TestOpsRiverUIRetryRedrivesThroughTheGate retries a declined refund's
// cancelled job through River UI's API, as its Retry button does: the
// operator routes re-drive the operation through the gate in the Basic
// user's name, the worker runs it with the next generation's key, and it
// ends with one refund.
func TestOpsRiverUIRetryRedrivesThroughTheGate(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOpsWorker(t, engine)
		const key = "refund-riverui-01"
		failed := b.failDeclinedRefund(t, key)

		b.stripe.ClearChargeError("ch_declined")
		resp, body := opsDo(t, http.MethodPost, b.url+ops.RiverUIPath+"/api/jobs/retry", basicAuth(opsUser, opsPassword),
			fmt.Sprintf(`{"ids":["%d"]}`, failed.JobID), nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)

		op := awaitPatiently(t, b.session, key, vocab.StatusSucceeded)
		require.Equal(t, failed.OperationID, op.OperationID)
		// The gate retried the operation's job, or gave it a fresh one where
		// River was asked to cancel the failed one (jobs.Control.JobRetryTx).
		require.NotZero(t, op.JobID)
		require.Equal(t, map[string]int{intentKey(t, strings.Repeat("s", 32), "acme", "refund_order", declinedRefund(key), 1): 1}, b.stripe.RefundsByKey())
		decisions, by := auditTrail(t, b.db, key)
		require.Equal(t, []string{"accepted", "started", "failed", "redriven", "started", "succeeded"}, decisions)
		require.Equal(t, opsUser, by)
	})
}

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
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestOpsRiverUIAuthentication(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOpsAPI(t, engine, opsEnv)

		// The subtests run in parallel inside this group, and the checks of
		// the logs below run after all of them.
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
	})
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
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOpsAPI(t, engine, nil)
		ui := b.url + ops.RiverUIPath + "/"
		resp, _ := opsDo(t, http.MethodGet, ui, basicAuth(opsUser, opsPassword), "", nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, `Bearer realm="idemgate ops"`, resp.Header.Get("WWW-Authenticate"))
		resp, _ = opsDo(t, http.MethodGet, ui, bearerAuth(tokenOperator), "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

func TestOpsBasicCredentialsMisconfigured(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		d := enginetest.New(t, engine, nil)
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
				cfg := opsConfig(d, tt.env)
				var err error
				if d.Pool != nil {
					_, err = app.NewAPIWithOptions(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil, nil)
				} else {
					_, err = app.NewEmbedded(cfg, sqliteengine.NewDriver(d.SQL), nil, nil, nil)
				}
				require.ErrorContains(t, err, tt.wantErr)
				if p := tt.env[ops.EnvOpsPassword]; p != "" {
					require.NotContains(t, err.Error(), p)
				}
			})
		}
	})
}

// failClaim plays a worker that failed the claim definitively.
func failClaim(t *testing.T, s core.Store, key string, code vocab.Code) *core.Claim {
	t.Helper()
	ctx := context.Background()
	c, err := s.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
	require.NoError(t, err)
	c, err = s.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: c.JobID, Lease: time.Minute})
	require.NoError(t, err)
	c, err = s.ClaimFail(ctx, &core.ClaimFailParams{ID: c.ID, Epoch: c.Epoch, Error: vocab.ErrorInfo{Code: code, Message: string(code)}})
	require.NoError(t, err)
	return c
}

// lastAuditUser is the user of the last audit row of the refund with key.
func lastAuditUser(t *testing.T, s core.Store, key string) (vocab.Decision, string) {
	t.Helper()
	events, err := s.AuditListByKey(context.Background(), &core.AuditListByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: key})
	require.NoError(t, err)
	last := events[len(events)-1]
	return last.Decision, last.UserID
}

func decodeLine(t *testing.T, body string) ops.RedriveLine {
	t.Helper()
	var l ops.RedriveLine
	require.NoError(t, json.Unmarshal([]byte(body), &l), body)
	return l
}

func TestOpsRedriveRoute(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		b := setupOpsAPI(t, engine, opsEnv)
		s := b.gate.Store()
		session := connect(t, b.url, tokenAcme)
		for _, key := range []string{"route-declined-1", "route-unknown-01", "route-success-01"} {
			_, isErr := callTool(t, session, "refund_order", refund(key, 100))
			require.False(t, isErr)
		}
		declined := failClaim(t, s, "route-declined-1", vocab.CodeCardDeclined)
		unknown := failClaim(t, s, "route-unknown-01", vocab.CodeOutcomeUnknown)
		completeIn(t, s, &vocab.Operation{Tool: "refund_order", IdempotencyKey: "route-success-01"})
		route := b.url + ops.RedrivePath

		// Dry run with the tenant's ops:admin token: nothing changes.
		before := snapshot(t, b.db)
		resp, body := opsDo(t, http.MethodPost, route, bearerAuth(tokenAcmeOps),
			`{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"card fixed","dry_run":true}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		line := decodeLine(t, body)
		require.Equal(t, ops.ActionWouldRedrive, line.Action)
		require.True(t, line.NextGeneration)
		require.Equal(t, before, snapshot(t, b.db))

		resp, body = opsDo(t, http.MethodPost, route, bearerAuth(tokenAcmeOps),
			`{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"card fixed"}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		line = decodeLine(t, body)
		require.Equal(t, ops.ActionRedriven, line.Action)
		require.Equal(t, strings.TrimSuffix(declined.DownstreamKey, "_0")+"_1", line.DownstreamKey)
		decision, user := lastAuditUser(t, s, "route-declined-1")
		require.Equal(t, vocab.DecisionRedriven, decision)
		require.Equal(t, "oncall", user, "the token's user is the operator")
		require.Equal(t, "redriven by oncall via /ops/redrive (bearer): card fixed (next generation: "+line.DownstreamKey+")",
			lastAudit(t, s, "route-declined-1").Reason)

		// Basic credentials name the tenant; the operator is the Basic user.
		resp, body = opsDo(t, http.MethodPost, route, basicAuth(opsUser, opsPassword),
			`{"tenant":"acme","tool":"refund_order","idempotency_key":"route-unknown-01","reason":"stripe outage over"}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		line = decodeLine(t, body)
		require.False(t, line.NextGeneration, "an unknown outcome keeps the downstream key")
		require.Equal(t, unknown.DownstreamKey, line.DownstreamKey)
		_, user = lastAuditUser(t, s, "route-unknown-01")
		require.Equal(t, opsUser, user)
		require.Equal(t, "redriven by "+opsUser+" via /ops/redrive (basic): stripe outage over", lastAudit(t, s, "route-unknown-01").Reason)

		// The operator tenant's token (idemctl token create --operator) is
		// the deployment's: it names the tenant, and its user is named.
		failClaim(t, s, "route-unknown-01", vocab.CodeOutcomeUnknown)
		resp, body = opsDo(t, http.MethodPost, route, bearerAuth(tokenOperator),
			`{"tenant":"acme","tool":"refund_order","idempotency_key":"route-unknown-01","reason":"second outage over"}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		ev := lastAudit(t, s, "route-unknown-01")
		require.Equal(t, "sre", ev.UserID)
		require.Equal(t, "redriven by sre via /ops/redrive (bearer): second outage over", ev.Reason)

		// Refused: succeeded.
		before = snapshot(t, b.db)
		resp, body = opsDo(t, http.MethodPost, route, basicAuth(opsUser, opsPassword),
			`{"tenant":"acme","tool":"refund_order","idempotency_key":"route-success-01","reason":"again"}`, nil)
		require.Equal(t, http.StatusConflict, resp.StatusCode, body)
		line = decodeLine(t, body)
		require.Equal(t, ops.ActionRefused, line.Action)
		require.Equal(t, vocab.StatusSucceeded, line.Status)
		require.Equal(t, plusAudit(before, 1), snapshot(t, b.db), "nothing changes but the refusal's audit row")

		redriveRouteProblems(t, b)
	})
}

// redriveRouteProblems checks the re-drive route's refusals.
func redriveRouteProblems(t *testing.T, b *opsBundle) {
	route := b.url + ops.RedrivePath
	for _, tt := range []struct {
		name       string
		auth       opsAuth
		body       string
		wantStatus int
		wantCode   vocab.Code
	}{
		{"OtherTenantsOperation", bearerAuth(tokenAcmeOps), `{"tenant":"globex","tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusForbidden, vocab.CodeForbidden},
		{"BasicWithoutTenant", basicAuth(opsUser, opsPassword), `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"OperatorTokenWithoutTenant", bearerAuth(tokenOperator), `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"NoReason", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"route-declined-1"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"UnknownField", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"k","reason":"r","operator":"mallory"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"Unknown", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"no-such-key-01","reason":"r"}`, http.StatusNotFound, vocab.CodeNotFound},
		{"NoOpsAdmin", bearerAuth(tokenAcme), `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusForbidden, vocab.CodeForbidden},
		{"NoCredentials", nil, `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusUnauthorized, vocab.CodeUnauthenticated},
		{"NULInTenant", basicAuth(opsUser, opsPassword), `{"tenant":"ac\u0000me","tool":"refund_order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"NULInTool", bearerAuth(tokenAcmeOps), `{"tool":"refund\u0000order","idempotency_key":"route-declined-1","reason":"r"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"NULInKey", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"route\u0000declined","reason":"r"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
		{"NULInReason", bearerAuth(tokenAcmeOps), `{"tool":"refund_order","idempotency_key":"route-declined-1","reason":"r\u0000"}`, http.StatusBadRequest, vocab.CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := opsDo(t, http.MethodPost, route, tt.auth, tt.body, nil)
			require.Equal(t, tt.wantStatus, resp.StatusCode, body)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var p struct {
				Error struct {
					Code vocab.Code `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &p))
			require.Equal(t, tt.wantCode, p.Error.Code)
		})
	}
	require.NotContains(t, b.logs.String(), opsPassword)
}
