package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// The edges of exactly once, replayed through the built api on both
// engines: a key that changes hands twice, and an intent its agent
// cancelled, which no re-drive may run.

// edgeStack is the api on one engine with the test Stripe; its worker
// starts on demand, so that calls made before are queued and no worker
// fetches them.
type edgeStack struct {
	url         string
	db          *enginetest.DB
	stripe      *stripetest.Server
	stripeURL   string
	session     *mcp.ClientSession
	startWorker func()
}

func setupEdges(t *testing.T, engine string, tune ...func(cfg *config.Config)) *edgeStack {
	t.Helper()
	return setupEdgesStripe(t, engine, nil, tune...)
}

// setupEdgesStripe is setupEdges with the test Stripe's options (its seed).
func setupEdgesStripe(t *testing.T, engine string, stripeOpts *stripetest.Options, tune ...func(cfg *config.Config)) *edgeStack {
	t.Helper()
	stripeSrv, stripeHTTP := stripetest.Start(t, stripeOpts)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	d := enginetest.New(t, engine, &enginetest.Options{MaxConns: 20})
	seed := seedFile()
	seed.Tokens = append(seed.Tokens, store.SeedToken{Tenant: "acme", User: "oncall", Scopes: []string{"ops:admin"}, Token: tokenAcmeOps})
	_, err := d.Store.Seed(context.Background(), seed)
	require.NoError(t, err)
	cfg := opsConfig(d, opsEnv)
	cfg.DuplicateWindow = config.Defaults().DuplicateWindow // the built-ins' default guard
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.InflightTimeout = 10 * time.Second
	for _, f := range tune {
		f(cfg)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	running := 0
	var handler http.Handler
	var startWorker func()
	if d.Pool != nil {
		a, err := app.NewAPI(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil)
		require.NoError(t, err)
		running++
		go func() { a.Run(ctx); done <- nil }()
		handler = a.Handler
		startWorker = func() {
			w, err := app.NewWorker(cfg, pgengine.NewDriver(d.Pool, cfg.Pooled()), nil, &app.WorkerOptions{MaxWorkers: 4})
			require.NoError(t, err)
			running++
			go func() { done <- w.Run(ctx, 10*time.Second) }()
		}
	} else {
		e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(d.SQL), nil, nil, &app.WorkerOptions{MaxWorkers: 4})
		require.NoError(t, err)
		handler = e.Handler
		startWorker = func() {
			running++
			go func() { done <- e.Run(ctx, 10*time.Second) }()
		}
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		for range running {
			require.NoError(t, <-done)
		}
	})
	return &edgeStack{url: srv.URL, db: d, stripe: stripeSrv, stripeURL: stripeHTTP.URL, session: connect(t, srv.URL, tokenAcme), startWorker: startWorker}
}

// endWindow ends the replay window of the refund with key now (its TTL is
// a day: the test moves its end instead of waiting), as time would.
func (s *edgeStack) endWindow(t *testing.T, key string) {
	t.Helper()
	s.db.Exec(t, `UPDATE idempotency_claims SET expires_at = $1 WHERE tenant_id = 'acme' AND tool = 'refund_order'
		AND idempotency_key = $2 AND expires_at IS NOT NULL`, s.db.Time(time.Now().Add(-time.Second)), key)
}

// prune runs the pruner's code path, as `idemctl prune` does.
func (s *edgeStack) prune(t *testing.T) {
	t.Helper()
	_, err := newOps(t, s.db).Gate.Prune(context.Background(), 10)
	require.NoError(t, err)
}

// TestKeyChangingHandsTwiceRunsEachIntentOnce replays finding 1: intent A
// (refund 100) succeeds, its window ends, intent B (refund 200, same key)
// takes the key over and succeeds, B's window ends, and A is sent again: it
// is refused with idempotency_key_expired naming A's operation, and the
// test Stripe has one refund of each, with and without a prune between.
func TestKeyChangingHandsTwiceRunsEachIntentOnce(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupEdges(t, engine)
		s.startWorker()
		for i, prune := range []bool{false, true} {
			key := fmt.Sprintf("hands-twice-prune-%v", prune)
			run := func(amount int) *vocab.Operation {
				t.Helper()
				// Amounts of each round's own: the same refund under
				// the other round's key would be a possible duplicate.
				amount += i
				callPatiently(t, s.session, "refund_order", refund(key, amount))
				op := awaitPatiently(t, s.session, key, vocab.StatusSucceeded)
				s.endWindow(t, key)
				if prune {
					s.prune(t)
				}
				return op
			}
			a := run(100)
			b := run(200)
			require.NotEqual(t, a.OperationID, b.OperationID)
			for _, again := range []struct {
				amount int
				op     *vocab.Operation
			}{{100, a}, {200, b}} {
				text := callPatiently(t, s.session, "refund_order", refund(key, again.amount+i))
				var body struct {
					Error struct {
						Code    vocab.Code `json:"code"`
						Message string     `json:"message"`
					} `json:"error"`
				}
				require.NoError(t, json.Unmarshal([]byte(text), &body), text)
				require.Equal(t, vocab.CodeKeyExpired, body.Error.Code, text)
				require.Contains(t, body.Error.Message, again.op.OperationID, "names the operation that ran these arguments")
			}
			// Every refund the test Stripe made, whatever operation made it:
			// one of A's amount and one of B's per key so far.
			byAmount := map[int64]int{}
			for _, r := range s.stripe.Refunds() {
				byAmount[r.Amount]++
			}
			want := map[int64]int{100: 1, 200: 1}
			if prune {
				want = map[int64]int{100: 1, 200: 1, 101: 1, 201: 1}
			}
			require.Equal(t, want, byAmount, "one refund for A and one for B per key (prune %v)", prune)
		}
	})
}

// TestCancelledRefundIsNeverRedriven replays finding 3: an agent cancels a
// queued refund (tasks/cancel); then every re-drive an operator has is
// refused with the reason and an audit row (idemctl's code path single, in a
// set and as a dry run's listing; POST /ops/redrive; River UI's Retry of
// its job), and the test Stripe never sees a refund.
func TestCancelledRefundIsNeverRedriven(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, func(t *testing.T, engine string) {
		s := setupEdges(t, engine)
		const key = "cancelled-refund-01"
		queued := createdTask(t, taskCall(t, s.url, tokenAcme, "refund_order", refund(key, 300)))
		a := rpc(t, s.url, tokenAcme, "tasks/cancel", map[string]any{"taskId": queued.TaskID})
		require.Nil(t, a.Error, "no worker runs yet: the queued refund is cancelled (%+v)", a.Error)
		s.startWorker()

		o := newOps(t, s.db)
		ctx := context.Background()
		deniedRows := func() int {
			return s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1 AND decision = 'denied'
				AND reason LIKE 'redrive refused: %cancelled by its owner%'`, key)
		}

		// The dry run's listing says refused, and writes nothing.
		line, err := o.Redriver.Redrive(ctx, &ops.RedriveParams{TenantID: "acme", Tool: "refund_order", Key: key,
			Operator: "alice", Reason: "retry failed", DryRun: true})
		require.ErrorIs(t, err, core.ErrRedriveCancelled)
		require.Equal(t, ops.ActionRefused, line.Action)
		require.Contains(t, line.Reason, "cancelled by its owner")
		set, err := o.Redriver.RedriveSet(ctx, &ops.RedriveSetParams{TenantID: "acme", Tool: "refund_order",
			Since: time.Now().Add(-time.Hour), Operator: "alice", Reason: "retry failed", DryRun: true},
			func(l *ops.RedriveLine) error {
				require.Equal(t, ops.ActionRefused, l.Action, "the dry run lists it as refused, not would_redrive")
				return nil
			})
		require.NoError(t, err)
		require.Equal(t, &ops.RedriveSetResult{Matched: 1, Refused: 1}, set)
		require.Zero(t, deniedRows(), "a dry run writes nothing")

		// Single and set re-drives: refused, one denied audit row each.
		_, err = o.Redriver.Redrive(ctx, &ops.RedriveParams{TenantID: "acme", Tool: "refund_order", Key: key,
			Operator: "alice", Reason: "retry failed"})
		require.ErrorIs(t, err, core.ErrRedriveCancelled)
		set, err = o.Redriver.RedriveSet(ctx, &ops.RedriveSetParams{TenantID: "acme", Tool: "refund_order",
			Since: time.Now().Add(-time.Hour), Operator: "alice", Reason: "retry failed"}, func(*ops.RedriveLine) error { return nil })
		require.NoError(t, err)
		require.Equal(t, 1, set.Refused)
		require.Equal(t, 2, deniedRows())

		// POST /ops/redrive: 409 with the refused line.
		resp, body := opsDo(t, http.MethodPost, s.url+ops.RedrivePath, bearerAuth(tokenAcmeOps),
			`{"tool":"refund_order","idempotency_key":"`+key+`","reason":"retry failed"}`, nil)
		require.Equal(t, http.StatusConflict, resp.StatusCode, body)
		require.Equal(t, ops.ActionRefused, decodeLine(t, body).Action)
		require.Contains(t, body, "cancelled by its owner")
		require.Equal(t, 3, deniedRows())

		// River UI shows the job as the owner's cancellation (its output),
		// and its Retry is refused by the operator routes (409, River UI's
		// error shape) in the operator's name: the job is left cancelled.
		var jobID int64
		require.NoError(t, json.Unmarshal([]byte(s.db.Rows(t, `SELECT job_id FROM idempotency_claims WHERE idempotency_key = $1`, key)[0]), &jobID))
		resp, body = opsDo(t, http.MethodGet, fmt.Sprintf("%s%s/api/jobs/%d", s.url, ops.RiverUIPath, jobID), basicAuth(opsUser, opsPassword), "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, "cancelled_by_owner")
		resp, body = opsDo(t, http.MethodPost, s.url+ops.RiverUIPath+"/api/jobs/retry", basicAuth(opsUser, opsPassword),
			fmt.Sprintf(`{"ids":["%d"]}`, jobID), nil)
		require.Equal(t, http.StatusConflict, resp.StatusCode, body)
		require.Contains(t, body, "cancelled by its owner")
		require.Equal(t, 4, deniedRows())
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'cancelled'`, jobID))
		require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1 AND decision = 'denied'
			AND user_id = $2 AND reason LIKE '%asked by '||$2||' via riverui (basic)%'`, key, opsUser))

		op := awaitPatiently(t, s.session, key, vocab.StatusFailed)
		require.Equal(t, vocab.CodeCancelled, op.Error.Code)
		require.Empty(t, s.stripe.Refunds(), "the cancelled refund never reached Stripe")
		require.Zero(t, s.db.Count(t, `SELECT count(*) FROM audit_events WHERE idempotency_key = $1
			AND decision IN ('redriven', 'started', 'succeeded')`, key))
	})
}
