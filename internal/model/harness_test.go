package model

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// Tools, tenants and the customer every credit goes to.
const (
	toolCredit = "apply_credit"
	toolRefund = "refund_order"
	customerID = "cus_model"
	// chargeAmount is each key's charge (and order): far more than the
	// refunds one key can make.
	chargeAmount = 900_000_000
	// approvalThreshold is each tenant's threshold for both tools
	// (approval_thresholds): an amount above it waits for a person's
	// approval, as the built-ins' Approval asks. Far above the amounts of
	// the argument sets that need none, and the two sets that need one
	// refund less than chargeAmount together.
	approvalThreshold = 400_000_000
	// requester and approver are the users who call and who decide.
	requester = "model"
	approver  = "model-approver"
	// waitTimeout bounds every wait for the system: a stuck test's deadline,
	// not a speed requirement.
	waitTimeout = 90 * time.Second
	// pollEvery is how often a wait reads the database again.
	pollEvery = 10 * time.Millisecond
)

var tenants = []string{"acme", "globex"}

// tb is what the harness needs of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
}

// riverClient is what the model needs of River's client on either engine.
type riverClient interface {
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobRetry(ctx context.Context, id int64) (*rivertype.JobRow, error)
	QueuePause(ctx context.Context, name string, opts *river.QueuePauseOpts) error
	QueueResume(ctx context.Context, name string, opts *river.QueuePauseOpts) error
	Subscribe(kinds ...river.EventKind) (<-chan *river.Event, func())
}

// harness is the real gate, River client (working the claim queue) and
// database of one engine, a counting test Stripe, and the faults the model
// injects into effects.
type harness struct {
	engine   string
	gate     *core.Gate
	store    core.Store
	data     store.Seeder
	tools    *toolspec.Registry
	client   riverClient
	control  ops.Jobs
	redriver *ops.Redriver
	stripe   *stripetest.Server
	faults   *faults
	events   <-chan *river.Event
	paused   bool
	// failures counts the model's failures in this test (the first one's
	// actions are reported).
	failures atomic.Int64
	// seen counts the actions that ran (skipped ones left out) and some
	// outcomes worth knowing a run reached, logged at the end.
	seen counter
	// expire ends the replay window of (tenant, tool, key)'s terminal claim.
	expire func(ctx context.Context, tenant, toolName, key string) error
	// expireIn ends that window d from now by the database's clock, and
	// returns whether the database's clock has passed that instant.
	expireIn func(ctx context.Context, tenant, toolName, key string, d time.Duration) (passed func(context.Context) (bool, error), err error)
	// expireApproval ends the approval window of (tenant, tool, key)'s
	// awaiting claim by the database's clock; it reports whether there was
	// such a claim.
	expireApproval func(ctx context.Context, tenant, toolName, key string) (bool, error)
	// ledger counts credits to customerID per (tenant, amount).
	ledger func(ctx context.Context, lo, hi int64) (map[ledgerKey]int, error)
}

type ledgerKey struct {
	tenant string
	amount int64
}

func newConfig(dbURL, stripeURL string) *config.Config {
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.StripeAPIKey = stripetest.TestAPIKey
	cfg.StripeAPIBase = stripeURL
	cfg.Secret = strings.Repeat("m", 32)
	// A lease long enough that a loaded machine never reclaims a live run.
	cfg.InflightTimeout = 60 * time.Second
	cfg.ReaperInterval = 5 * time.Second
	return cfg
}

// registry is apply_credit and refund_order on data, their effects wrapped
// with the model's faults.
func registry(t tb, data tools.Deps, f *faults) *toolspec.Registry {
	t.Helper()
	deps := data
	reg := gate.NewRegistry().MustAdd(tools.ApplyCredit(&deps), tools.RefundOrder(&deps))
	out := toolspec.NewRegistry()
	for _, spec := range toolspec.Of(reg).All() {
		cp := *spec
		if spec.Mutating {
			cp.Effect = &faultyEffect{inner: spec.Effect, f: f}
		}
		require.NoError(t, out.Add(&cp))
	}
	return out
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func stripeClient(t tb, url string) *refunds.Client {
	t.Helper()
	c, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: url})
	require.NoError(t, err)
	return c
}

// seedCustomers seeds the customer and each tenant's approval thresholds.
func seedCustomers(t tb, s store.Seeder) {
	t.Helper()
	rows := &tools.Seed{}
	f := &store.SeedFile{Rows: rows}
	for _, tn := range tenants {
		rows.Customers = append(rows.Customers, tools.SeedCustomer{Tenant: tn, CustomerID: customerID, Currency: "usd"})
		f.Tenants = append(f.Tenants, store.SeedTenant{Tenant: tn,
			ApprovalThresholds: map[string]int64{toolCredit: approvalThreshold, toolRefund: approvalThreshold}})
	}
	_, err := s.Seed(context.Background(), f)
	require.NoError(t, err)
}

// newPostgres starts a harness on a fresh Postgres database: the worker's
// gate (whose enqueuer is the working River client) serves the calls too.
func newPostgres(t *testing.T) *harness {
	t.Helper()
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, &stripetest.Options{AutoChargeAmount: chargeAmount})
	dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 16})
	data := pgengine.New(pool)
	seedCustomers(t, data)
	f := &faults{}
	reg := registry(t, tools.Deps{DB: builtins.StoreDB(data), Stripe: stripeClient(t, stripeHTTP.URL), DuplicateWindow: duplicateWindow}, f)
	cfg := newConfig(dbURL, stripeHTTP.URL)
	w, err := app.NewWorker(cfg, pgengine.NewDriver(pool, cfg.Pooled()), quietLogger(), &app.WorkerOptions{Tools: reg, MaxWorkers: 4})
	require.NoError(t, err)
	h := &harness{engine: "postgres", gate: w.Gate, store: w.Gate.Store(), data: data, tools: reg, client: w.Client.(interface{ Client() *river.Client[pgx.Tx] }).Client(), control: w.Client,
		redriver: &ops.Redriver{Gate: w.Gate, Jobs: w.Client}, stripe: stripeSrv, faults: f}
	h.expire = func(ctx context.Context, tenant, toolName, key string) error {
		_, err := pool.Exec(ctx, `UPDATE idempotency_claims SET expires_at = now() - interval '1 second'
			WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3 AND expires_at IS NOT NULL`, tenant, toolName, key)
		return err
	}
	h.expireIn = func(ctx context.Context, tenant, toolName, key string, d time.Duration) (func(context.Context) (bool, error), error) {
		// clock_timestamp(), not now(): the instant is the server's clock
		// when the update runs; the pruner's now() is its own
		// transaction's start, later than the check below.
		var until time.Time
		err := pool.QueryRow(ctx, `UPDATE idempotency_claims SET expires_at = clock_timestamp() + $4::float8 * interval '1 microsecond'
			WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3 AND expires_at IS NOT NULL
			RETURNING expires_at`, tenant, toolName, key, float64(d.Microseconds())).Scan(&until)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (bool, error) {
			var passed bool
			err := pool.QueryRow(ctx, `SELECT clock_timestamp() > $1`, until).Scan(&passed)
			return passed, err
		}, nil
	}
	h.expireApproval = func(ctx context.Context, tenant, toolName, key string) (bool, error) {
		tag, err := pool.Exec(ctx, `UPDATE idempotency_claims SET approval_expires_at = now() - interval '1 second'
			WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3 AND status = 'awaiting_approval'`, tenant, toolName, key)
		return tag.RowsAffected() == 1, err
	}
	h.ledger = func(ctx context.Context, lo, hi int64) (map[ledgerKey]int, error) {
		rows, err := pool.Query(ctx, `SELECT tenant_id, amount_cents, count(*) FROM ledger_entries
			WHERE customer_id = $1 AND amount_cents BETWEEN $2 AND $3 GROUP BY tenant_id, amount_cents`, customerID, lo, hi)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[ledgerKey]int{}
		for rows.Next() {
			var k ledgerKey
			var n int
			if err := rows.Scan(&k.tenant, &k.amount, &n); err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, rows.Err()
	}
	h.start(t, func(ctx context.Context) error { return w.Client.Start(ctx) }, w.Client.Stop)
	_ = ctx
	return h
}

// newSQLite starts a harness on a fresh SQLite file, as the embedded
// deployment runs: one River client inserts and works the jobs.
func newSQLite(t *testing.T) *harness {
	t.Helper()
	stripeSrv, stripeHTTP := stripetest.Start(t, &stripetest.Options{AutoChargeAmount: chargeAmount})
	path, db := sqlitetest.NewDB(t)
	data := sqliteengine.New(db)
	seedCustomers(t, data)
	f := &faults{}
	reg := registry(t, tools.Deps{DB: builtins.StoreDB(data), Stripe: stripeClient(t, stripeHTTP.URL), DuplicateWindow: duplicateWindow}, f)
	cfg := newConfig("sqlite:"+path, stripeHTTP.URL)
	e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(db), quietLogger(), &app.APIOptions{Tools: reg, RateLimit: -1}, &app.WorkerOptions{Tools: reg, MaxWorkers: 4})
	require.NoError(t, err)
	control := e.Client
	h := &harness{engine: "sqlite", gate: e.Gate, store: e.Gate.Store(), data: data, tools: reg,
		client: e.Client.(interface{ Client() *river.Client[*sql.Tx] }).Client(), control: control,
		redriver: &ops.Redriver{Gate: e.Gate, Jobs: control}, stripe: stripeSrv, faults: f}
	h.expire = func(ctx context.Context, tenant, toolName, key string) error {
		_, err := db.ExecContext(ctx, `UPDATE idempotency_claims SET expires_at = ?4
			WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3 AND expires_at IS NOT NULL`,
			tenant, toolName, key, sqliteengine.FormatTime(time.Now().Add(-time.Second)))
		return err
	}
	h.expireIn = func(ctx context.Context, tenant, toolName, key string, d time.Duration) (func(context.Context) (bool, error), error) {
		// SQLite's clock, in the store's format (milliseconds), read by
		// the update itself; the pruner's statements read their own.
		var until string
		err := db.QueryRowContext(ctx, `UPDATE idempotency_claims SET expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?4)
			WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3 AND expires_at IS NOT NULL
			RETURNING expires_at`, tenant, toolName, key, fmt.Sprintf("+%.3f seconds", d.Seconds())).Scan(&until)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (bool, error) {
			var passed bool
			err := db.QueryRowContext(ctx, `SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') > ?1`, until).Scan(&passed)
			return passed, err
		}, nil
	}
	h.expireApproval = func(ctx context.Context, tenant, toolName, key string) (bool, error) {
		res, err := db.ExecContext(ctx, `UPDATE idempotency_claims SET approval_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 seconds')
			WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3 AND status = 'awaiting_approval'`, tenant, toolName, key)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n == 1, err
	}
	h.ledger = func(ctx context.Context, lo, hi int64) (map[ledgerKey]int, error) {
		rows, err := db.QueryContext(ctx, `SELECT tenant_id, amount_cents, count(*) FROM ledger_entries
			WHERE customer_id = ?1 AND amount_cents BETWEEN ?2 AND ?3 GROUP BY tenant_id, amount_cents`, customerID, lo, hi)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[ledgerKey]int{}
		for rows.Next() {
			var k ledgerKey
			var n int
			if err := rows.Scan(&k.tenant, &k.amount, &n); err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, rows.Err()
	}
	h.start(t, func(ctx context.Context) error { return e.Client.Start(ctx) }, e.Client.Stop)
	return h
}

// start starts River (synchronously: its producers run when Start
// returns) and stops it when t ends.
func (h *harness) start(t *testing.T, start func(context.Context) error, stop func(context.Context) error) {
	t.Helper()
	events, unsubscribe := h.client.Subscribe(river.EventKindQueuePaused, river.EventKindQueueResumed)
	h.events = events
	// River's own context is not cancelled at the end: Stop ends it softly.
	require.NoError(t, start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if h.paused {
			_ = h.client.QueueResume(ctx, jobs.Queue, nil)
		}
		require.NoError(t, stop(ctx))
		unsubscribe()
	})
}

// setPaused pauses or resumes the claim queue and returns once the
// producer has applied it: after a pause's queue_paused event, the
// producer's loop (which also fetches) will fetch nothing more.
func (h *harness) setPaused(t tb, paused bool) {
	t.Helper()
	if h.paused == paused {
		return
	}
	ctx := context.Background()
	want := river.EventKindQueueResumed
	if paused {
		want = river.EventKindQueuePaused
		retry(t, func() error { return h.client.QueuePause(ctx, jobs.Queue, nil) })
	} else {
		retry(t, func() error { return h.client.QueueResume(ctx, jobs.Queue, nil) })
	}
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-h.events:
			if ev.Kind == want && ev.Queue != nil && ev.Queue.Name == jobs.Queue {
				h.paused = paused
				return
			}
		case <-deadline:
			t.Fatalf("the claim queue never reported %s", want)
		}
	}
}

// retry runs fn until it succeeds or fails with something else than the
// database being busy (SQLite's one writer under load), as a client retries
// an "unavailable" answer.
func retry(t tb, fn func() error) {
	t.Helper()
	require.NoError(t, retryErr(fn))
}

func retryErr(fn func() error) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		err := fn()
		if err == nil || !errors.Is(err, vocab.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// intent is the intent of a call of toolName with key and args, as the
// api decodes and fingerprints it.
func (h *harness) intent(toolName, key string, args map[string]any) (*core.Intent, error) {
	all := map[string]any{"idempotency_key": key}
	for k, v := range args {
		all[k] = v
	}
	raw, err := json.Marshal(all)
	if err != nil {
		return nil, err
	}
	decoded, err := core.DecodeArgs(raw)
	if err != nil {
		return nil, err
	}
	return h.gate.NewIntent(toolName, decoded)
}

// call is one mutation call through the gate, as the api makes it: the
// tool's Approval (the built-ins': above the tenant's threshold) is asked
// through core.ClaimParams.Approval, on a read-only transaction.
func (h *harness) call(tenant, toolName, key string, args map[string]any) (*core.ClaimResult, error) {
	in, err := h.intent(toolName, key, args)
	if err != nil {
		return nil, err
	}
	actor := vocab.Actor{TenantID: tenant, UserID: requester, TokenID: requester, Scopes: []string{"billing:credit", "billing:refund"}}
	params := &core.ClaimParams{Actor: actor, RequestID: "model", Intent: in}
	if spec, ok := h.tools.Get(toolName); ok && spec.NeedsApproval != nil {
		params.Approval = func(ctx context.Context) (time.Duration, string, error) {
			window, err := h.approvalWindow(ctx, spec, actor, in.Canonical)
			return window, "", err
		}
	}
	var res *core.ClaimResult
	err = retryErr(func() error {
		var err error
		res, err = h.gate.Claim(context.Background(), params)
		return err
	})
	return res, err
}

// approvalWindow is how long a call of spec with the canonical arguments
// waits for approval, 0 for none: the tool's predicate on a read-only
// transaction, as the api asks it.
func (h *harness) approvalWindow(ctx context.Context, spec *toolspec.Spec, actor vocab.Actor, canonical json.RawMessage) (time.Duration, error) {
	var (
		gtx core.Tx
		err error
	)
	if rb, ok := h.store.(interface {
		BeginRead(context.Context) (core.Tx, error)
	}); ok {
		gtx, err = rb.BeginRead(ctx)
	} else {
		gtx, err = h.store.Begin(ctx)
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = gtx.Rollback(context.WithoutCancel(ctx)) }()
	tx, err := toolspec.WrapTx(gtx)
	if err != nil {
		return 0, err
	}
	needs, err := spec.NeedsApproval(ctx, tx, toolspec.Caller{TenantID: actor.TenantID, UserID: actor.UserID, Scopes: actor.Scopes}, canonical)
	if err != nil || !needs {
		return 0, err
	}
	return spec.ApprovalWindow, nil
}

// claim reads the current claim of (tenant, tool, key).
func (h *harness) claim(t tb, tenant, toolName, key string) (*core.Claim, error) {
	t.Helper()
	var c *core.Claim
	err := retryErr(func() error {
		var err error
		c, err = h.store.ClaimGetByKey(context.Background(), &core.ClaimGetByKeyParams{TenantID: tenant, Tool: toolName, IdempotencyKey: key})
		return err
	})
	return c, err
}

// finalized reports whether a River job will not run again by itself.
func finalized(state rivertype.JobState) bool {
	switch state {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		return true
	}
	return false
}

// await waits until (tenant, tool, key)'s claim is terminal and its job
// finalized, and returns the claim. A job that River holds for a later
// retry is retried now (River UI's Retry): the retry schedule's backoff is
// River's, not the model's concern.
func (h *harness) await(t tb, tenant, toolName, key string) *core.Claim {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(waitTimeout)
	for {
		c, err := h.claim(t, tenant, toolName, key)
		require.NoError(t, err, "%s/%s/%s", tenant, toolName, key)
		if c.Status.Terminal() {
			job, err := h.client.JobGet(ctx, c.JobID)
			if errors.Is(err, river.ErrNotFound) || err == nil && finalized(job.State) {
				return c
			}
			require.NoError(t, err)
		} else if job, err := h.client.JobGet(ctx, c.JobID); err == nil && job.State == rivertype.JobStateRetryable {
			_, _ = h.client.JobRetry(ctx, c.JobID)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s/%s never finished: %s after %s", tenant, toolName, key, c.Status, waitTimeout)
		}
		time.Sleep(pollEvery)
	}
}

// awaitJob waits until job id is finalized (retrying it when River holds
// it for a later retry).
func (h *harness) awaitJob(t tb, id int64) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(waitTimeout)
	for {
		job, err := h.client.JobGet(ctx, id)
		if errors.Is(err, river.ErrNotFound) {
			return
		}
		require.NoError(t, err)
		if finalized(job.State) {
			return
		}
		if job.State == rivertype.JobStateRetryable {
			_, _ = h.client.JobRetry(ctx, id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d never finished: %s after %s", id, job.State, waitTimeout)
		}
		time.Sleep(pollEvery)
	}
}

// refunds counts the test Stripe's refunds per (charge, amount).
func (h *harness) refunds() map[refundKey]int {
	out := map[refundKey]int{}
	for _, r := range h.stripe.Refunds() {
		out[refundKey{charge: r.Charge, amount: r.Amount}]++
	}
	return out
}

type refundKey struct {
	charge string
	amount int64
}

// faults are what the model injects into effects, per (tenant, tool, key):
// a definitive refusal until cleared, or the next run's outcome lost after
// the effect.
type faults struct {
	mu   sync.Mutex
	fail map[string]bool
	lose map[string]bool
}

func faultID(tenant, toolName, key string) string { return tenant + "/" + toolName + "/" + key }

func (f *faults) set(m *map[string]bool, id string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = map[string]bool{}
	}
	if on {
		(*m)[id] = true
	} else {
		delete(*m, id)
	}
}

func (f *faults) setFail(id string, on bool) { f.set(&f.fail, id, on) }
func (f *faults) setLose(id string, on bool) { f.set(&f.lose, id, on) }

func (f *faults) failing(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail[id]
}

func (f *faults) loseArmed(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lose[id]
}

func (f *faults) takeLose(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lose[id] {
		delete(f.lose, id)
		return true
	}
	return false
}

// codeRefused is the code of the ledger's injected refusal.
const codeRefused = vocab.CodeDownstreamRejected

// errLost is what an effect whose outcome was lost reports.
var errLost = errors.New("model: the effect's outcome was lost before the commit")

type faultyEffect struct {
	inner toolspec.Effect
	f     *faults
}

func (e *faultyEffect) Apply(ctx context.Context, tx toolspec.Tx, c *core.Claim) (json.RawMessage, error) {
	id := faultID(c.TenantID, c.Tool, c.IdempotencyKey)
	if e.f.failing(id) {
		return nil, gate.NothingHappened(codeRefused, "model: the ledger refuses %s", c.IdempotencyKey)
	}
	res, err := e.inner.Apply(ctx, tx, c)
	if err == nil && e.f.takeLose(id) {
		return nil, gate.Transient("model_lost_outcome", errLost)
	}
	return res, err
}

func (e *faultyEffect) Call(ctx context.Context, c *core.Claim) (json.RawMessage, error) {
	res, err := e.inner.Call(ctx, c)
	if err == nil && e.f.takeLose(faultID(c.TenantID, c.Tool, c.IdempotencyKey)) {
		return nil, gate.Transient("model_lost_outcome", errLost)
	}
	return res, err
}

func (e *faultyEffect) Record(ctx context.Context, tx toolspec.Tx, c *core.Claim, result json.RawMessage) error {
	return e.inner.Record(ctx, tx, c, result)
}

// counter counts named events.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := slices.Sorted(maps.Keys(c.n))
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = fmt.Sprintf("%s %d", name, c.n[name])
	}
	return strings.Join(out, ", ")
}

func (h *harness) String() string { return fmt.Sprintf("harness(%s)", h.engine) }
