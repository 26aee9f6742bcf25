package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
)

// costTracer counts what idemgate asks of Postgres: round trips (every
// statement, BEGIN and COMMIT included) and commits, of the transactions
// and statements that touch idemgate's own tables. River's background
// work (fetching, leader election, its maintenance) touches none of them
// outside our transactions and is not counted, so the counts are exact.
type costTracer struct {
	mu sync.Mutex
	// open holds, per connection, the statements of the transaction in
	// progress and whether it touched our tables.
	open map[*pgx.Conn]*txCost
	// roundTrips and commits are the totals counted so far; claimVersions
	// counts the statements that write a claim row (each insert or update
	// writes one version of it).
	roundTrips, commits, claimVersions int
	// tokenReads counts the round trips (included above) that read a
	// token: one per token every five seconds (the authenticator's cache).
	tokenReads int
	// guardStatements counts the statements that touch the duplicate
	// guard (fingerprint_guards): each probes its primary key once.
	guardStatements int
}

type txCost struct {
	statements int
	ours       bool
}

var ourTables = []string{"idempotency_claims", "audit_events", "idempotency_tombstones", "ledger_entries", "seats", "api_tokens"}

// maintenance are the reaper's and the pruner's statements (on their
// own, outside transactions), which run on River's schedule, not per call;
// riverOccasional are River's insert notification and version check, which
// it sends at most once per queue per interval and once per process. Both
// are left out so that the counts are exact.
var (
	maintenance     = []string{"lease_expires_at <=", "from river_job j", "with doomed", "delete from idempotency_tombstones"}
	riverOccasional = []string{"name: pgnotifymany", "name: pggetproductandversion"}
)

func containsAny(sql string, subs []string) bool {
	for _, m := range subs {
		if strings.Contains(sql, m) {
			return true
		}
	}
	return false
}

func touchesOurs(sql string) bool {
	if containsAny(sql, maintenance) {
		return false
	}
	for _, t := range ourTables {
		if strings.Contains(sql, t) {
			return true
		}
	}
	return false
}

func (c *costTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	sql := strings.TrimSpace(strings.ToLower(data.SQL))
	c.mu.Lock()
	defer c.mu.Unlock()
	// The reaper writes no claim of a healthy operation.
	if containsAny(sql, []string{"insert into idempotency_claims", "update idempotency_claims"}) {
		c.claimVersions++
	}
	if strings.Contains(sql, "fingerprint_guards") && !containsAny(sql, maintenance) {
		c.guardStatements++
	}
	tx := c.open[conn]
	switch {
	case strings.HasPrefix(sql, "begin"):
		c.open[conn] = &txCost{statements: 1}
	case tx != nil && (sql == "commit" || sql == "rollback"):
		delete(c.open, conn)
		if tx.ours {
			c.roundTrips += tx.statements + 1
			if sql == "commit" {
				c.commits++
			}
		}
	case containsAny(sql, riverOccasional):
	case tx != nil:
		tx.statements++
		tx.ours = tx.ours || touchesOurs(sql)
	case touchesOurs(sql):
		if strings.Contains(sql, "api_tokens") {
			c.tokenReads++
		}
		c.roundTrips++ // a statement on its own
		if !strings.HasPrefix(sql, "select") {
			c.commits++ // a write commits on its own
		}
	}

	return ctx
}

func (c *costTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch (the worker's pipelined statements) as
// the one round trip pgx sends it in, inside its transaction; its claim
// writes count one version each.
func (c *costTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	tx := c.open[conn]
	committed := false
	for _, q := range data.Batch.QueuedQueries {
		sql := strings.TrimSpace(strings.ToLower(q.SQL))
		switch {
		case strings.HasPrefix(sql, "begin"):
			tx = &txCost{}
			c.open[conn] = tx
		case sql == "commit":
			committed = true
		}
		if containsAny(sql, []string{"insert into idempotency_claims", "update idempotency_claims"}) {
			c.claimVersions++
		}
		if tx == nil {
			panic("costTracer: a batch outside a transaction")
		}
		tx.ours = tx.ours || touchesOurs(sql)
	}
	tx.statements++
	if committed {
		delete(c.open, conn)
		if tx.ours {
			c.roundTrips += tx.statements
			c.commits++
		}
	}
	return ctx
}

func (c *costTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *costTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the counts since the last take.
func (c *costTracer) take() (roundTrips, commits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	roundTrips, commits = c.roundTrips, c.commits
	c.roundTrips, c.commits = 0, 0
	return roundTrips, commits
}

// takeVersions returns the claim versions written since the last call.
func (c *costTracer) takeVersions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.claimVersions
	c.claimVersions = 0
	return n
}

func tracedPool(t *testing.T, dbURL string, tracer *costTracer) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	pc.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestCostPerCall guards what a call costs the database: round trips and
// commits per accept, per replay, and per operation of an in-transaction
// tool end to end (the call plus the worker). It fails when a change makes
// them grow; lower them here when a change makes them shrink.
func TestCostPerCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, seedPool := pgtest.NewDB(t)
	_, err := pgengine.New(seedPool).Seed(ctx, seedFile())
	require.NoError(t, err)
	tracer := &costTracer{open: map[*pgx.Conn]*txCost{}}
	pool := tracedPool(t, dbURL, tracer)
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 0
	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil, &app.APIOptions{RateLimit: -1})
	require.NoError(t, err)
	url := serveAPI(ctx, t, a)

	// credit credits an amount of key's own (its kind's base plus its
	// number): apply_credit guards against re-minted keys, and the same
	// credit under two keys would be held as a possible duplicate.
	base := map[string]int{"warmup": 1000, "accept": 2000, "group": 3000, "lone": 4000}
	credit := func(key string) int {
		var kind string
		var n int
		_, err := fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(key, "cost-"), "-", " "), "%s %d", &kind, &n)
		require.NoError(t, err, key)
		r := doHTTP(t, http.MethodPost, url+"/v1/tools/apply_credit", tokenAcme,
			fmt.Appendf(nil, `{"customer_id":"cus_1","amount_cents":%d,"currency":"usd"}`, base[kind]+n), false, "Idempotency-Key", key)
		require.False(t, r.status == http.StatusConflict && r.code() == "possible_duplicate", r.raw)
		return r.status
	}
	guards := func() int {
		tracer.mu.Lock()
		defer tracer.mu.Unlock()
		n := tracer.guardStatements
		tracer.guardStatements = 0
		return n
	}
	_, err = seedPool.Exec(ctx, `INSERT INTO customers (tenant_id, customer_id, currency) VALUES ('acme', 'cus_1', 'usd')`)
	require.NoError(t, err)
	// A read warms the token cache: the counts below are the calls' own.
	// So does a first accept: River checks the server's version once and
	// notifies its first insert.
	require.Equal(t, http.StatusOK, doHTTP(t, http.MethodGet, url+"/v1/operations", tokenAcme, nil, false).status)
	require.Equal(t, http.StatusAccepted, credit("cost-warmup-0001"))
	tracer.take()
	tracer.takeVersions()
	guards()

	const n = 5
	for i := range n {
		require.Equal(t, http.StatusAccepted, credit(fmt.Sprintf("cost-accept-%04d", i)))
	}
	acceptTrips, acceptCommits := tracer.take()
	acceptVersions := tracer.takeVersions()
	acceptGuards := guards()
	for i := range n {
		require.Equal(t, http.StatusConflict, credit(fmt.Sprintf("cost-accept-%04d", i)), "in flight: the handle")
	}
	inFlightTrips, inFlightCommits := tracer.take()
	inFlightVersions := tracer.takeVersions()
	inFlightGuards := guards()

	// The worker's built-in tools need their settings; apply_credit calls
	// none of them.
	cfg.StripeAPIKey, cfg.StripeAPIBase = "sk_test_cost", "http://127.0.0.1:1"
	cfg.Secret = strings.Repeat("s", 32)
	succeeded := func() int {
		return countRows(t, seedPool, `SELECT count(*) FROM idempotency_claims WHERE status = 'succeeded'`)
	}
	// work runs a worker process until want claims have succeeded.
	work := func(maxWorkers, want int) {
		t.Helper()
		w, err := app.NewWorker(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil, &app.WorkerOptions{MaxWorkers: maxWorkers})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx, 10*time.Second) }()
		require.Eventually(t, func() bool { return succeeded() == want }, 2*time.Minute, 20*time.Millisecond)
		stop()
		require.NoError(t, <-done)
	}
	work(2, n+1)
	workTrips, workCommits := tracer.take()
	workVersions := tracer.takeVersions()
	workGuards := guards()

	for i := range n {
		require.Equal(t, http.StatusOK, credit(fmt.Sprintf("cost-accept-%04d", i)), "replayed")
	}
	replayTrips, replayCommits := tracer.take()
	replayVersions := tracer.takeVersions()
	replayGuards := guards()
	// The duplicate guard: one statement touches it per accept (the
	// claiming statement itself, one probe of its primary key and one row
	// written: no round trip of its own); none per retry, replay or
	// worker operation.
	t.Logf("duplicate guard statements: accept %d, in flight %d, replay %d, worker %d", acceptGuards, inFlightGuards, replayGuards, workGuards)
	require.Equal(t, n, acceptGuards, "the guard is in the claiming statement, once per accept")
	require.Zero(t, inFlightGuards, "no guard work on an in-flight retry")
	require.Zero(t, replayGuards, "no guard work on a replay")
	require.Zero(t, workGuards, "no guard work in the worker")

	t.Logf("totals: accept %d/%d, in flight %d/%d, replay %d/%d, worker %d/%d", acceptTrips, acceptCommits, inFlightTrips, inFlightCommits, replayTrips, replayCommits, workTrips, workCommits)
	t.Logf("per accept: %d round trips, %d commits; per in-flight retry: %d, %d; per replay: %d, %d; worker per operation: %d, %d",
		acceptTrips/n, acceptCommits/n, inFlightTrips/n, inFlightCommits/n, replayTrips/n, replayCommits/n, workTrips/(n+1), workCommits/(n+1))
	for _, c := range []struct {
		what          string
		trips, limit  int
		commits, lim2 int
	}{
		// read the key; BEGIN, River's job insert, the claim insert with
		// its audit row (one statement), COMMIT
		{"accept", acceptTrips, 5 * n, acceptCommits, 1 * n},
		// read the key; the in_flight audit row
		{"in-flight retry", inFlightTrips, 2 * n, inFlightCommits, 1 * n},
		// read the key; the replayed audit row
		{"replay", replayTrips, 2 * n, replayCommits, 1 * n},
		// in-transaction tool, one transaction: BEGIN with the claim
		// locked (the check), the effect's two statements, River's job
		// completion, the claim's completion with its audit row (one
		// statement) with COMMIT; two at once may share one (group commit)
		{"worker", workTrips, 5 * (n + 1), workCommits, 1 * (n + 1)},
	} {
		require.LessOrEqual(t, c.trips, c.limit, "%s: round trips grew", c.what)
		require.LessOrEqual(t, c.commits, c.lim2, "%s: commits grew", c.what)
	}
	// Claim versions: the insert per accept, nothing per retry, one write
	// per in-transaction operation (lease and result together).
	t.Logf("claim versions: accept %d, in flight %d, replay %d, worker %d", acceptVersions, inFlightVersions, replayVersions, workVersions)
	require.Equal(t, n, acceptVersions, "one claim version per accept")
	require.Zero(t, inFlightVersions, "in-flight retries write no claim")
	require.Zero(t, replayVersions, "replays write no claim")
	require.Equal(t, n+1, workVersions, "one claim version per in-transaction operation")

	// Postgres's own count agrees once the backends flushed their
	// statistics (within seconds of going idle): n+1 inserts (the warm-up
	// too), n+1 updates. HOT updates are reported, not asserted: every
	// transition changes a column that an index or its predicate holds
	// (status, expires_at; docs/benchmarks.md).
	var ins, upd, hot int64
	require.Eventually(t, func() bool {
		require.NoError(t, seedPool.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relname = 'idempotency_claims'`).Scan(&ins, &upd, &hot))
		return ins >= int64(n+1) && upd >= int64(n+1)
	}, 2*time.Minute, 100*time.Millisecond)
	t.Logf("pg_stat_user_tables for idempotency_claims: %d inserts, %d updates, %d of them HOT", ins, upd, hot)
	require.Equal(t, int64(n+1), ins)
	require.Equal(t, int64(n+1), upd)

	// Concurrent accepts share claiming transactions (group commit): each
	// call reads its key, and each group costs BEGIN, River's jobs (one
	// statement), the claims with their audit rows (one statement) and
	// COMMIT, however the calls happened to group.
	const m = 32
	tracer.take()
	tracer.takeVersions()
	tracer.mu.Lock()
	tracer.tokenReads = 0
	tracer.mu.Unlock()
	var wg sync.WaitGroup
	statuses := make([]int, m)
	for i := range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = credit(fmt.Sprintf("cost-group-%04d", i))
		}()
	}
	wg.Wait()
	for i := range m {
		require.Equal(t, http.StatusAccepted, statuses[i], "call %d", i)
	}
	groupTrips, groups := tracer.take()
	tracer.mu.Lock()
	tokenReads := tracer.tokenReads
	tracer.mu.Unlock()
	t.Logf("%d concurrent accepts: %d round trips (%d of them token reads, the cache having expired), %d groups (%.1f calls per commit)",
		m, groupTrips, tokenReads, groups, float64(m)/float64(groups))
	require.Equal(t, m+4*groups, groupTrips-tokenReads, "a read per call and four round trips per group")
	require.LessOrEqual(t, groups, m)
	require.Equal(t, groups, tracer.takeVersions(), "one statement writes a group's claims")
	require.Eventually(t, func() bool {
		require.NoError(t, seedPool.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables
			WHERE relname = 'idempotency_claims'`).Scan(&ins, &upd))
		return ins >= int64(n+1+m)
	}, 2*time.Minute, 100*time.Millisecond)
	require.Equal(t, int64(n+1+m), ins, "one claim version per accept")
	require.Equal(t, int64(n+1), upd, "and no update")

	// The m operations queued before a worker process starts share
	// transactions (the worker's group commit): each costs what it costs
	// alone but its BEGIN and COMMIT, with its completion pipelined with
	// the next one's savepoint and lock, and far fewer commits than
	// operations.
	tracer.take()
	work(m, n+1+m)
	groupWorkTrips, groupCommits := tracer.take()
	t.Logf("%d operations queued before the worker: %d round trips (%.2f per operation), %d commits (%.2f per operation)",
		m, groupWorkTrips, float64(groupWorkTrips)/m, groupCommits, float64(groupCommits)/m)
	// How many share depends on when the jobs reach the runners (12 to 14
	// commits for 32 here when idle); a loaded machine must not fail the
	// guard, so it asks for a quarter saved at least. The exact grouping
	// is jobs.TestGroupCommitsConcurrentJobsTogether's, with held jobs.
	require.Less(t, float64(groupCommits)/m, 0.75, "commits per operation")
	// A group of k costs 4k+1 round trips: BEGIN with the first lock, the
	// effect's two statements and River's job completion per operation,
	// each completion sent with the next operation's savepoint and lock,
	// the last one with COMMIT.
	// On a busy machine a job can reach a group's runner after the
	// previous completion went out on its own: that completion's flush is
	// one round trip more, at most one per group (a CI run saw 143 for
	// 142). A statement more per operation would add m.
	require.GreaterOrEqual(t, groupWorkTrips, 4*m+groupCommits, "round trips: 4 per operation and 1 per group")
	require.LessOrEqual(t, groupWorkTrips, 4*m+2*groupCommits, "round trips: 4 per operation and 1 per group, plus at most one flush per group")
	require.Equal(t, m, tracer.takeVersions(), "one claim version per operation")

	// A lone operation is a group of one: no savepoint, what it cost alone.
	require.Equal(t, http.StatusAccepted, credit("cost-lone-0001"))
	tracer.take()
	work(2, n+2+m)
	loneTrips, loneCommits := tracer.take()
	t.Logf("a lone operation: %d round trips, %d commits", loneTrips, loneCommits)
	require.Equal(t, 5, loneTrips, "BEGIN with the lock, the effect's two statements, River's completion, the claim's completion with COMMIT")
	require.Equal(t, 1, loneCommits)
}
