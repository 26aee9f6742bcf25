package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/builtins"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/procstat"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Series are the measured figures; each has one row per concurrency.
const (
	sCommit      = "commit"       // claim-shaped one-row insert transactions
	sBareInsert  = "bare_insert"  // bare River: InsertTx, one transaction per operation
	sBareE2E     = "bare_e2e"     // bare River: inserted and worked
	sIdemAccept  = "idem_accept"  // idemgate in process: gate.Claim accepted
	sIdemE2E     = "idem_e2e"     // idemgate in process: accepted and worked
	sMCPAccept   = "mcp_accept"   // idemgate over MCP: accepted
	sMCPE2E      = "mcp_e2e"      // idemgate over MCP: accepted and worked
	sPlainAccept = "plain_accept" // a plain go-sdk MCP server whose tool does InsertTx: accepted
	sPlainE2E    = "plain_e2e"    // the plain MCP server: accepted and worked by bare River's worker
	sReplay      = "replay"       // in process: retries of terminal claims
	sReplayMCP   = "replay_mcp"   // over MCP: retries of terminal claims

	// An external effect: a refund at the test Stripe (stripe-mock).
	sBareStripeInsert = "bare_stripe_insert" // bare River: InsertTx of the refund job
	sBareStripeE2E    = "bare_stripe_e2e"    // bare River: the worker refunds at Stripe
	sIdemStripeAccept = "idem_stripe_accept" // idemgate in process: refund_order accepted
	sIdemStripeE2E    = "idem_stripe_e2e"    // idemgate in process: refund_order worked

	// A backlog drained by one worker process (its own table).
	sBareDrain = "bare_drain"
	sIdemDrain = "idem_drain"

	// Experiments: not the product, a measurement of what one part costs.
)

var seriesLabel = map[string]string{
	sCommit:      "commit limit: claim-shaped insert tx",
	sBareInsert:  "bare River: InsertTx (accept)",
	sBareE2E:     "bare River: end to end",
	sIdemAccept:  "idemgate in-process: accept",
	sIdemE2E:     "idemgate in-process: end to end",
	sMCPAccept:   "idemgate MCP/HTTP: accept",
	sMCPE2E:      "idemgate MCP/HTTP: end to end",
	sPlainAccept: "plain MCP server (InsertTx): accept",
	sPlainE2E:    "plain MCP server (InsertTx): end to end",
	sReplay:      "idemgate in-process: replay",
	sReplayMCP:   "idemgate MCP/HTTP: replay",

	sBareStripeInsert: "bare River + Stripe refund: InsertTx (accept)",
	sBareStripeE2E:    "bare River + Stripe refund: end to end",
	sIdemStripeAccept: "idemgate refund_order in-process: accept",
	sIdemStripeE2E:    "idemgate refund_order in-process: end to end",

	sBareDrain: "bare River: drain",
	sIdemDrain: "idemgate: drain (one worker process)",
}

// row is one measured figure.
type row struct {
	Series string
	Conc   int
	N      int
	Errors int
	Rate   float64
	P50    time.Duration
	P99    time.Duration
	// Took is a drain's time, from the worker's start to the last row.
	Took time.Duration
	CPU  cpuUsage
	Note string
}

// cpuPerOp is CPU milliseconds per operation, harness + Postgres: what an
// operation costs, whatever else shares the machine.
func (r *row) cpuPerOp() string {
	if r.N == 0 || r.CPU.Seconds == 0 {
		return "–"
	}
	per := func(cores float64) float64 { return cores * r.CPU.Seconds / float64(r.N) * 1000 }
	return fmt.Sprintf("%.2f + %.2f", per(r.CPU.HarnessCores), per(r.CPU.PGCores))
}

func (r *row) walPerOp() string {
	if r.N == 0 || r.CPU.WALBytes == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f kB", float64(r.CPU.WALBytes)/float64(r.N)/1000)
}

// runner runs the scenarios and collects their figures.
type runner struct {
	srv        *dbServer
	tn         tuning
	logger     *slog.Logger
	d          time.Duration
	profileDir string
	progress   func(format string, args ...any)
	// stripeURL is the test Stripe (stripe-mock) of the refund figures.
	stripeURL  string
	stripeOnce sync.Once
	stripeErr  error
	stripePID  int // its process, found by checkStripe; 0: not found

	mu        sync.Mutex
	rows      []row
	checks    []string // write checks and their verdicts
	storms    []stormResult
	lones     []*loneResult
	growthRes *growthResult
}

func (r *runner) add(rw row) {
	r.mu.Lock()
	r.rows = append(r.rows, rw)
	r.mu.Unlock()
	note := ""
	if rw.Note != "" {
		note = "  [" + rw.Note + "]"
	}
	r.progress("%-42s c=%-3d %7.0f/s  p50 %-8s p99 %-8s cpu ms/op %s  cores %s  wal/op %s%s",
		seriesLabel[rw.Series], rw.Conc, rw.Rate, fmtDur(rw.P50), fmtDur(rw.P99), rw.cpuPerOp(), rw.CPU, rw.walPerOp(), note)
}

func (r *runner) find(series string, c int) *row {
	for i := range r.rows {
		if r.rows[i].Series == series && r.rows[i].Conc == c {
			return &r.rows[i]
		}
	}
	return nil
}

// profile starts a CPU profile of this process named after the figure,
// when profiling is on; with pg_stat_statements in the server's admin
// database it also resets the statement statistics and, when the figure
// ends, writes its top statements beside the profile.
func (r *runner) profile(name string) func() {
	if r.profileDir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(r.profileDir, name+".pprof"))
	if err != nil {
		r.progress("profile %s: %v", name, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	stopStatements := r.statements(name)
	return func() { pprof.StopCPUProfile(); f.Close(); stopStatements() }
}

// sqlTopStatements is pg_stat_statements' view of a figure: where the
// database's time went, per statement.
const sqlTopStatements = `
SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), rows,
	shared_blks_hit + shared_blks_read, wal_records, wal_fpi, wal_bytes,
	left(regexp_replace(query, '\s+', ' ', 'g'), 110)
FROM pg_stat_statements
WHERE query NOT LIKE '%pg_stat_statements%'
ORDER BY total_exec_time DESC
LIMIT 25`

func (r *runner) statements(name string) func() {
	ctx := context.Background()
	conn, err := connectAdmin(ctx, r.srv.adminURL)
	if err != nil {
		return func() {}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		_ = conn.Close(ctx)
		return func() {} // not installed: CPU profile only
	}
	return func() {
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, sqlTopStatements)
		if err != nil {
			return
		}
		defer rows.Close()
		var b strings.Builder
		fmt.Fprintf(&b, "%8s %10s %8s %8s %9s %8s %6s %10s  %s\n", "calls", "total ms", "mean ms", "rows", "blocks", "wal rec", "fpi", "wal bytes", "statement")
		for rows.Next() {
			var (
				calls, nrows, blks, walRec, fpi int64
				total, mean                     float64
				walBytes                        float64
				q                               string
			)
			if err := rows.Scan(&calls, &total, &mean, &nrows, &blks, &walRec, &fpi, &walBytes, &q); err != nil {
				return
			}
			fmt.Fprintf(&b, "%8d %10.1f %8.3f %8d %9d %8d %6d %10.0f  %s\n", calls, total, mean, nrows, blks, walRec, fpi, walBytes, q)
		}
		_ = os.WriteFile(filepath.Join(r.profileDir, name+".statements.txt"), []byte(b.String()), 0o644)
	}
}

// --- operations ---

func randomKey() string { return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()) }

// argSeq numbers the arguments the runs make: each call's (order or
// customer, amount) pair is its own, since the built-in money tools hold
// the same arguments under another key as a possible duplicate, as
// agents' distinct intents would be.
var argSeq atomic.Int64

// nextArgs returns the next (row, amount) pair: row in [0, rows), amount
// in [1, 10000], distinct for the first rows*10000 calls.
func nextArgs(rows int) (int, int64) {
	n := argSeq.Add(1) - 1
	return int(n % int64(rows)), 1 + (n/int64(rows))%10_000
}

// refundArgs are refund_order's arguments for one of the seeded orders.
func refundArgs(key string) (order string, amount int64, raw []byte) {
	row, amount := nextArgs(orders)
	order = orderID(row)
	raw = fmt.Appendf(nil, `{"order_id":%q,"amount_cents":%d,"reason":"bench","idempotency_key":%q}`, order, amount, key)
	return order, amount, raw
}

func creditArgs(key string) (customer string, amount int64, raw []byte) {
	row, amount := nextArgs(customers)
	customer = customerID(row)
	raw = fmt.Appendf(nil, `{"customer_id":%q,"amount_cents":%d,"currency":"usd","idempotency_key":%q}`, customer, amount, key)
	return customer, amount, raw
}

var benchActor = vocab.Actor{TenantID: benchTenant, UserID: "bench-agent", TokenID: "bench", Scopes: []string{"billing:credit"}}

// claimInProcess is what the api does for a mutation, minus HTTP and MCP:
// decode once, fingerprint, claim.
func claimInProcess(ctx context.Context, g *core.Gate, tool string, raw []byte) (*core.ClaimResult, error) {
	args, err := core.DecodeArgs(raw)
	if err != nil {
		return nil, err
	}
	intent, err := g.NewIntent(tool, args)
	if err != nil {
		return nil, err
	}
	return g.Claim(ctx, &core.ClaimParams{Actor: benchActor, RequestID: "bench", Intent: intent})
}

type mcpAnswer struct {
	Outcome  vocab.Outcome `json:"outcome"`
	Replayed bool          `json:"replayed"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Operation *vocab.Operation `json:"operation"`
}

func callMCP(ctx context.Context, s *mcp.ClientSession, raw []byte) (*mcpAnswer, error) {
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, err
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "apply_credit", Arguments: args})
	if err != nil {
		return nil, err
	}
	if len(res.Content) != 1 {
		return nil, fmt.Errorf("tool result has %d content items", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return nil, fmt.Errorf("tool result is %T", res.Content[0])
	}
	var ans mcpAnswer
	if err := json.Unmarshal([]byte(text.Text), &ans); err != nil {
		return nil, err
	}
	if res.IsError {
		if ans.Error != nil {
			return &ans, fmt.Errorf("tool error %s: %s", ans.Error.Code, ans.Error.Message)
		}
		return &ans, fmt.Errorf("tool error: %s", text.Text)
	}
	return &ans, nil
}

func sessions(ctx context.Context, url string, n int) ([]*mcp.ClientSession, func(), error) {
	hc := httpClient(n)
	out := make([]*mcp.ClientSession, 0, n)
	closeAll := func() {
		for _, s := range out {
			_ = s.Close()
		}
		hc.CloseIdleConnections()
	}
	for range n {
		s, err := mcpSession(ctx, url, hc)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out = append(out, s)
	}
	return out, closeAll, nil
}

// --- 1. commit limit ---

// commitLimit measures one-row insert transactions shaped like a claim: the
// gate's own INSERT … ON CONFLICT DO NOTHING RETURNING into
// idempotency_claims (its unique indexes and all), autocommitted, on a pool
// of c connections. Nothing else: the database's commit rate on this disk.
func (r *runner) commitLimit(ctx context.Context, c int) error {
	db, err := r.srv.create(ctx)
	if err != nil {
		return err
	}
	defer db.drop()
	pool, err := db.openPool(ctx, int32(c))
	if err != nil {
		return err
	}
	defer pool.Close()
	st := pgengine.New(pool)
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return err
	}
	defer smp.close()

	stopProf := r.profile(fmt.Sprintf("%s-c%d", sCommit, c))
	a := smp.snap(ctx)
	res := closedLoop(ctx, c, r.d, func(ctx context.Context, _, _ int) error {
		key := randomKey()
		_, _, raw := creditArgs(key)
		_, err := st.ClaimInsert(ctx, &core.ClaimInsertParams{
			OperationID: uuid.NewString(), TenantID: benchTenant, Tool: "apply_credit", IdempotencyKey: key,
			UserID: "bench-agent", Args: raw, ArgsHash: randomKey() + randomKey(), TTL: 24 * time.Hour,
		})
		return err
	})
	b := smp.snap(ctx)
	stopProf()
	r.add(row{Series: sCommit, Conc: c, N: res.N, Errors: res.Errors, Rate: res.rate(),
		P50: percentile(res.Lat, 50), P99: percentile(res.Lat, 99), CPU: usage(a, b), Note: errNote(res)})
	return nil
}

// forEach calls fn for 0..n-1 on c goroutines and returns the first error.
func forEach(ctx context.Context, n, c int, fn func(ctx context.Context, i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		next  int
		first error
	)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next == n || first != nil {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func errNote(res *loadResult) string {
	if res.Errors == 0 {
		return ""
	}
	return fmt.Sprintf("%d errors, first: %v", res.Errors, res.FirstErr)
}

// --- 2, 3: bare River and idemgate, accept and end to end ---

// e2eSpec is one way of accepting operations that a worker then carries out
// by writing one row each into an effect table.
type e2eSpec struct {
	accept, e2e string
	// effects is the table of the operations' effects: ledgerTable when
	// empty, or refundTable.
	effects string
	// downstream, when its pid is not 0, is a fake downstream process (the
	// test Stripe) whose CPU per operation the end-to-end note reports: it is
	// in neither the harness's nor Postgres' column.
	downstream process
	// start brings the system up on db and returns the accept operation.
	start func(ctx context.Context, db *benchDB, c int) (op func(ctx context.Context, w, i int) error, stop func(), err error)
}

// runE2E runs c clients accepting operations for r.d while the workers run,
// then waits until every accepted operation has its ledger row. The accept
// figure is accepts over the window; the end-to-end figure is operations
// over the time from the first accept to the last ledger row. db nil means
// a fresh database.
func (r *runner) runE2E(ctx context.Context, db *benchDB, c int, spec e2eSpec, checkpoint bool) (accept, e2e *row, err error) {
	accept, e2e, _, err = r.runE2EWindow(ctx, db, c, spec, checkpoint, r.d, true)
	return accept, e2e, err
}

// runE2EWindow is runE2E with a window of its own; it also returns the
// accepts' load result. Without drain it does not wait for the workers and
// returns no end-to-end figure.
func (r *runner) runE2EWindow(ctx context.Context, db *benchDB, c int, spec e2eSpec, checkpoint bool, window time.Duration, drain bool) (accept, e2e *row, lr *loadResult, err error) {
	if db == nil {
		if db, err = r.srv.create(ctx); err != nil {
			return nil, nil, nil, err
		}
		defer db.drop()
	}
	op, stop, err := spec.start(ctx, db, c)
	if err != nil {
		return nil, nil, nil, err
	}
	defer stop()
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return nil, nil, nil, err
	}
	defer smp.close()
	if checkpoint {
		if _, err := smp.admin.Exec(ctx, "CHECKPOINT"); err != nil {
			return nil, nil, nil, err
		}
	}
	pool, err := db.openPool(ctx, 2)
	if err != nil {
		return nil, nil, nil, err
	}
	defer pool.Close()
	effects := firstNonEmpty(spec.effects, ledgerTable)
	var before int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{effects}.Sanitize()).Scan(&before); err != nil {
		return nil, nil, nil, err
	}

	stopProf := r.profile(fmt.Sprintf("%s-c%d", spec.e2e, c))
	down0, _ := procstat.CPUTicks(spec.downstream.pid)
	a := smp.snap(ctx)
	res := closedLoop(ctx, c, window, op)
	b := smp.snap(ctx)
	accept = &row{Series: spec.accept, Conc: c, N: res.N, Errors: res.Errors, Rate: res.rate(),
		P50: percentile(res.Lat, 50), P99: percentile(res.Lat, 99), CPU: usage(a, b), Note: errNote(res)}
	if !drain {
		stopProf()
		return accept, nil, res, nil
	}
	done, got, werr := waitRows(ctx, pool, effects, before+res.N, max(60*time.Second, 10*window))
	cs := smp.snap(ctx)
	down1, downOK := procstat.CPUTicks(spec.downstream.pid)
	stopProf()

	e2e = &row{Series: spec.e2e, Conc: c, N: res.N, CPU: usage(a, cs)}
	if werr != nil {
		e2e.Note = werr.Error()
		e2e.N = got - before
		e2e.Rate = float64(got-before) / cs.at.Sub(res.Start).Seconds()
	} else {
		e2e.Rate = float64(res.N) / done.Sub(res.Start).Seconds()
		e2e.Note = fmt.Sprintf("drained %s after the window", fmtDur(done.Sub(res.Start.Add(res.Elapsed))))
	}
	if spec.downstream.pid != 0 && downOK && down1 >= down0 && e2e.N > 0 {
		e2e.Note += fmt.Sprintf("; %s %.2f ms/op", spec.downstream.name, float64(down1-down0)/clockTicks*1000/float64(e2e.N))
	}
	return accept, e2e, res, nil
}

func (r *runner) bareSpec() e2eSpec {
	return e2eSpec{accept: sBareInsert, e2e: sBareE2E,
		start: func(ctx context.Context, db *benchDB, _ int) (func(context.Context, int, int) error, func(), error) {
			s, err := startBare(ctx, db, r.tn, r.logger, bareOptions{})
			if err != nil {
				return nil, nil, err
			}
			op := func(ctx context.Context, _, _ int) error {
				customer, amount, _ := creditArgs("")
				return s.insert(ctx, bareArgs{TenantID: benchTenant, CustomerID: customer, AmountCents: amount, Key: randomKey()})
			}
			return op, s.stop, nil
		}}
}

func (r *runner) idemSpec() e2eSpec {
	return r.inProcessSpec(e2eSpec{accept: sIdemAccept, e2e: sIdemE2E}, "apply_credit", stackOptions{},
		func(key string) []byte { _, _, raw := creditArgs(key); return raw })
}

// inProcessSpec is spec with calls of tool, accepted through the gate in
// process with the arguments args builds for a new key, on an idemgate
// stack started with opts and worked by app.NewWorker.
func (r *runner) inProcessSpec(spec e2eSpec, tool string, opts stackOptions, args func(key string) []byte) e2eSpec {
	spec.start = func(ctx context.Context, db *benchDB, _ int) (func(context.Context, int, int) error, func(), error) {
		s, err := startIdem(ctx, db, r.tn, r.logger, opts)
		if err != nil {
			return nil, nil, err
		}
		g := s.api.Gate
		op := func(ctx context.Context, _, _ int) error {
			res, err := claimInProcess(ctx, g, tool, args(randomKey()))
			if err != nil {
				return err
			}
			if res.Outcome != vocab.OutcomeAccepted {
				return fmt.Errorf("outcome %s, want accepted", res.Outcome)
			}
			return nil
		}
		return op, s.stop, nil
	}
	return spec
}

func (r *runner) mcpSpec() e2eSpec {
	return e2eSpec{accept: sMCPAccept, e2e: sMCPE2E,
		start: func(ctx context.Context, db *benchDB, c int) (func(context.Context, int, int) error, func(), error) {
			s, err := startIdem(ctx, db, r.tn, r.logger, stackOptions{http: true})
			if err != nil {
				return nil, nil, err
			}
			ss, closeSessions, err := sessions(ctx, s.url, c)
			if err != nil {
				s.stop()
				return nil, nil, err
			}
			op := func(ctx context.Context, w, _ int) error {
				_, _, raw := creditArgs(randomKey())
				ans, err := callMCP(ctx, ss[w], raw)
				if err != nil {
					return err
				}
				if ans.Outcome != vocab.OutcomeAccepted {
					return fmt.Errorf("outcome %s, want accepted", ans.Outcome)
				}
				return nil
			}
			return op, func() { closeSessions(); s.stop() }, nil
		}}
}

func (r *runner) e2eLevel(ctx context.Context, spec e2eSpec, c int) error {
	accept, e2e, err := r.runE2E(ctx, nil, c, spec, false)
	if err != nil {
		return err
	}
	r.add(*accept)
	r.add(*e2e)
	return nil
}

// --- 4. replay ---

// writeFingerprint is a digest of every version of every claim row and claim
// job row (ctid and xmin change with any write, HOT or not) and the number
// of ledger rows: equal before and after means the replays wrote none of
// them.
const sqlWriteFingerprint = `
SELECT (SELECT md5(string_agg(ctid::text || xmin::text, ',' ORDER BY id)) FROM idempotency_claims)
	|| '/' || (SELECT md5(coalesce(string_agg(ctid::text || xmin::text, ',' ORDER BY id), '')) FROM river_job WHERE kind = 'idemgate.apply_credit')
	|| '/' || (SELECT count(*) FROM ledger_entries)::text`

// replay prepares terminal claims, then retries them with their own
// arguments at every concurrency, in process and over MCP, and checks that
// the retries wrote one audit row each and nothing else.
func (r *runner) replay(ctx context.Context, concs []int, keys int) error {
	db, err := r.srv.create(ctx)
	if err != nil {
		return err
	}
	defer db.drop()
	s, err := startIdem(ctx, db, r.tn, r.logger, stackOptions{http: true})
	if err != nil {
		return err
	}
	defer s.stop()
	pool, err := db.openPool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()

	// Prepare: accept every key and let the workers finish them.
	raws := make([][]byte, keys)
	for i := range raws {
		_, _, raws[i] = creditArgs(randomKey())
	}
	if err := forEach(ctx, len(raws), 16, func(ctx context.Context, i int) error {
		_, err := claimInProcess(ctx, s.api.Gate, "apply_credit", raws[i])
		return err
	}); err != nil {
		return fmt.Errorf("replay: prepare: %w", err)
	}
	if _, _, err := waitLedger(ctx, pool, keys, 2*time.Minute); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	var succeeded int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_claims WHERE status = 'succeeded'`).Scan(&succeeded); err != nil {
		return err
	}
	if succeeded != keys {
		return fmt.Errorf("replay: %d of %d claims succeeded", succeeded, keys)
	}

	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return err
	}
	defer smp.close()

	measure := func(series string, c int, op func(ctx context.Context, w, i int) error) error {
		var fp0, fp1 string
		var audit0, audit1, other int64
		if err := pool.QueryRow(ctx, sqlWriteFingerprint).Scan(&fp0); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM audit_events`).Scan(&audit0); err != nil {
			return err
		}
		stopProf := r.profile(fmt.Sprintf("%s-c%d", series, c))
		a := smp.snap(ctx)
		res := closedLoop(ctx, c, min(r.d, 5*time.Second), op)
		b := smp.snap(ctx)
		stopProf()
		time.Sleep(100 * time.Millisecond) // let a cancelled call's audit row land
		if err := pool.QueryRow(ctx, sqlWriteFingerprint).Scan(&fp1); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE decision = 'replayed'), count(*) FILTER (WHERE decision <> 'replayed') FROM audit_events WHERE id > $1`, audit0).Scan(&audit1, &other); err != nil {
			return err
		}
		rw := row{Series: series, Conc: c, N: res.N, Errors: res.Errors, Rate: res.rate(),
			P50: percentile(res.Lat, 50), P99: percentile(res.Lat, 99), CPU: usage(a, b), Note: errNote(res)}
		verdict := "ok"
		switch {
		case fp0 != fp1:
			verdict = "FAILED: a claim, claim job or ledger row was written"
		case other != 0:
			verdict = fmt.Sprintf("FAILED: %d audit rows other than replayed", other)
		case audit1 < int64(res.N) || audit1 > int64(res.N+res.Errors+c):
			verdict = fmt.Sprintf("FAILED: %d replayed audit rows for %d replays", audit1, res.N)
		}
		if verdict != "ok" {
			rw.Note = strings.TrimSpace(rw.Note + " " + verdict)
		}
		r.mu.Lock()
		r.checks = append(r.checks, fmt.Sprintf("%s c=%d: %d replays wrote %d replayed audit rows; claims, claim jobs and ledger unchanged: %s",
			seriesLabel[series], c, res.N, audit1, verdict))
		r.mu.Unlock()
		r.add(rw)
		return nil
	}

	for _, c := range concs {
		err := measure(sReplay, c, func(ctx context.Context, _, _ int) error {
			res, err := claimInProcess(ctx, s.api.Gate, "apply_credit", raws[rand.IntN(len(raws))])
			if err != nil {
				return err
			}
			if res.Outcome != vocab.OutcomeReplayed {
				return fmt.Errorf("outcome %s, want replayed", res.Outcome)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, c := range concs {
		ss, closeSessions, err := sessions(ctx, s.url, c)
		if err != nil {
			return err
		}
		err = measure(sReplayMCP, c, func(ctx context.Context, w, _ int) error {
			ans, err := callMCP(ctx, ss[w], raws[rand.IntN(len(raws))])
			if err != nil {
				return err
			}
			if ans.Outcome != vocab.OutcomeReplayed {
				return fmt.Errorf("outcome %s, want replayed", ans.Outcome)
			}
			return nil
		})
		closeSessions()
		if err != nil {
			return err
		}
	}
	return nil
}

// --- 5. retry storm ---

type stormResult struct {
	Via       string // MCP or REST
	Calls     int
	Errors    int
	Outcomes  map[vocab.Outcome]int
	P50, P99  time.Duration
	Max       time.Duration
	Effects   int // ledger rows of the operation
	Jobs      int
	Claims    int
	AuditRows int
	// AuditCommits counts the transactions that wrote the call audit rows
	// (their distinct xmin): the gate writes them in batches.
	AuditCommits int
	Settled      time.Duration // first call to terminal claim
	CPU          cpuUsage
	FirstErr     string
	// Breakdown is where the calls' time went, per outcome.
	Breakdown []*stormBreakdown
	// Runtime is the Go runtime over the storm: goroutines' waits for a
	// core, and GC's share of the CPU.
	Runtime runtimeUsage
	// AuditBatches are the transactions that wrote the call audit rows,
	// in the order they began.
	AuditBatches []auditBatch
}

// auditBatch is one transaction that wrote call audit rows: how many, and
// when it began (its rows' created_at, now() of the transaction) after the
// storm's release.
type auditBatch struct {
	Rows  int
	Start time.Duration
}

// auditBatches reads the transactions that wrote key's call audit rows.
func auditBatches(ctx context.Context, pool *pgxpool.Pool, key string, release time.Time) ([]auditBatch, error) {
	rows, err := pool.Query(ctx, `
SELECT count(*), extract(epoch FROM min(created_at))::float8
FROM audit_events WHERE idempotency_key = $1 AND decision IN ('accepted', 'replayed', 'in_flight', 'conflict')
GROUP BY xmin::text ORDER BY 2`, key)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []auditBatch
	for rows.Next() {
		var (
			n     int
			epoch float64
		)
		if err := rows.Scan(&n, &epoch); err != nil {
			return nil, err
		}
		out = append(out, auditBatch{Rows: n, Start: time.Duration(epoch*float64(time.Second)) - time.Duration(release.UnixNano())})
	}
	return out, rows.Err()
}

// storm fires size identical apply_credit calls at once over MCP at an api
// with IDEMGATE_WAIT=0, and counts the effects (ledger rows) per storm.
func (r *runner) storm(ctx context.Context, storms, size int) error {
	db, err := r.srv.create(ctx)
	if err != nil {
		return err
	}
	defer db.drop()
	rec := newPhaseRecorder(size)
	s, err := startIdem(ctx, db, r.tn, rec.logger(r.logger), stackOptions{http: true, wrap: rec.middleware})
	if err != nil {
		return err
	}
	defer s.stop()
	pool, err := db.openPool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	hc := httpClient(size)
	defer hc.CloseIdleConnections()
	session, err := mcpSession(ctx, s.url, hc)
	if err != nil {
		return err
	}
	defer session.Close()
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return err
	}
	defer smp.close()

	// restCall is the REST twin of the call: the same gate behind plain
	// HTTP, to show what the MCP layer costs on top.
	restCall := func(ctx context.Context, key string, raw []byte) (vocab.Outcome, error) {
		var args map[string]any
		if err := json.Unmarshal(raw, &args); err != nil {
			return "", err
		}
		delete(args, "idempotency_key")
		body, _ := json.Marshal(args)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/tools/apply_credit", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var ans mcpAnswer
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			return "", fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
		}
		if resp.StatusCode >= 400 && resp.StatusCode != http.StatusConflict {
			return "", fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if ans.Outcome == "" && resp.StatusCode == http.StatusConflict {
			return vocab.OutcomeInFlight, nil
		}
		return ans.Outcome, nil
	}

	one := func(measured bool, via string) error {
		key := "storm-" + randomKey()
		_, _, raw := creditArgs(key)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			lat   = make([]time.Duration, size)
			t0s   = make([]time.Time, size)
			outs  = make([]vocab.Outcome, size)
			errs  = make([]error, size)
		)
		rec.reset()
		for i := range size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.WithValue(ctx, benchCallKey{}, i)
				<-start
				t0 := time.Now()
				t0s[i] = t0
				var (
					out vocab.Outcome
					err error
				)
				if via == "REST" {
					out, err = restCall(ctx, key, raw)
				} else {
					var ans *mcpAnswer
					if ans, err = callMCP(ctx, session, raw); err == nil {
						out = ans.Outcome
					}
				}
				lat[i] = time.Since(t0)
				if err != nil {
					errs[i] = err
					return
				}
				outs[i] = out
			}()
		}
		time.Sleep(50 * time.Millisecond) // every goroutine parked on start
		a, ra := smp.snap(ctx), readRuntime()
		t0 := time.Now()
		close(start)
		wg.Wait()
		b, rb := smp.snap(ctx), readRuntime()
		// Wait for the one operation to finish.
		var settled time.Duration
		for {
			var status string
			err := pool.QueryRow(ctx, `SELECT status FROM idempotency_claims WHERE tenant_id = $1 AND tool = 'apply_credit' AND idempotency_key = $2`, benchTenant, key).Scan(&status)
			if err == nil && (status == "succeeded" || status == "failed") {
				settled = time.Since(t0)
				break
			}
			if time.Since(t0) > time.Minute {
				return fmt.Errorf("storm: claim %s not terminal after a minute (status %q, err %v)", key, status, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !measured {
			return nil
		}
		sr := stormResult{Via: via, Calls: size, Outcomes: map[vocab.Outcome]int{}, Settled: settled, CPU: usage(a, b), Runtime: runtimeBetween(ra, rb)}
		ok := lat[:0:0]
		for i := range size {
			if errs[i] != nil {
				sr.Errors++
				if sr.FirstErr == "" {
					sr.FirstErr = errs[i].Error()
				}
				continue
			}
			sr.Outcomes[outs[i]]++
			ok = append(ok, lat[i])
		}
		sr.P50, sr.P99, sr.Max = percentile(ok, 50), percentile(ok, 99), percentile(ok, 100)
		calls := make([]callPhases, 0, size)
		for i := range size {
			if errs[i] == nil {
				calls = append(calls, rec.phases(i, t0s[i], t0s[i].Add(lat[i]), outs[i]))
			}
		}
		sr.Breakdown = breakdown(calls)
		if sr.AuditBatches, err = auditBatches(ctx, pool, key, t0); err != nil {
			return err
		}
		err := pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM ledger_entries l JOIN idempotency_claims c ON c.operation_id = l.operation_id
        WHERE c.tenant_id = $1 AND c.idempotency_key = $2),
       (SELECT count(*) FROM river_job WHERE args->>'idempotency_key' = $2),
       (SELECT count(*) FROM idempotency_claims WHERE idempotency_key = $2),
       (SELECT count(*) FROM audit_events WHERE idempotency_key = $2 AND decision IN ('accepted', 'replayed', 'in_flight', 'conflict')),
       (SELECT count(DISTINCT xmin::text) FROM audit_events WHERE idempotency_key = $2 AND decision IN ('accepted', 'replayed', 'in_flight', 'conflict'))`,
			benchTenant, key).Scan(&sr.Effects, &sr.Jobs, &sr.Claims, &sr.AuditRows, &sr.AuditCommits)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.storms = append(r.storms, sr)
		r.mu.Unlock()
		r.progress("storm of %d over %s: p50 %s p99 %s max %s, outcomes %v, errors %d (first: %s), effects %d, jobs %d, claims %d, call audit rows %d in %d commits, settled in %s, cpu %s",
			size, via, fmtDur(sr.P50), fmtDur(sr.P99), fmtDur(sr.Max), sr.Outcomes, sr.Errors, sr.FirstErr, sr.Effects, sr.Jobs, sr.Claims, sr.AuditRows, sr.AuditCommits, fmtDur(sr.Settled), sr.CPU)
		r.progress("  Go runtime over the storm: %d goroutine runs waited for a core p50 %s p99 %s; GC %.0f%% of the process CPU",
			sr.Runtime.Scheduled, fmtDur(sr.Runtime.SchedP50), fmtDur(sr.Runtime.SchedP99), 100*sr.Runtime.GCShare)
		for _, g := range sr.Breakdown {
			r.progress("  %-12s %4d calls (%d timed in the api): total %s, before the handler %s, in it %s (mutation %s, the rest %s), after it %s; %s",
				g.Group, g.Calls, g.Matched, pair(g.Total), pair(g.Before), pair(g.Handler), pair(g.Mutation), pair(g.Other), pair(g.After), g.histogram())
		}
		return nil
	}
	// The first storm opens the client's connections and warms the token
	// cache; it is not measured.
	if err := one(false, "MCP"); err != nil {
		return err
	}
	stopProf := r.profile("storm")
	for range storms {
		if err := one(true, "MCP"); err != nil {
			stopProf()
			return err
		}
	}
	stopProf()
	stopProf = r.profile("storm_rest")
	defer stopProf()
	return one(true, "REST")
}

// --- 6. growth ---

type growthResult struct {
	Window       time.Duration
	Claims       int
	EmptyLoad    *loadResult
	FullLoad     *loadResult
	LoadTime     time.Duration
	TableBytes   int64
	Empty, Full  *row // accepts at growthConc
	PruneRows    int
	PruneDeleted int
	PruneTime    time.Duration
	PruneCPU     cpuUsage
}

const growthConc = 32

// growth compares accepts (in process, workers running) on an empty claims
// table and on one holding claims terminal claims loaded with COPY, then
// loads pruneRows expired claims beside them and times gate.Prune.
func (r *runner) growth(ctx context.Context, claims, pruneRows int, window time.Duration) error {
	gr := &growthResult{Claims: claims, PruneRows: pruneRows, Window: window}
	spec := r.idemSpec()
	accept, _, lr, err := r.runE2EWindow(ctx, nil, growthConc, spec, true, window, false)
	if err != nil {
		return err
	}
	gr.Empty, gr.EmptyLoad = accept, lr
	r.progress("growth, empty claims table:   %9.0f accepts/s, p99 %s, cpu %s", accept.Rate, fmtDur(accept.P99), accept.CPU)

	db, err := r.srv.create(ctx)
	if err != nil {
		return err
	}
	defer db.drop()
	pool, err := db.openPool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	t0 := time.Now()
	if err := loadClaims(ctx, pool, claims, false); err != nil {
		return fmt.Errorf("growth: load: %w", err)
	}
	gr.LoadTime = time.Since(t0)
	if _, err := pool.Exec(ctx, "ANALYZE idempotency_claims"); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('idempotency_claims')`).Scan(&gr.TableBytes); err != nil {
		return err
	}
	r.progress("growth: loaded %d claims with COPY in %s (%.0f rows/s), table and indexes %d MB",
		claims, gr.LoadTime.Round(time.Millisecond), float64(claims)/gr.LoadTime.Seconds(), gr.TableBytes>>20)
	accept, _, lr, err = r.runE2EWindow(ctx, db, growthConc, spec, true, window, false)
	if err != nil {
		return err
	}
	gr.Full, gr.FullLoad = accept, lr
	r.progress("growth, %d claims: %9.0f accepts/s, p99 %s, cpu %s (%.2f × empty)", claims, accept.Rate, fmtDur(accept.P99), accept.CPU, accept.Rate/gr.Empty.Rate)

	// Pruner: expired claims beside the live ones.
	if err := loadClaims(ctx, pool, pruneRows, true); err != nil {
		return fmt.Errorf("growth: load expired: %w", err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE idempotency_claims"); err != nil {
		return err
	}
	smp, err := newSampler(ctx, r.srv.adminURL, db.name)
	if err != nil {
		return err
	}
	defer smp.close()
	if _, err := smp.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	st := pgengine.New(pool)
	tools, err := builtins.Declarations(config.Defaults(), st)
	if err != nil {
		return err
	}
	g, err := core.New(&core.Config{Store: st, Enqueuer: noEnqueuer{}, Policies: tools.Policies(), Logger: r.logger})
	if err != nil {
		return err
	}
	stopProf := r.profile("prune")
	a := smp.snap(ctx)
	t0 = time.Now()
	n, err := g.Prune(ctx, pruneRows/core.PruneBatch+10)
	gr.PruneTime = time.Since(t0)
	b := smp.snap(ctx)
	stopProf()
	if err != nil {
		return fmt.Errorf("growth: prune: %w", err)
	}
	gr.PruneDeleted, gr.PruneCPU = n, usage(a, b)
	r.progress("growth: gate.Prune deleted %d of %d expired claims in %s: %.0f rows/s, cpu %s",
		n, pruneRows, gr.PruneTime.Round(time.Millisecond), float64(n)/gr.PruneTime.Seconds(), gr.PruneCPU)
	r.growthRes = gr
	return nil
}

type noEnqueuer struct{}

func (noEnqueuer) JobInsert(context.Context, core.Tx, *core.Claim) (int64, error) {
	return 0, errors.New("bench: the pruner enqueues nothing")
}

// loadClaims COPYs n terminal (succeeded) apply_credit and refund_order
// claims of 100 tenants into idempotency_claims, with random keys. Live
// ones expire a day from now; expired ones expired within the last hour.
func loadClaims(ctx context.Context, pool *pgxpool.Pool, n int, expired bool) error {
	cols := []string{"operation_id", "tenant_id", "tool", "idempotency_key", "user_id", "args", "args_hash",
		"status", "epoch", "attempts", "job_id", "ttl_seconds", "result", "first_called_at", "created_at",
		"updated_at", "expires_at"}
	now := time.Now()
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant_%02d", i)
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		i++
		tool := "apply_credit"
		args := fmt.Sprintf(`{"amount_cents":%d,"currency":"usd","customer_id":"cus_%03d"}`, 1+rand.IntN(10000), rand.IntN(1000))
		if i%3 == 0 {
			tool = "refund_order"
			args = fmt.Sprintf(`{"amount_cents":%d,"order_id":"ord_%06d"}`, 1+rand.IntN(10000), rand.IntN(100000))
		}
		opID := uuid.New()
		created := now.Add(-time.Duration(rand.Int64N(int64(23 * time.Hour))))
		expires := created.Add(24 * time.Hour)
		if expired {
			created = now.Add(-25*time.Hour + time.Duration(rand.Int64N(int64(time.Hour))))
			expires = created.Add(24 * time.Hour)
		}
		return []any{
			opID.String(), tenants[rand.IntN(len(tenants))], tool, randomKey(), "support-bot", args,
			randomKey() + randomKey(), "succeeded", int64(1), int32(1), int64(rand.Int64N(1 << 40)), int32(86400),
			fmt.Sprintf(`{"ledger_entry_id":%q}`, opID.String()), created, created, created.Add(time.Second), expires,
		}, nil
	})
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"idempotency_claims"}, cols, src)
	return err
}
