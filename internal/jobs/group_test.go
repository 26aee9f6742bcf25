package jobs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

type creditArgs struct {
	CustomerID  string `json:"customer_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

type creditResult struct {
	CustomerID string `json:"customer_id"`
}

// groupBundle is a runner of one in-transaction tool, apply_credit, whose
// effect inserts a row into group_effects, and fails, blocks or panics by
// its customer_id ("fail", "sqlerr", "hold", "panic").
type groupBundle struct {
	count   func(query string, args ...any) (int, error)
	store   *commitFails
	claims  *core.Gate
	gate    *core.Gate
	runner  *jobs.Runner
	metrics *jobs.Metrics
	hold    chan struct{}
	// runs counts the effect's runs by operation.
	mu   sync.Mutex
	runs map[string]int
}

// engines are the engines the group tests run on.
var engines = []string{gate.Postgres, gate.SQLite}

func setupGroup(t *testing.T, engine string, fault jobs.Fault) *groupBundle {
	t.Helper()
	ctx := context.Background()
	b := &groupBundle{hold: make(chan struct{}), runs: map[string]int{}}
	var (
		store core.Store
		enq   core.Enqueuer
		exec  func(query string, args ...any) error
	)
	switch engine {
	case gate.Postgres:
		_, pool := pgtest.NewDB(t)
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only
		require.NoError(t, err)
		store, enq = pgengine.New(pool), &jobs.Enqueuer[pgx.Tx]{Client: client}
		exec = func(query string, args ...any) error { _, err := pool.Exec(ctx, query, args...); return err }
		b.count = func(query string, args ...any) (n int, err error) {
			return n, pool.QueryRow(ctx, query, args...).Scan(&n)
		}
	case gate.SQLite:
		_, db := sqlitetest.NewDB(t)
		client, err := river.NewClient(riversqlite.New(db), &river.Config{}) // insert-only
		require.NoError(t, err)
		store, enq = sqliteengine.New(db), &jobs.Enqueuer[*sql.Tx]{Client: client}
		exec = func(query string, args ...any) error { _, err := db.ExecContext(ctx, query, args...); return err }
		b.count = func(query string, args ...any) (n int, err error) {
			return n, db.QueryRowContext(ctx, query, args...).Scan(&n)
		}
	}
	require.NoError(t, exec(`CREATE TABLE group_effects (operation_id text PRIMARY KEY)`))
	// Calls claim through a gate on the engine's store (River inserts
	// their jobs in its transactions); the runner's gate is on the store
	// whose commit can fail.
	b.store = &commitFails{Store: store}
	var runnerStore core.Store = b.store
	if _, ok := store.(core.PipelineBeginner); ok { // Postgres: the worker's pipelined statements, as in production
		runnerStore = &commitFailsPipelined{b.store}
	}
	var err error
	b.claims, err = core.New(&core.Config{Store: store, Enqueuer: enq, Policies: coretest.Policies()})
	require.NoError(t, err)
	b.gate, err = core.New(&core.Config{Store: runnerStore, Enqueuer: enq, Policies: coretest.Policies()})
	require.NoError(t, err)
	credit := &gate.Mutation[creditArgs, creditResult]{
		Name: "apply_credit", Title: "Credit", Description: "A credit in group_effects.", Scope: "billing:credit",
		InTx: func(ctx context.Context, tx gate.Tx, op *gate.Op[creditArgs]) (*creditResult, error) {
			b.mu.Lock()
			b.runs[op.OperationID]++
			b.mu.Unlock()
			if _, err := tx.Exec(ctx, `INSERT INTO group_effects (operation_id) VALUES ($1)`, op.OperationID); err != nil {
				return nil, err
			}
			switch op.Args.CustomerID {
			case "fail":
				return nil, gate.NothingHappened(vocab.CodeNotFound, "no such customer")
			case "sqlerr": // aborts a Postgres transaction
				_, err := tx.Exec(ctx, `SELECT no_such_column FROM group_effects`)
				return nil, err
			case "hold":
				<-b.hold
			case "panic":
				panic("the effect panicked")
			}
			return &creditResult{CustomerID: op.Args.CustomerID}, nil
		},
	}
	reg := prometheus.NewRegistry()
	b.metrics, err = jobs.NewMetrics(reg)
	require.NoError(t, err)
	b.runner, err = jobs.NewRunner(&jobs.RunnerConfig{Gate: b.gate, Tools: toolspec.Of(gate.NewRegistry().MustAdd(credit)),
		InflightTimeout: time.Minute, Metrics: b.metrics, Fault: fault})
	require.NoError(t, err)
	return b
}

// commitFails is a store whose commit number failAt (counted from its
// setting) fails, after rolling the transaction back.
type commitFails struct {
	core.Store
	failAt atomic.Int32
}

func (s *commitFails) Begin(ctx context.Context) (core.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &commitFailsTx{engineTx: tx.(engineTx), s: s}, nil
}

// engineTx is what both engines' transactions are.
type engineTx interface {
	core.Tx
	gate.Tx
	core.Savepointer
}

type commitFailsTx struct {
	engineTx
	s *commitFails
}

func (tx *commitFailsTx) Commit(ctx context.Context) error {
	if tx.s.failAt.Add(-1) == 0 {
		_ = tx.Rollback(ctx)
		return errors.New("the commit failed")
	}
	return tx.engineTx.Commit(ctx)
}

// commitFailsPipelined is commitFails on a store that pipelines a worker
// group's statements (core.PipelineBeginner, core.Pipeliner): the
// group's last commit, sent with its last completion, fails as Commit
// does.
type commitFailsPipelined struct{ *commitFails }

func (s *commitFailsPipelined) BeginLock(ctx context.Context, lock *core.ClaimLeaseParams) (core.Tx, *core.Claim, error) {
	tx, locked, err := s.Store.(core.PipelineBeginner).BeginLock(ctx, lock)
	if tx == nil {
		return nil, locked, err
	}
	return &commitFailsPipelinedTx{commitFailsTx{engineTx: tx.(engineTx), s: s.commitFails}}, locked, err
}

type commitFailsPipelinedTx struct{ commitFailsTx }

func (tx *commitFailsPipelinedTx) PipelineLock(ctx context.Context, complete *core.ClaimCompleteParams, savepoint bool, lock *core.ClaimLeaseParams) (completed, locked *core.Claim, err error) {
	return tx.engineTx.(core.Pipeliner).PipelineLock(ctx, complete, savepoint, lock)
}

func (tx *commitFailsPipelinedTx) CommitWith(ctx context.Context, complete *core.ClaimCompleteParams) (*core.Claim, error) {
	if tx.s.failAt.Add(-1) == 0 {
		_ = tx.Rollback(ctx)
		return nil, errors.New("the commit failed")
	}
	return tx.engineTx.(core.Pipeliner).CommitWith(ctx, complete)
}

// groupJob is one claim and its job's outcome.
type groupJob struct {
	claim     *core.Claim
	customer  string
	err       error
	completed atomic.Bool
}

func (b *groupBundle) claim(t *testing.T, key, customer string) *groupJob {
	t.Helper()
	c := coretest.Claim(context.Background(), t, b.claims, &coretest.ClaimOpts{Tool: "apply_credit", Key: key,
		Args: map[string]any{"customer_id": customer, "amount_cents": 100, "currency": "usd"}}).Claim
	return &groupJob{claim: c, customer: customer}
}

// run runs j's job as River's worker does, with hooks that note the
// job's completion.
func (b *groupBundle) run(j *groupJob, jobID int64) error {
	hooks := core.JobHooks{
		Complete: func(context.Context, core.Tx) error { j.completed.Store(true); return nil },
		Cancel:   func(context.Context, core.Tx) error { return nil },
	}
	return b.runner.Run(context.Background(), int(jobID), 1, jobs.MaxAttempts, refOf(j.claim), hooks)
}

// runHeld runs a held job, which forms a group of one, then the jobs,
// queued behind it so that they form one group, and returns once all
// ended; formed gets the size of every group.
func (b *groupBundle) runHeld(t *testing.T, held *groupJob, queued []*groupJob) (formed []int) {
	t.Helper()
	var mu sync.Mutex
	b.runner.HoldGroups(func(n int) { mu.Lock(); formed = append(formed, n); mu.Unlock() })
	var wg sync.WaitGroup
	wg.Go(func() { held.err = b.run(held, held.claim.JobID) })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(formed) == 1 }, time.Minute, time.Millisecond)
	for _, j := range queued {
		jobID := j.claim.JobID
		if j.customer == "other-job" {
			jobID += 1000
		}
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					j.err = fmt.Errorf("panicked: %v", p)
				}
			}()
			j.err = b.run(j, jobID)
		})
	}
	require.Eventually(t, func() bool { return b.runner.QueuedForGroup() == len(queued) }, time.Minute, time.Millisecond)
	close(b.hold)
	wg.Wait()
	return formed
}

func (b *groupBundle) claimNow(t *testing.T, c *core.Claim) *core.Claim {
	t.Helper()
	got, err := b.store.ClaimGetByID(context.Background(), &core.ClaimGetByIDParams{ID: c.ID})
	require.NoError(t, err)
	return got
}

func (b *groupBundle) effects(t *testing.T, c *core.Claim) int {
	t.Helper()
	n, err := b.count(`SELECT count(*) FROM group_effects WHERE operation_id = $1`, c.OperationID)
	require.NoError(t, err)
	return n
}

func groupSizes(t *testing.T, m *jobs.Metrics) (commits uint64, ops float64) {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.GroupSize().Write(&out))
	return out.GetHistogram().GetSampleCount(), out.GetHistogram().GetSampleSum()
}

// TestGroupCommitsConcurrentJobsTogether: jobs queued while a group runs
// form the next group, one commit for all. A job that fails in the group
// is undone to its savepoint without touching the others: an effect's
// error (definitive, or one that aborts the Postgres transaction) is
// recorded after the group as alone; a claim of another job or a panic
// runs alone.
func TestGroupCommitsConcurrentJobsTogether(t *testing.T) {
	t.Parallel()
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			b := setupGroup(t, engine, nil)
			held := b.claim(t, "group-held-0001", "hold")
			var queued []*groupJob
			for i := range 6 {
				queued = append(queued, b.claim(t, fmt.Sprintf("group-ok-%04d", i), "cus_1"))
			}
			fail := b.claim(t, "group-fail-0001", "fail")
			sqlErr := b.claim(t, "group-sqlerr-0001", "sqlerr")
			other := b.claim(t, "group-other-0001", "other-job")
			panics := b.claim(t, "group-panic-0001", "panic")
			last := b.claim(t, "group-ok-last", "cus_2")
			queued = append(queued[:3], append([]*groupJob{fail, sqlErr, other, panics}, append(queued[3:], last)...)...)

			formed := b.runHeld(t, held, queued)
			require.Equal(t, []int{1, len(queued)}, formed)

			for _, j := range append([]*groupJob{held}, queued...) {
				now := b.claimNow(t, j.claim)
				switch j.customer {
				case "fail":
					var cancel *river.JobCancelError
					require.ErrorAs(t, j.err, &cancel, "a definitive failure, recorded alone")
					require.Equal(t, vocab.StatusFailed, now.Status)
					require.Equal(t, vocab.CodeNotFound, now.Error.Code)
					require.Zero(t, b.effects(t, j.claim))
					require.Equal(t, 1, b.runs[j.claim.OperationID], "run once: its failure is recorded, as alone")
				case "sqlerr":
					require.Error(t, j.err, "a transient failure: River retries")
					require.Equal(t, vocab.StatusQueued, now.Status, "released")
					require.Equal(t, 1, now.Attempts)
					require.NotNil(t, now.LastError)
					require.Zero(t, b.effects(t, j.claim))
					require.Equal(t, 1, b.runs[j.claim.OperationID])
				case "other-job":
					require.NoError(t, j.err, "another job's claim: no effect")
					require.Equal(t, vocab.StatusQueued, now.Status)
					require.Zero(t, now.Attempts)
					require.Zero(t, b.effects(t, j.claim))
					require.False(t, j.completed.Load())
				case "panic":
					require.ErrorContains(t, j.err, "panicked: the effect panicked", "it panics alone, in the job's own goroutine")
					require.Equal(t, vocab.StatusQueued, now.Status)
					require.Zero(t, b.effects(t, j.claim))
				default:
					require.NoError(t, j.err, j.claim.IdempotencyKey)
					require.Equal(t, vocab.StatusSucceeded, now.Status, j.claim.IdempotencyKey)
					require.Equal(t, j.claim.Epoch+1, now.Epoch)
					require.JSONEq(t, fmt.Sprintf(`{"customer_id":%q}`, j.customer), string(now.Result))
					require.Equal(t, 1, b.effects(t, j.claim), "one effect")
					require.Equal(t, 1, b.runs[j.claim.OperationID], "run once")
					require.True(t, j.completed.Load(), "the job completed in the transaction")
				}
			}
			commits, ops := groupSizes(t, b.metrics)
			require.Equal(t, uint64(2), commits, "the held job's transaction and the group's")
			require.Equal(t, float64(1+len(queued)-4), ops)
			require.Equal(t, float64(1+len(queued)-4), testutil.ToFloat64(b.metrics.Downstream().WithLabelValues("database", "ok")))
		})
	}
}

// TestGroupWhoseCommitFailsRunsEachJobAlone: nothing of a group whose
// COMMIT failed holds, and each of its jobs then runs alone.
func TestGroupWhoseCommitFailsRunsEachJobAlone(t *testing.T) {
	t.Parallel()
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			b := setupGroup(t, engine, nil)
			held := b.claim(t, "commit-held-0001", "hold")
			var queued []*groupJob
			for i := range 4 {
				queued = append(queued, b.claim(t, fmt.Sprintf("commit-ok-%04d", i), "cus_1"))
			}
			b.store.failAt.Store(2) // the held job's commit goes through, the group's fails
			require.Equal(t, []int{1, len(queued)}, b.runHeld(t, held, queued))
			require.Negative(t, b.store.failAt.Load(), "the group's commit failed, and the jobs committed alone after it")
			for _, j := range append([]*groupJob{held}, queued...) {
				require.NoError(t, j.err)
				require.Equal(t, vocab.StatusSucceeded, b.claimNow(t, j.claim).Status)
				require.Equal(t, 1, b.effects(t, j.claim), "one effect")
			}
			for _, j := range queued {
				require.Equal(t, 2, b.runs[j.claim.OperationID], "in the group that failed, then alone")
			}
		})
	}
}

// TestKillInAGroupAbandonsTheWholeGroup: a fault before COMMIT of one
// job of a group ends the group as a killed process would: nothing of it
// commits, the job hit returns the fault's error and the others
// errAbandoned; run again, each succeeds once.
func TestKillInAGroupAbandonsTheWholeGroup(t *testing.T) {
	t.Parallel()
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			errKilled := errors.New("killed")
			var victim atomic.Value
			var kills atomic.Int32
			b := setupGroup(t, engine, func(ctx context.Context, at jobs.FaultPoint, c *core.Claim, tx core.Tx) error {
				if at == jobs.FaultBeforeCommit && c.OperationID == victim.Load() && kills.Add(1) == 1 {
					_ = tx.Rollback(ctx)
					return errKilled
				}
				return nil
			})
			held := b.claim(t, "kill-held-0001", "hold")
			var queued []*groupJob
			for i := range 5 {
				queued = append(queued, b.claim(t, fmt.Sprintf("kill-ok-%04d", i), "cus_1"))
			}
			victim.Store(queued[2].claim.OperationID)
			require.Equal(t, []int{1, len(queued)}, b.runHeld(t, held, queued))
			require.NoError(t, held.err)
			for i, j := range queued {
				if i == 2 {
					require.ErrorIs(t, j.err, errKilled)
				} else {
					require.ErrorContains(t, j.err, "abandoned", "job %d", i)
				}
				now := b.claimNow(t, j.claim)
				require.Equal(t, vocab.StatusQueued, now.Status, "nothing of the group committed")
				require.Equal(t, j.claim.Epoch, now.Epoch)
				require.Zero(t, b.effects(t, j.claim))
			}
			// River runs them again.
			var wg sync.WaitGroup
			for _, j := range queued {
				wg.Go(func() { j.err = b.run(j, j.claim.JobID) })
			}
			wg.Wait()
			for _, j := range queued {
				require.NoError(t, j.err)
				require.Equal(t, vocab.StatusSucceeded, b.claimNow(t, j.claim).Status)
				require.Equal(t, 1, b.effects(t, j.claim))
			}
		})
	}
}
