package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/refund"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
)

// tuning is applied to bare River and to idemgate alike.
type tuning struct {
	// MaxWorkers is the claim queue's (and bare River's queue's) workers.
	MaxWorkers int
	// APIConns is the pool of the inserting side: the api process for
	// idemgate, the inserting client for bare River.
	APIConns int32
	// WorkerConns is the worker process's pool.
	WorkerConns int32
	// MaxGroup is idemgate's worker group commit size (0: the app's
	// default; 1: no grouping).
	MaxGroup int
}

func (t tuning) String() string {
	return fmt.Sprintf("MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, inserting pool %d connections, worker pool %d connections",
		t.MaxWorkers, app.DefaultFetchCooldown, app.DefaultFetchPollInterval, t.APIConns, t.WorkerConns)
}

// benchStripeKey is the test key both systems send to the test Stripe.
const benchStripeKey = "sk_test_bench"

// benchConfig is the configuration the api and the worker run with.
// stripeBase is the test Stripe (stripe-mock) for refund_order; empty, it
// is a placeholder nothing listens on: apply_credit calls no downstream.
// The SMTP settings are placeholders.
func benchConfig(dbURL string, wait time.Duration, stripeBase string) *config.Config {
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = wait
	cfg.StripeAPIKey = benchStripeKey
	cfg.StripeAPIBase = firstNonEmpty(stripeBase, "http://127.0.0.1:9")
	cfg.Secret = strings.Repeat("b", 32)
	return cfg
}

// idemStack is idemgate as deployed, in this process: the api (app's
// assembly and its pool), optionally served over HTTP
// on a loopback port, and the worker (app.NewWorker: the real jobs.Runner
// workers, reaper and pruner) on a pool of its own.
type idemStack struct {
	apiPool, workerPool *pgxpool.Pool
	api                 *app.API
	worker              *app.Worker
	url                 string // http://127.0.0.1:port when served

	cancel func()
	wg     sync.WaitGroup
	srv    *http.Server
}

type stackOptions struct {
	wait     time.Duration
	http     bool
	noWorker bool
	// stripeBase is the test Stripe the worker's refund_order calls.
	stripeBase string
	// wrap, when set, wraps the api's handler as served over HTTP.
	wrap func(http.Handler) http.Handler
}

func startIdem(ctx context.Context, db *benchDB, tn tuning, logger *slog.Logger, o stackOptions) (*idemStack, error) {
	s := &idemStack{}
	var err error
	if s.apiPool, err = db.openPool(ctx, tn.APIConns); err != nil {
		return nil, err
	}
	cfg := benchConfig(db.url, o.wait, o.stripeBase)
	// The per-tenant rate limit (50 calls/s, burst 200, by default) is off:
	// one tenant drives all the load here, and the limiter would be measured
	// instead of the gate.
	s.api, err = app.NewAPIWithOptions(cfg, pgengine.NewDriver(s.apiPool, cfg.Pooled()), logger, &app.APIOptions{
		RateLimit: -1,
	})
	if err != nil {
		s.apiPool.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.api.Run(runCtx) }()

	if !o.noWorker {
		if s.workerPool, s.worker, err = newIdemWorker(ctx, db, tn, logger, cfg); err != nil {
			s.stop()
			return nil, err
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); runIdemWorker(runCtx, s.worker, logger) }()
	}
	if o.http {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.stop()
			return nil, err
		}
		var h http.Handler = s.api.Handler
		if o.wrap != nil {
			h = o.wrap(h)
		}
		s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		s.url = "http://" + ln.Addr().String()
		go func() { _ = s.srv.Serve(ln) }()
	}
	// Let River's producers come up.
	time.Sleep(300 * time.Millisecond)
	return s, nil
}

// newIdemWorker assembles the worker process (app.NewWorker: the real
// jobs.Runner workers, reaper and pruner) on a pool of its own, not started.
func newIdemWorker(ctx context.Context, db *benchDB, tn tuning, logger *slog.Logger, cfg *config.Config) (*pgxpool.Pool, *app.Worker, error) {
	pool, err := db.openPool(ctx, tn.WorkerConns)
	if err != nil {
		return nil, nil, err
	}
	w, err := app.NewWorker(cfg, pgengine.NewDriver(pool, cfg.Pooled()), logger, &app.WorkerOptions{MaxWorkers: tn.MaxWorkers, MaxGroup: tn.MaxGroup})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, w, nil
}

// runIdemWorker runs w until ctx ends, as the worker process does.
func runIdemWorker(ctx context.Context, w *app.Worker, logger *slog.Logger) {
	if err := w.Run(ctx, 10*time.Second); err != nil {
		logger.Error("bench: worker stopped", "error", err)
	}
}

func (s *idemStack) stop() {
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.srv.Shutdown(ctx)
		cancel()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.workerPool != nil {
		s.workerPool.Close()
	}
	if s.apiPool != nil {
		s.apiPool.Close()
	}
}

// bearer adds the benchmark token to every request, and a storm call's
// index (benchCallKey in its context) as callHeader.
type bearer struct{ rt http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+benchToken)
	if i, ok := r.Context().Value(benchCallKey{}).(int); ok {
		r.Header.Set(callHeader, strconv.Itoa(i))
	}
	return b.rt.RoundTrip(r)
}

// httpClient returns a client whose keep-alive pool holds conns connections
// to the api, so that the load reuses them.
func httpClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns + 16
	tr.MaxIdleConnsPerHost = conns + 16
	return &http.Client{Transport: bearer{rt: tr}, Timeout: 60 * time.Second}
}

// mcpSession connects an official go-sdk client over Streamable HTTP.
func mcpSession(ctx context.Context, url string, hc *http.Client) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "idemgate-bench", Version: "1"}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             url + "/mcp",
		HTTPClient:           hc,
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, nil)
}

// --- bare River ---

// bareArgs is bare River's job: the operation travels in the job's args.
type bareArgs struct {
	TenantID    string `json:"tenant_id"`
	CustomerID  string `json:"customer_id"`
	AmountCents int64  `json:"amount_cents"`
	Key         string `json:"key"`
}

func (bareArgs) Kind() string { return "bench_bare_credit" }

// bareWorker runs apply_credit's own domain statements (the customer's
// currency checked, the ledger entry inserted as tools/credit.go inserts
// it) and completes the job in the same
// transaction: the tool's effect without the gate, so that the ratio
// prices the gate alone.
type bareWorker struct {
	river.WorkerDefaults[bareArgs]
	pool *pgxpool.Pool
}

// sqlBareCurrency is apply_credit's currency check (tools/credit.go).
const sqlBareCurrency = `SELECT currency FROM customers WHERE tenant_id = $1 AND customer_id = $2`

// sqlBareLedger is apply_credit's ledger insert (internal/tools/credit.go).
const sqlBareLedger = `INSERT INTO ledger_entries (tenant_id, customer_id, operation_id, amount_cents, currency, memo)
	VALUES ($1, $2, $3, $4, $5, $6)`

// sqlBareOrder is refund_order's order read (internal/tools/order.go).
const sqlBareOrder = `SELECT charge_id, amount_cents, refunded_cents, currency FROM orders WHERE tenant_id = $1 AND order_id = $2`

// sqlBareRefund is refund_order's record on Postgres (internal/tools/refund.go).
const sqlBareRefund = `
WITH ins AS (
	INSERT INTO refunds (tenant_id, order_id, operation_id, stripe_refund_id, amount_cents, currency, status)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (stripe_refund_id) DO NOTHING
	RETURNING tenant_id, order_id, amount_cents
)
UPDATE orders o SET refunded_cents = o.refunded_cents + ins.amount_cents
FROM ins
WHERE o.tenant_id = ins.tenant_id AND o.order_id = ins.order_id`

func (w *bareWorker) Work(ctx context.Context, job *river.Job[bareArgs]) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var currency string
	if err := tx.QueryRow(ctx, sqlBareCurrency, job.Args.TenantID, job.Args.CustomerID).Scan(&currency); err != nil {
		return err
	}
	if currency != "usd" {
		return fmt.Errorf("customer %s's currency is %s", job.Args.CustomerID, currency)
	}
	if _, err := tx.Exec(ctx, sqlBareLedger, job.Args.TenantID, job.Args.CustomerID, uuid.NewString(), job.Args.AmountCents, "usd", ""); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// --- bare River with the same Stripe call ---

// bareRefundArgs is bare River's refund job: refund_order's operation in
// the job's args.
type bareRefundArgs struct {
	TenantID    string `json:"tenant_id"`
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Key         string `json:"key"`
}

func (bareRefundArgs) Kind() string { return "bench_bare_refund" }

// newStripeRefunds is a stripe-go refund client with the settings
// idemgate's refunds client uses (internal/vocab/refunds): a plain http.Client with
// a 30s timeout, stripe-go's network retries, logging and telemetry off.
func newStripeRefunds(base string) *refund.Client {
	bc := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: 30 * time.Second},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
		URL:               stripe.String(base),
	}
	return &refund.Client{B: stripe.GetBackendWithConfig(stripe.APIBackend, bc), Key: benchStripeKey}
}

// bareRefundWorker does what refund_order does, without the gate: it reads
// the order as refund_order does (its charge, what is still
// refundable), makes the refund at Stripe with an Idempotency-Key and the
// same metadata, then records the refund row and the order's refunded
// amount with refund_order's statement and completes the job with
// JobCompleteTx in one transaction.
type bareRefundWorker struct {
	river.WorkerDefaults[bareRefundArgs]
	pool    *pgxpool.Pool
	refunds *refund.Client
}

func (w *bareRefundWorker) Work(ctx context.Context, job *river.Job[bareRefundArgs]) error {
	a := job.Args
	var (
		charge, currency      string
		amount, refundedCents int64
	)
	if err := w.pool.QueryRow(ctx, sqlBareOrder, a.TenantID, a.OrderID).Scan(&charge, &amount, &refundedCents, &currency); err != nil {
		return err
	}
	refundable := amount - refundedCents
	if a.AmountCents > refundable {
		return river.JobCancel(fmt.Errorf("amount_cents %d exceeds the %d still refundable on order %s", a.AmountCents, refundable, a.OrderID))
	}
	opID := uuid.New()
	re, err := w.refunds.New(&stripe.RefundParams{
		Params: stripe.Params{Context: ctx, IdempotencyKey: stripe.String(a.Key)},
		Metadata: map[string]string{
			"idemgate_operation_id": opID.String(),
			"idemgate_tenant":       a.TenantID,
			"idemgate_order_id":     a.OrderID,
		},
		Charge: stripe.String(charge),
		Amount: stripe.Int64(a.AmountCents),
	})
	if err != nil {
		return err
	}
	if re.Currency != "" {
		currency = string(re.Currency)
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, sqlBareRefund, a.TenantID, a.OrderID, opID.String(), re.ID, re.Amount, currency, string(re.Status)); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// bareStack is plain River tuned like idemgate's worker: an insert-only
// client on the inserting pool (as the api has), and a worker client with
// app's FetchCooldown, FetchPollInterval and MaxWorkers on a pool the size
// of the worker's.
type bareStack struct {
	insertPool, workerPool *pgxpool.Pool
	inserter               *river.Client[pgx.Tx]
	worker                 *river.Client[pgx.Tx]
}

type bareOptions struct {
	// stripeBase, when set, makes the worker bareRefundWorker against this
	// test Stripe; otherwise it is bareWorker (apply_credit's effect).
	stripeBase string
	// deferStart leaves the worker client stopped: startWorker starts it.
	deferStart bool
	// river is the River configuration of both clients; nil is the
	// bench's (tunedRiver with the run's MaxWorkers).
	river *riverSettings
}

// riverSettings are the River settings that decide how soon a worker sees
// a new job: the worker client's fetch cooldown, fetch poll interval and
// MaxWorkers, and the inserting client's FetchCooldown, which River also
// uses as that client's NOTIFY limiter (one insert notification per queue
// per FetchCooldown). Zero durations are River's defaults (100ms, 1s).
type riverSettings struct {
	FetchCooldown       time.Duration
	FetchPollInterval   time.Duration
	MaxWorkers          int
	InsertFetchCooldown time.Duration
}

// tunedRiver is the bench's tuning: the app's fetch settings on the
// worker, maxWorkers, and the inserting client's FetchCooldown (its NOTIFY
// limiter) at the app's, as the api's insert-only client has it.
func tunedRiver(maxWorkers int) *riverSettings {
	return &riverSettings{FetchCooldown: app.DefaultFetchCooldown, FetchPollInterval: app.DefaultFetchPollInterval, MaxWorkers: maxWorkers,
		InsertFetchCooldown: app.DefaultFetchCooldown}
}

func startBare(ctx context.Context, db *benchDB, tn tuning, logger *slog.Logger, o bareOptions) (*bareStack, error) {
	s := &bareStack{}
	var err error
	if s.insertPool, err = db.openPool(ctx, tn.APIConns); err != nil {
		return nil, err
	}
	if s.workerPool, err = db.openPool(ctx, tn.WorkerConns); err != nil {
		s.insertPool.Close()
		return nil, err
	}
	rs := o.river
	if rs == nil {
		rs = tunedRiver(tn.MaxWorkers)
	}
	// River refuses a FetchPollInterval shorter than the FetchCooldown,
	// even on a client that fetches nothing.
	insertPoll := time.Duration(0)
	if rs.InsertFetchCooldown > river.FetchPollIntervalDefault {
		insertPoll = rs.InsertFetchCooldown
	}
	if s.inserter, err = river.NewClient(riverpgxv5.New(s.insertPool), &river.Config{FetchCooldown: rs.InsertFetchCooldown, FetchPollInterval: insertPoll, Logger: logger}); err != nil {
		s.stop()
		return nil, err
	}
	workers := river.NewWorkers()
	if o.stripeBase != "" {
		river.AddWorker(workers, &bareRefundWorker{pool: s.workerPool, refunds: newStripeRefunds(o.stripeBase)})
	} else {
		river.AddWorker(workers, &bareWorker{pool: s.workerPool})
	}
	inflight := config.DefaultInflightTimeout
	s.worker, err = river.NewClient(riverpgxv5.New(s.workerPool), &river.Config{
		Queues:               map[string]river.QueueConfig{jobs.Queue: {MaxWorkers: rs.MaxWorkers}},
		Workers:              workers,
		FetchCooldown:        rs.FetchCooldown,
		FetchPollInterval:    rs.FetchPollInterval,
		JobTimeout:           jobs.JobTimeout(inflight),
		RescueStuckJobsAfter: inflight + 2*config.DefaultReaperInterval,
		Logger:               logger,
	})
	if err != nil {
		s.stop()
		return nil, err
	}
	if o.deferStart {
		return s, nil
	}
	if err := s.startWorker(ctx); err != nil {
		s.stop()
		return nil, err
	}
	time.Sleep(300 * time.Millisecond)
	return s, nil
}

// startWorker starts the worker client.
func (s *bareStack) startWorker(ctx context.Context) error {
	return s.worker.Start(context.WithoutCancel(ctx))
}

// insert inserts one operation in its own transaction with InsertTx.
func (s *bareStack) insert(ctx context.Context, args river.JobArgs) error {
	_, err := s.insertJob(ctx, args)
	return err
}

// insertJob is insert returning the job's id.
func (s *bareStack) insertJob(ctx context.Context, args river.JobArgs) (int64, error) {
	tx, err := s.insertPool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := s.inserter.InsertTx(ctx, tx, args, jobs.InsertOpts())
	if err != nil {
		return 0, err
	}
	return res.Job.ID, tx.Commit(ctx)
}

func (s *bareStack) stop() {
	if s.worker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.worker.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			_ = err
		}
		cancel()
	}
	if s.workerPool != nil {
		s.workerPool.Close()
	}
	if s.insertPool != nil {
		s.insertPool.Close()
	}
}
