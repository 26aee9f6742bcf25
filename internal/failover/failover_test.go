// Package failover_test loses the last commits for real, as an asynchronous
// standby's promotion and a restore from a backup do, and checks that the
// agent's retry of a refund whose claim was lost makes no second refund:
// the same intent gets the same downstream key (see docs/design.md,
// "Downstream keys from the intent"). Each test starts Postgres clusters of
// its own (initdb, pg_basebackup) from /usr/lib/postgresql/*/bin.
package failover_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

const (
	token  = "idg_failover_acme_support"
	secret = "failover-test-secret-3f9a1c7e5b2d8046e1f7a9c3b5d2e8f0"
	key    = "refund-failover-0001"
)

// TestFailoverToAnAsyncStandbyMakesNoSecondRefund: a refund reaches
// Stripe, the primary is killed before its commits reach the standby, the
// standby is promoted without the claim, and the agent's retry (api and
// worker reconnecting through a multi-host DATABASE_URL) claims the intent
// again under a new operation id: the same downstream key, so exactly one
// refund at Stripe, and the audit says which refund was adopted from which
// lost operation.
func TestFailoverToAnAsyncStandbyMakesNoSecondRefund(t *testing.T) {
	t.Parallel()
	pg := newPG(t)
	primary := pg.initdb(t, "primary")
	primary.start(t)
	prepare(t, primary.url())

	standby := pg.basebackup(t, primary, "standby", true)
	standby.start(t)
	// The standby has everything so far (the schema, the seed); then it
	// stops receiving the primary's WAL, so what the primary commits from
	// here on is certainly lost at the promotion. Pausing replay alone is
	// not enough: a promotion first replays every WAL record already
	// received.
	waitCaughtUp(t, primary, standby)
	standby.exec(t, `ALTER SYSTEM SET primary_conninfo = ''`)
	standby.exec(t, `SELECT pg_reload_conf()`)
	require.Eventually(t, func() bool {
		return standby.count(t, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walreceiver'`) == 0
	}, 30*time.Second, 50*time.Millisecond, "the standby's WAL receiver did not stop")
	standby.exec(t, `SELECT pg_wal_replay_pause()`)

	dbURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.port, standby.port)
	h := startServices(t, dbURL)

	lost := h.refund(t)
	require.Equal(t, 1, primary.count(t, `SELECT count(*) FROM idempotency_claims`))

	primary.kill(t)
	standby.promote(t)
	require.Equal(t, 0, standby.count(t, `SELECT count(*) FROM idempotency_claims`), "the claim was lost with the primary")

	h.retryAfterLoss(t, standby, lost)
}

// TestRestoreFromABackupMakesNoSecondRefund: a backup is taken, a refund
// reaches Stripe, and the database is restored from the backup (on the same
// address) without the claim: the agent's retry makes no second refund.
func TestRestoreFromABackupMakesNoSecondRefund(t *testing.T) {
	t.Parallel()
	pg := newPG(t)
	primary := pg.initdb(t, "primary")
	primary.start(t)
	prepare(t, primary.url())
	backup := pg.basebackup(t, primary, "backup", false)

	h := startServices(t, primary.url()+"&connect_timeout=2")
	lost := h.refund(t)

	primary.kill(t)
	restored := backup
	restored.port = primary.port // restored where the old one was
	restored.start(t)
	require.Equal(t, 0, restored.count(t, `SELECT count(*) FROM idempotency_claims`), "the backup predates the claim")

	h.retryAfterLoss(t, restored, lost)
}

// pg runs Postgres's binaries, as the postgres user when the test runs as
// root (initdb and postgres refuse root).
type pg struct {
	bin string
	as  []string
	dir string
}

func newPG(t *testing.T) *pg {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(bins, func(i, j int) bool { return version(bins[i]) < version(bins[j]) })
	initdb := ""
	if len(bins) > 0 {
		initdb = bins[len(bins)-1]
	} else if p, err := exec.LookPath("initdb"); err == nil {
		initdb = p
	}
	if initdb == "" {
		skipUnlessFull(t, "initdb not found (looked in /usr/lib/postgresql/*/bin and PATH): install Postgres to run the failover tests")
	}
	p := &pg{bin: filepath.Dir(initdb)}
	dir, err := os.MkdirTemp("", "idemgate-failover-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipUnlessFull(t, "running as root without a postgres user to run Postgres as (useradd -r postgres)")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
		p.as = []string{"runuser", "-u", "postgres", "--"}
	}
	p.dir = dir
	return p
}

func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

func (p *pg) run(t *testing.T, name string, args ...string) {
	t.Helper()
	argv := append(append([]string{}, p.as...), append([]string{filepath.Join(p.bin, name)}, args...)...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(argv, " "), out)
}

// server is one cluster's data directory and port.
type server struct {
	pg   *pg
	name string
	data string
	port int
}

func (p *pg) initdb(t *testing.T, name string) *server {
	t.Helper()
	s := &server{pg: p, name: name, data: filepath.Join(p.dir, name), port: freePort(t)}
	p.run(t, "initdb", "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	return s
}

// basebackup copies from's cluster into a new one: a streaming standby
// (standby.signal and primary_conninfo) or a plain backup to restore.
func (p *pg) basebackup(t *testing.T, from *server, name string, standby bool) *server {
	t.Helper()
	s := &server{pg: p, name: name, data: filepath.Join(p.dir, name), port: freePort(t)}
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(from.port), "-U", "postgres", "-D", s.data, "-X", "stream", "--no-sync"}
	if standby {
		args = append(args, "-R")
	}
	p.run(t, "pg_basebackup", args...)
	return s
}

func (s *server) start(t *testing.T) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40 -c wal_level=replica -c max_wal_senders=4 -c hot_standby=on",
		s.port, s.pg.dir)
	s.pg.run(t, "pg_ctl", "-D", s.data, "-l", filepath.Join(s.pg.dir, s.name+".log"), "-w", "-t", "60", "-o", opts, "start")
	t.Cleanup(func() {
		argv := append(append([]string{}, s.pg.as...), filepath.Join(s.pg.bin, "pg_ctl"), "-D", s.data, "-m", "immediate", "-w", "stop")
		_ = exec.Command(argv[0], argv[1:]...).Run()
	})
}

// kill SIGKILLs the postmaster and waits until its port is free: the
// primary dies with whatever it had not sent anywhere.
func (s *server) kill(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(raw), "\n", 2)[0])
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return false
		}
		// The backends notice the postmaster's death and exit; a restart
		// needs the data directory's lock gone too.
		return syscall.Kill(pid, 0) != nil
	}, 30*time.Second, 50*time.Millisecond, "the killed server still answers")
	_ = os.Remove(filepath.Join(s.data, "postmaster.pid"))
}

func (s *server) promote(t *testing.T) {
	t.Helper()
	s.pg.run(t, "pg_ctl", "-D", s.data, "-w", "-t", "60", "promote")
	require.Eventually(t, func() bool {
		return s.count(t, `SELECT CASE WHEN pg_is_in_recovery() THEN 0 ELSE 1 END`) == 1
	}, 30*time.Second, 50*time.Millisecond, "the standby did not leave recovery")
}

func (s *server) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

func (s *server) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.url())
	require.NoError(t, err)
	return c
}

func (s *server) exec(t *testing.T, sql string) {
	t.Helper()
	c := s.conn(t)
	defer c.Close(context.Background())
	_, err := c.Exec(context.Background(), sql)
	require.NoError(t, err, sql)
}

func (s *server) count(t *testing.T, sql string) int {
	t.Helper()
	c := s.conn(t)
	defer c.Close(context.Background())
	var n int
	require.NoError(t, c.QueryRow(context.Background(), sql).Scan(&n), sql)
	return n
}

func waitCaughtUp(t *testing.T, primary, standby *server) {
	t.Helper()
	c := primary.conn(t)
	var lsn string
	require.NoError(t, c.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	_ = c.Close(context.Background())
	require.Eventually(t, func() bool {
		return standby.count(t, `SELECT CASE WHEN pg_last_wal_replay_lsn() >= '`+lsn+`'::pg_lsn THEN 1 ELSE 0 END`) == 1
	}, 30*time.Second, 50*time.Millisecond, "the standby did not replay up to %s", lsn)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// prepare migrates and seeds the first primary: an order of acme's and the
// agent's token.
func prepare(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns=2")
	require.NoError(t, err)
	defer pool.Close()
	_, err = pgengine.Migrate(ctx, pool, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	_, err = builtins.MigratePostgres(ctx, pool, nil)
	require.NoError(t, err)
	_, err = pgengine.New(pool).Seed(ctx, &store.SeedFile{
		Rows:   &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_9f2", ChargeID: "ch_123", AmountCents: 5000, Currency: "usd"}}},
		Tokens: []store.SeedToken{{Tenant: "acme", User: "support-bot", Scopes: []string{"billing:refund", "operations:read"}, Token: token}},
	})
	require.NoError(t, err)
}

// services are an api and a worker on dbURL, and the test Stripe.
type services struct {
	url    string
	stripe *stripetest.Server
}

func startServices(t *testing.T, dbURL string) *services {
	t.Helper()
	ctx := context.Background()
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 10 * time.Second
	cfg.StripeAPIKey = stripetest.TestAPIKey
	cfg.StripeAPIBase = stripeHTTP.URL
	cfg.Secret = secret
	cfg.InflightTimeout = 5 * time.Second
	cfg.ReaperInterval = time.Second
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	apiPool, err := pgengine.OpenPostgres(ctx, dbURL, 4, logger)
	require.NoError(t, err)
	workerPool, err := pgengine.OpenPostgres(ctx, dbURL, 4, logger)
	require.NoError(t, err)
	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(apiPool, cfg.Pooled()), logger, &app.APIOptions{RateLimit: -1})
	require.NoError(t, err)
	w, err := app.NewWorker(cfg, pgengine.NewDriver(workerPool, cfg.Pooled()), logger, &app.WorkerOptions{MaxWorkers: 2})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	apiDone, workerDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(apiDone); a.Run(runCtx) }()
	go func() { defer close(workerDone); _ = w.Run(runCtx, 5*time.Second) }()
	srv := httptest.NewServer(a.Handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-apiDone
		<-workerDone
		apiPool.Close()
		workerPool.Close()
	})
	return &services{url: srv.URL, stripe: stripeSrv}
}

// answer is the REST twin's answer to refund_order.
type answer struct {
	Outcome   vocab.Outcome    `json:"outcome"`
	Operation *vocab.Operation `json:"operation"`
}

// call is the agent's refund of 1500 cents of ord_9f2 with key, retried
// while the api answers anything but 200 (the database is away).
func (h *services) call(t *testing.T) *answer {
	t.Helper()
	body := []byte(`{"order_id":"ord_9f2","amount_cents":1500,"reason":"customer asked"}`)
	var out *answer
	require.Eventually(t, func() bool {
		req, err := http.NewRequest(http.MethodPost, h.url+"/v1/tools/refund_order", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Logf("the api answered %d: %s", resp.StatusCode, raw)
			return false
		}
		var a answer
		require.NoError(t, json.Unmarshal(raw, &a), "%s", raw)
		if a.Operation == nil || a.Operation.Status != vocab.StatusSucceeded {
			return false // in flight: the agent polls by retrying
		}
		out = &a
		return true
	}, 45*time.Second, 200*time.Millisecond, "the refund never answered succeeded")
	return out
}

// refund makes the refund that is about to be lost.
func (h *services) refund(t *testing.T) *answer {
	t.Helper()
	first := h.call(t)
	require.Equal(t, vocab.OutcomeAccepted, first.Outcome)
	require.Len(t, h.stripe.Refunds(), 1, "the refund reached Stripe")
	return first
}

// retryAfterLoss is the agent's retry once the database lost the claim:
// accepted again under a new operation id, succeeded with the first
// refund, exactly one refund at Stripe, and the operator's view (what
// idemctl op get prints) saying which refund it adopted from which lost
// operation.
func (h *services) retryAfterLoss(t *testing.T, now *server, lost *answer) {
	t.Helper()
	retry := h.call(t)
	require.Equal(t, vocab.OutcomeAccepted, retry.Outcome, "the database never saw the key")
	require.NotEqual(t, lost.Operation.OperationID, retry.Operation.OperationID)
	require.JSONEq(t, string(lost.Operation.Result), string(retry.Operation.Result), "the same refund")

	require.Len(t, h.stripe.Refunds(), 1, "exactly one refund at Stripe")
	byKey := h.stripe.RefundsByKey()
	require.Len(t, byKey, 1)
	for k, n := range byKey {
		require.Equal(t, 1, n, k)
		require.Regexp(t, `^idg_[0-9a-f]{32}_0$`, k)
	}
	require.Equal(t, map[string]int{lost.Operation.OperationID: 1}, h.stripe.RefundsByMetadata(refunds.MetadataOperationID),
		"the refund names the lost operation")

	pool, err := pgxpool.New(context.Background(), now.url()+"&pool_max_conns=1")
	require.NoError(t, err)
	defer pool.Close()
	detail, err := ops.GetOperation(context.Background(), pgengine.New(pool), "acme", "refund_order", key)
	require.NoError(t, err)
	view, err := json.MarshalIndent(detail, "", "  ")
	require.NoError(t, err)
	t.Logf("idemctl op get --tenant acme --tool refund_order --key %s:\n%s", key, view)
	require.Equal(t, retry.Operation.OperationID, detail.OperationID)
	require.Equal(t, vocab.StatusSucceeded, detail.Status)
	var adoption string
	for _, e := range detail.Audit {
		if e.Decision == vocab.DecisionReplayed && strings.Contains(e.Reason, "adopted Stripe refund") {
			adoption = e.Reason
		}
	}
	require.Contains(t, adoption, "made by operation "+lost.Operation.OperationID, "the audit says what happened")
	require.Contains(t, adoption, "which this database does not know")
}

// skipUnlessFull skips t for a missing tool, except in the full suite
// (scripts/test.sh sets IDEMGATE_TEST_FULL), where a test that cannot run
// fails rather than letting the run stay green without it.
func skipUnlessFull(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("IDEMGATE_TEST_FULL") != "" {
		t.Fatal(why + " (IDEMGATE_TEST_FULL is set: the full suite runs every test)")
	}
	t.Skip(why)
}
