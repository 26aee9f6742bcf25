package app_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/mailpit"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// startWorkerProcess runs cmd/worker as its own process.
func startWorkerProcess(t *testing.T, env []string, logPath string) *exec.Cmd {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	cmd := exec.Command(buildWorker(t))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
	})
	return cmd
}

// killStack is what the kill tests share: the test Stripe (charge ch_123),
// Mailpit, a fresh Postgres database seeded with seedFile, the api in
// process on it (no worker: the tests run worker processes), an MCP
// session of acme's, and the environment of a worker process on the same.
type killStack struct {
	stripe  *stripetest.Server
	cfg     *config.Config
	pool    *pgxpool.Pool
	api     *app.API
	url     string
	session *mcp.ClientSession
	env     []string
}

// startKillStack starts a killStack whose lease is lease and whose
// reaper runs every reaperInterval; edit, when set, changes the api's
// configuration before it starts.
func startKillStack(t *testing.T, lease, reaperInterval time.Duration, edit func(*config.Config)) *killStack {
	t.Helper()
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	smtpAddr, _ := mailpit.Start(t)
	dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 20})
	_, err := pgengine.New(pool).Seed(ctx, seedFile())
	require.NoError(t, err)

	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	cfg.StripeAPIKey = "sk_test_idemgate"
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.SMTPAddr = smtpAddr
	cfg.Secret = "3f9a1c7e5b2d8046e1f7a9c3b5d2e8f041a6c9e3b7d5f2a8c0e4b6d9f1a3c5e7" // a real secret: the worker process validates it
	cfg.InflightTimeout = lease
	cfg.ReaperInterval = reaperInterval
	if edit != nil {
		edit(cfg)
	}
	a, err := app.NewAPI(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	go a.Run(runCtx)
	t.Cleanup(cancel)
	url := startHTTP(t, a)
	return &killStack{stripe: stripeSrv, cfg: cfg, pool: pool, api: a, url: url, session: connect(t, url, tokenAcme),
		env: []string{
			"DATABASE_URL=" + dbURL,
			"STRIPE_API_KEY=sk_test_idemgate",
			"STRIPE_API_BASE=" + stripeHTTP.URL,
			"SMTP_ADDR=" + smtpAddr,
			"IDEMGATE_SECRET=" + cfg.Secret,
			"IDEMGATE_INFLIGHT_TIMEOUT=" + lease.String(),
			"IDEMGATE_REAPER_INTERVAL=" + reaperInterval.String(),
			"IDEMGATE_LOG_LEVEL=debug",
			"IDEMGATE_WORKER_ADDR=127.0.0.1:0",
		}}
}

// TestWorkerKilledMidRefundResumesWithinLeaseAndReaperInterval kills the
// only worker process (River's leader) with SIGKILL at the moment the test
// Stripe has applied the refund and holds its response, and checks that the
// operation still ends succeeded, with one refund, recovered by the reaper
// (a reclaimed row) rather than River's rescuer. The time it took is
// logged, not asserted: a loaded machine may schedule the new process late.
func TestWorkerKilledMidRefundResumesWithinLeaseAndReaperInterval(t *testing.T) {
	t.Parallel()
	const (
		lease          = 5 * time.Second
		reaperInterval = time.Second
	)
	ks := startKillStack(t, lease, reaperInterval, func(cfg *config.Config) {
		cfg.DuplicateWindow = 0 // calls with the same arguments under fresh keys on purpose; the guard has remint_test.go
	})
	stripeSrv, cfg, session, env := ks.stripe, ks.cfg, ks.session, ks.env
	b := &testBundle{pool: ks.pool, api: ks.api}
	// The only worker is the victim, so it is also River's leader: its
	// successor cannot be elected before River's leadership TTL, and must
	// reap anyway (jobs.KeepReaping).
	logPath := filepath.Join(t.TempDir(), "workers.log")
	victim := startWorkerProcess(t, env, logPath)

	applied, release := stripeSrv.HoldNext()
	defer release()
	_, isErr := callTool(t, session, "refund_order", refund("refund-kill9-0001", 2000))
	require.False(t, isErr)
	select {
	case <-applied:
	case <-time.After(60 * time.Second):
		logs, _ := os.ReadFile(logPath)
		t.Fatalf("the worker never reached Stripe; its log:\n%s", logs)
	}
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()
	killedAt := time.Now()

	startWorkerProcess(t, env, logPath)
	op := awaitStatus(t, session, "refund_order", "refund-kill9-0001", vocab.StatusSucceeded)
	elapsed := time.Since(killedAt)
	t.Logf("succeeded %s after the kill (lease %s, reaper interval %s), attempts %d", elapsed.Round(time.Millisecond), lease, reaperInterval, op.Attempts)
	require.Equal(t, 2, op.Attempts, "one lease by the killed worker, one by its successor")

	downstream := intentKey(t, cfg.Secret, "acme", "refund_order", refund("refund-kill9-0001", 2000), 0)
	require.Equal(t, map[string]int{downstream: 1}, stripeSrv.RefundsByKey(), "exactly one refund at Stripe")
	require.Len(t, stripeSrv.Refunds(), 1)
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM refunds`))
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM audit_events WHERE decision = 'reclaimed'`))
}
