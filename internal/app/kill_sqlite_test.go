package app_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// SQLiteKillMargin is what TestSQLiteProcessKilledMidRefund allows beyond
// one reaper interval, counted from when the lease had expired and the
// restarted process answered /readyz: the reaper job's insert, fetch and
// transaction on a loaded machine. Before the embedded process reaped by
// itself (jobs.KeepReaping), the claim came back only after River's
// leadership moved to the new process, about 15s later.
const SQLiteKillMargin = 3 * time.Second

// TestSQLiteProcessKilledMidRefundRecoversWithinLeaseAndReaperInterval
// kills the embedded process (api and worker on one SQLite file) with
// SIGKILL while the test Stripe holds the applied refund's answer, starts
// it again on the same file, and checks from the audit rows that the
// reaper, not River's rescuer, reclaimed the claim within the lease plus
// one reaper interval (plus SQLiteKillMargin) of its start, or of the
// restart when that came later; one refund in all.
func TestSQLiteProcessKilledMidRefundRecoversWithinLeaseAndReaperInterval(t *testing.T) {
	t.Parallel()
	const (
		lease          = 5 * time.Second
		reaperInterval = 500 * time.Millisecond
	)
	ctx := context.Background()
	bin := buildAPI(t)
	stripeSrv, stripeHTTP := stripetest.Start(t, nil)
	stripeSrv.AddCharge("ch_123", 5000, "usd")

	path := filepath.Join(t.TempDir(), "idemgate.db")
	db, err := sqliteengine.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = sqliteengine.Migrate(ctx, db, nil)
	require.NoError(t, err)
	_, err = builtins.MigrateSQLite(ctx, db, nil)
	require.NoError(t, err)
	_, err = sqliteengine.New(db).Seed(ctx, seedFile())
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	env := []string{
		"DATABASE_URL=sqlite:" + path,
		"IDEMGATE_API_ADDR=" + addr,
		"STRIPE_API_KEY=sk_test_idemgate",
		"STRIPE_API_BASE=" + stripeHTTP.URL,
		"IDEMGATE_SECRET=3f9a1c7e5b2d8046e1f7a9c3b5d2e8f041a6c9e3b7d5f2a8c0e4b6d9f1a3c5e7",
		"IDEMGATE_INFLIGHT_TIMEOUT=" + lease.String(),
		"IDEMGATE_REAPER_INTERVAL=" + reaperInterval.String(),
		"IDEMGATE_WAIT=0",
		"IDEMGATE_LOG_LEVEL=debug",
	}
	logPath := filepath.Join(t.TempDir(), "api.log")
	start := func() *exec.Cmd {
		logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logFile.Close()
		})
		ready := false
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready = true
					break
				}
			}
		}
		if !ready {
			logs, _ := os.ReadFile(logPath)
			t.Fatalf("the api never answered /readyz; its log:\n%s", logs)
		}
		return cmd
	}

	victim := start()
	applied, release := stripeSrv.HoldNext()
	defer release()
	first, isErr := callTool(t, connect(t, "http://"+addr, tokenAcme), "refund_order", refund("refund-sqlite-kill9", 2000))
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

	start()
	readyAt := time.Now()
	op := awaitStatus(t, connect(t, "http://"+addr, tokenAcme), "refund_order", "refund-sqlite-kill9", vocab.StatusSucceeded)
	require.Equal(t, 2, op.Attempts, "one lease by the killed process, one after the restart")

	// From the audit rows: the first attempt's start and the reclaim.
	var started, reclaimed string
	var nReclaimed int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT min(created_at) FROM audit_events
		WHERE operation_id = ? AND decision = 'started'`, first.Operation.OperationID).Scan(&started))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*), coalesce(min(created_at), '') FROM audit_events
		WHERE operation_id = ? AND decision = 'reclaimed'`, first.Operation.OperationID).Scan(&nReclaimed, &reclaimed))
	require.Equal(t, 1, nReclaimed, "reclaimed once, by the reaper")
	startedAt, err := time.Parse(time.RFC3339Nano, started)
	require.NoError(t, err)
	reclaimedAt, err := time.Parse(time.RFC3339Nano, reclaimed)
	require.NoError(t, err)
	from := startedAt.Add(lease)
	if readyAt.After(from) {
		from = readyAt
	}
	t.Logf("reclaimed %s after the first attempt started, %s after the kill, %s after the restart was ready (lease %s, reaper interval %s)",
		reclaimedAt.Sub(startedAt).Round(time.Millisecond), reclaimedAt.Sub(killedAt).Round(time.Millisecond),
		reclaimedAt.Sub(readyAt).Round(time.Millisecond), lease, reaperInterval)
	require.LessOrEqual(t, reclaimedAt.Sub(from), reaperInterval+SQLiteKillMargin,
		"reclaimed within one reaper interval (+%s) of the lease's end or the restart, whichever came later", SQLiteKillMargin)

	downstream := intentKey(t, "3f9a1c7e5b2d8046e1f7a9c3b5d2e8f041a6c9e3b7d5f2a8c0e4b6d9f1a3c5e7", "acme", "refund_order",
		refund("refund-sqlite-kill9", 2000), 0)
	require.Equal(t, map[string]int{downstream: 1}, stripeSrv.RefundsByKey(), "exactly one refund at Stripe")
}
