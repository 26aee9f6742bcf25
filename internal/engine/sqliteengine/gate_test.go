package sqliteengine_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/vocab"
)

func count(t *testing.T, db *sql.DB, query string) func(context.Context) int {
	return func(ctx context.Context) int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, query).Scan(&n))
		return n
	}
}

func newBundle(t *testing.T) *coretest.Bundle {
	_, db := sqlitetest.NewDB(t)
	client, err := river.NewClient(riversqlite.New(db), &river.Config{}) // insert-only
	require.NoError(t, err)
	return &coretest.Bundle{
		Store:    sqliteengine.New(db),
		Enqueuer: coretest.RiverEnqueuer[*sql.Tx]{Client: client},
		Control:  &jobs.Control[*sql.Tx]{Client: client},
		JobState: func(ctx context.Context, id int64) string {
			var state string
			_ = db.QueryRowContext(ctx, "SELECT state FROM river_job WHERE id = ?", id).Scan(&state)
			return state
		},
		DeleteJob: func(ctx context.Context, id int64) {
			_, err := client.JobDelete(ctx, id)
			require.NoError(t, err)
		},
		EndJob: func(ctx context.Context, id int64, state string) {
			_, err := db.ExecContext(ctx, "UPDATE river_job SET state = ?, finalized_at = datetime('now', 'subsec') WHERE id = ?", state, id)
			require.NoError(t, err)
		},
		MarkJobRunning: func(ctx context.Context, id int64, since time.Duration) {
			_, err := db.ExecContext(ctx, `UPDATE river_job SET state = 'running', attempt = attempt + 1,
				attempted_at = datetime('now', 'subsec', ?) WHERE id = ?`, fmt.Sprintf("-%.3f seconds", since.Seconds()), id)
			require.NoError(t, err)
		},
		SetClaimUpdatedAt: func(ctx context.Context, id int64, at time.Time) {
			_, err := db.ExecContext(ctx, "UPDATE idempotency_claims SET updated_at = ? WHERE id = ?", sqliteengine.FormatTime(at), id)
			require.NoError(t, err)
		},
		JobCount:   count(t, db, "SELECT count(*) FROM river_job"),
		ClaimCount: count(t, db, "SELECT count(*) FROM idempotency_claims"),
	}
}

// TestGateConformance runs the suite every core.Store passes. SQLite has no
// LISTEN, so the gate polls (Waiter nil).
func TestGateConformance(t *testing.T) {
	t.Parallel()
	coretest.Exercise(t, newBundle)
}

func TestTimesAreStoredAsFixedWidthUTCText(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, db := sqlitetest.NewDB(t)
	s := sqliteengine.New(db)
	tx, err := s.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	c, err := tx.ClaimInsert(ctx, &core.ClaimInsertParams{
		OperationID: "0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11", TenantID: "acme", Tool: "refund_order",
		IdempotencyKey: "times-key-1", Args: json.RawMessage(`{}`), ArgsHash: "h", TTL: time.Hour, JobID: 7,
	})
	require.NoError(t, err)
	// A Now override with nanoseconds and a zone is stored in UTC, to the
	// millisecond, in the same shape as the database's own clock.
	zone := time.FixedZone("UTC+5", 5*3600)
	now := time.Date(2030, 1, 2, 8, 4, 5, 123456789, zone)
	leased, err := tx.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: c.TenantID, OperationID: c.OperationID, JobID: 7, Lease: 90 * time.Second, Now: &now})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	var lease, first, created string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT lease_expires_at, first_called_at, created_at FROM idempotency_claims WHERE id = ?", c.ID).
		Scan(&lease, &first, &created))
	require.Equal(t, "2030-01-02T03:05:35.123Z", lease)
	require.Equal(t, "2030-01-02T03:04:05.123Z", first)
	require.Len(t, created, len(sqliteengine.TimeFormat))
	require.Equal(t, time.Date(2030, 1, 2, 3, 5, 35, 123000000, time.UTC), *leased.LeaseExpiresAt)
	require.Equal(t, time.UTC, leased.CreatedAt.Location())
	require.WithinDuration(t, time.Now(), leased.CreatedAt, time.Minute)
	require.True(t, leased.LeaseLive, "judged at the Now given, which is before the lease's end")
}

func TestSchemaRejectsWhatPostgresTypesWould(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, db := sqlitetest.NewDB(t)
	for name, stmt := range map[string]string{
		"TimeInAnotherShape": `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds, created_at)
			VALUES ('0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11', 'a', 't', 'k', '{}', 'h', 'queued', 60, '2030-01-02 03:04:05')`,
		"InvalidJSON": `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds)
			VALUES ('0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11', 'a', 't', 'k', '{', 'h', 'queued', 60)`,
		"NotAUUID": `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds)
			VALUES ('op-1', 'a', 't', 'k', '{}', 'h', 'queued', 60)`,
		"TerminalWithoutExpiry": `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds)
			VALUES ('0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11', 'a', 't', 'k', '{}', 'h', 'succeeded', 60)`,
		"TextInIntegerColumn": `INSERT INTO idempotency_claims (operation_id, tenant_id, tool, idempotency_key, args, args_hash, status, ttl_seconds)
			VALUES ('0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11', 'a', 't', 'k', '{}', 'h', 'queued', 'sixty')`,
		"OrderOfUnknownTenant": `INSERT INTO refunds (tenant_id, order_id, operation_id, stripe_refund_id, amount_cents, currency, status)
			VALUES ('a', 'ord_none', '0b4c3c1e-5f0a-4c43-9a38-3f3b6f0e8a11', 're_1', 1, 'usd', 'succeeded')`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.Error(t, err, name)
	}
}

func TestAuditIsAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, db := sqlitetest.NewDB(t)
	s := sqliteengine.New(db)
	require.NoError(t, s.AuditInsert(ctx, &core.AuditInsertParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "k-append-1", Decision: vocab.DecisionDenied}))
	_, err := db.ExecContext(ctx, "UPDATE audit_events SET reason = 'x'")
	require.ErrorContains(t, err, "append-only")
	_, err = db.ExecContext(ctx, "DELETE FROM audit_events")
	require.ErrorContains(t, err, "append-only")
	events, err := s.AuditListByKey(ctx, &core.AuditListByKeyParams{TenantID: "acme", Tool: "refund_order", IdempotencyKey: "k-append-1"})
	require.NoError(t, err)
	require.Len(t, events, 1)
}

func TestRollbackAfterCommitIsNoop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, db := sqlitetest.NewDB(t)
	tx, err := sqliteengine.New(db).Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, tx.Rollback(ctx))
}

// Two processes on one file: a writer holding the write lock past the
// busy timeout makes the other's write fail with vocab.ErrUnavailable, and
// the wait ends early when the caller's deadline does.
func TestBusyFileIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, db := sqlitetest.NewDB(t)
	other := sqliteengine.New(sqlitetest.Open(t, path))

	holder, err := sqliteengine.New(db).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()

	shortCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = other.Begin(shortCtx)
	require.ErrorIs(t, err, vocab.ErrUnavailable)
	require.Less(t, time.Since(start), sqliteengine.BusyTimeout/2)

	// SQLITE_BUSY itself, after the busy timeout (shortened on the other
	// process's only connection).
	_, err = other.DB().ExecContext(ctx, "PRAGMA busy_timeout = 100")
	require.NoError(t, err)
	err = other.AuditInsert(ctx, &core.AuditInsertParams{TenantID: "acme", Tool: "t", Decision: vocab.DecisionDenied})
	require.ErrorIs(t, err, vocab.ErrUnavailable)
	require.ErrorContains(t, err, "SQLITE_BUSY")
}

func TestConcurrentWritersOnTwoConnectionsDoNotFail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, db := sqlitetest.NewDB(t)
	stores := []*sqliteengine.Store{sqliteengine.New(db), sqliteengine.New(sqlitetest.Open(t, path))}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[i%2]
			tx, err := s.Begin(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = tx.Rollback(ctx) }()
			// Read, then write: under a deferred BEGIN this upgrade could
			// fail with SQLITE_BUSY_SNAPSHOT; BEGIN IMMEDIATE avoids it.
			if _, err := tx.AuditListByKey(ctx, &core.AuditListByKeyParams{TenantID: "acme", Tool: "t", IdempotencyKey: "k"}); err != nil {
				errs <- err
				return
			}
			if err := tx.AuditInsert(ctx, &core.AuditInsertParams{TenantID: "acme", Tool: "t", IdempotencyKey: "k", Decision: vocab.DecisionDenied}); err != nil {
				errs <- err
				return
			}
			errs <- tx.Commit(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	events, err := stores[0].AuditListByKey(ctx, &core.AuditListByKeyParams{TenantID: "acme", Tool: "t", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.Len(t, events, 40)
}

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("Pragmas", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, db := sqlitetest.NewEmptyDB(t)
		var journal string
		var fk, busy, sync int
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&journal))
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk))
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy))
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync))
		require.Equal(t, "wal", journal)
		require.Equal(t, 1, fk)
		require.Equal(t, int(sqliteengine.BusyTimeout.Milliseconds()), busy)
		require.Equal(t, 1, sync, "NORMAL")
		require.Equal(t, 1, db.Stats().MaxOpenConnections)
	})

	t.Run("PathWithURICharacters", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a dir?x=1#frag%20", "db.sqlite3")
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		db, err := sqliteengine.Open(path)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(t.Context(), "CREATE TABLE t (x INTEGER)")
		require.NoError(t, err)
		require.FileExists(t, path)
	})

	t.Run("MissingDirectoryIsUnavailable", func(t *testing.T) {
		t.Parallel()
		_, err := sqliteengine.Open(filepath.Join(t.TempDir(), "no", "such", "dir", "db.sqlite3"))
		require.ErrorIs(t, err, vocab.ErrUnavailable)
	})

	t.Run("EmptyPath", func(t *testing.T) {
		t.Parallel()
		_, err := sqliteengine.Open("")
		require.ErrorContains(t, err, "path is empty")
	})
}

// claimWorker is a minimal worker on the gate's store: it takes the lease in
// one transaction and completes the claim and the River job in another, as
// package jobs does.
type claimWorker struct {
	river.WorkerDefaults[coretest.JobArgs]
	store *sqliteengine.Store
}

func (w *claimWorker) Work(ctx context.Context, job *river.Job[coretest.JobArgs]) error {
	tx, err := w.store.Begin(ctx)
	if err != nil {
		return err
	}
	leased, err := tx.ClaimLease(ctx, &core.ClaimLeaseParams{TenantID: job.Args.TenantID, OperationID: job.Args.OperationID, JobID: job.ID, Lease: time.Minute})
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}

	tx, err = w.store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.ClaimComplete(ctx, &core.ClaimCompleteParams{ID: leased.ID, Epoch: leased.Epoch, Result: json.RawMessage(`{"ok":true}`)}); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riversqlite.Driver](ctx, tx.(*sqliteengine.Tx).DriverTx(), job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// A River client with workers shares the single connection with the gate:
// claims, leases and completions interleave with River's own fetching and
// completing without deadlock or SQLITE_BUSY.
func TestRiverWorkersShareTheConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, db := sqlitetest.NewDB(t)
	s := sqliteengine.New(db)
	workers := river.NewWorkers()
	river.AddWorker(workers, &claimWorker{store: s})
	client, err := river.NewClient(riversqlite.New(db), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 8}},
		Workers:           workers,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})

	// Everything queues for the one connection; under -race modernc's
	// transpiled SQLite runs over ten times slower, so give each claim more
	// than the default two seconds, as a busy SQLite deployment would.
	g, err := core.New(&core.Config{Store: s, Enqueuer: coretest.RiverEnqueuer[*sql.Tx]{Client: client}, Policies: coretest.Policies(),
		DBTimeout: 30 * time.Second})
	require.NoError(t, err)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := coretest.Claim(ctx, t, g, &coretest.ClaimOpts{Key: fmt.Sprintf("shared-conn-%03d", i)})
			require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		var succeeded int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM idempotency_claims WHERE status = 'succeeded' AND result = '{\"ok\":true}'").Scan(&succeeded))
		return succeeded == n
	}, 60*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		var completed int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&completed))
		return completed == n
	}, 60*time.Second, 50*time.Millisecond)
}
