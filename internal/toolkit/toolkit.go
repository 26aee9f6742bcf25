// Package toolkit runs tools through idemgate's real gate, River workers
// and REST api, on Postgres and on SQLite, and checks the guarantees each
// mutation must keep, one function per guarantee. Package gatetest is its
// public face; idemgate's own tests use it directly for what a team does
// not need (seed data, the configuration, a registry built on the store).
//
// Postgres comes from TEST_DATABASE_URL (default the server on
// 127.0.0.1:5432, user postgres); each harness gets a fresh database.
package toolkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/sqlitetest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// Tenant is the tenant every harness call runs as.
const Tenant = "acme"

// AwaitTimeout bounds how long Await waits for an operation to finish; it
// is a deadline for a stuck test, not a speed requirement.
const AwaitTimeout = 2 * time.Minute

// Options configure a Harness. The zero value is valid.
type Options struct {
	// Migrations returns the tools' own goose SQL migrations for an engine
	// (gate.Postgres, gate.SQLite), applied after idemgate's; nil: none.
	Migrations func(engine string) fs.FS
	// Seed is written before the tools run (orders, customers, seats,
	// users of the built-in tools).
	Seed *store.SeedFile
	// Configure adjusts the configuration (Stripe's base URL, SMTP, the
	// lease) before the harness starts.
	Configure func(cfg *config.Config)
	// Build, used when the registry passed is nil, builds the registry on
	// the harness's database: for tools whose effects need a store.
	Build func(data Data) *toolspec.Registry
	// DBPrefix starts the name of the harness's Postgres database
	// (default pgtest.DBPrefix).
	DBPrefix string
}

// Data is the harness database's store, for Options.Build.
type Data interface {
	core.Store
	store.Tokens
}

func build(t testing.TB, reg *toolspec.Registry, opts *Options, data Data) *toolspec.Registry {
	t.Helper()
	if reg != nil {
		return reg
	}
	require.NotNil(t, opts.Build, "pass a registry or Options.Build")
	return opts.Build(data)
}

// Harness is an api and a worker running a registry's tools in process.
type Harness struct {
	// Engine is the database the harness runs on.
	Engine string
	// DatabaseURL is the harness's database: a postgres:// URL, or
	// sqlite: and the file's path.
	DatabaseURL string
	url         string
	token       string
	count       func(ctx context.Context, query string, args ...any) (int, error)
	faults      *faults
	redrv       *ops.Redriver
	gate        *core.Gate
	// expire ends a claim's replay window now.
	expire func(ctx context.Context, tenant, toolName, key string) error
	// specs are the tools the harness runs (their effects wrapped).
	specs *toolspec.Registry
	// tokens mints Token's tokens.
	tokens store.Tokens
	// exec runs a statement with $1, $2, … placeholders; dbTime is a time
	// as the engine's statements take it.
	exec   func(ctx context.Context, query string, args ...any) error
	dbTime func(time.Time) any
	// reap is one pass of the worker's reaper.
	reap func(ctx context.Context) (*core.ReapResult, error)
	// lease is the configured in-flight lease (the reaper's staleAfter).
	lease time.Duration
}

// Postgres starts a harness on a fresh Postgres database.
func Postgres(t testing.TB, reg *toolspec.Registry, opts *Options) *Harness {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	ctx := context.Background()
	dbURL, pool := pgtest.NewDBWithOptions(t, &pgtest.Options{MaxConns: 40, NamePrefix: opts.DBPrefix})
	if fsys := ownMigrations(opts, gate.Postgres); fsys != nil {
		_, err := pgengine.MigrateApp(ctx, pool, fsys, nil)
		require.NoError(t, err)
	}
	data := pgengine.New(pool)
	seed(t, data, opts.Seed)
	reg = build(t, reg, opts, data)
	h := &Harness{Engine: gate.Postgres, DatabaseURL: dbURL, faults: &faults{}, tokens: data}
	h.count = func(ctx context.Context, q string, args ...any) (n int, err error) {
		err = pool.QueryRow(ctx, q, args...).Scan(&n)
		return n, err
	}
	h.exec = func(ctx context.Context, q string, args ...any) error {
		_, err := pool.Exec(ctx, q, args...)
		return err
	}
	h.dbTime = func(t time.Time) any { return t }
	cfg := newConfig(dbURL, opts)
	wreg := h.faults.wrap(t, reg)
	drv := pgengine.NewDriver(pool, cfg.Pooled())
	a, err := app.NewAPIWithOptions(cfg, drv, nil, &app.APIOptions{Tools: wreg, RateLimit: -1})
	require.NoError(t, err)
	w, err := app.NewWorker(cfg, drv, nil, &app.WorkerOptions{Tools: wreg, MaxWorkers: 10, Fault: h.fault})
	require.NoError(t, err)
	h.redrv = &ops.Redriver{Gate: w.Gate, Jobs: w.Client}
	h.gate = w.Gate
	h.specs, h.lease = wreg, cfg.InflightTimeout
	h.reap = func(ctx context.Context) (*core.ReapResult, error) {
		return w.Gate.Reap(ctx, w.Client, cfg.InflightTimeout)
	}
	h.expire = func(ctx context.Context, tenant, toolName, key string) error {
		_, err := pool.Exec(ctx, `UPDATE idempotency_claims SET expires_at = now() - interval '1 second'
			WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3 AND expires_at IS NOT NULL`, tenant, toolName, key)
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	apiDone := make(chan struct{})
	go func() { defer close(apiDone); a.Run(runCtx) }()
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(runCtx, 30*time.Second) }()
	srv := httptest.NewServer(a.Handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-apiDone
		require.NoError(t, <-workerDone)
	})
	h.url = srv.URL
	h.token = newToken(t, data, reg)
	return h
}

// SQLite starts a harness on a fresh SQLite file, api and worker in one
// process as the embedded deployment runs them.
func SQLite(t testing.TB, reg *toolspec.Registry, opts *Options) *Harness {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	ctx := context.Background()
	path, db := sqlitetest.NewDB(t)
	if fsys := ownMigrations(opts, gate.SQLite); fsys != nil {
		_, err := sqliteengine.MigrateApp(ctx, db, fsys, nil)
		require.NoError(t, err)
	}
	data := sqliteengine.New(db)
	seed(t, data, opts.Seed)
	reg = build(t, reg, opts, data)
	h := &Harness{Engine: gate.SQLite, DatabaseURL: "sqlite:" + path, faults: &faults{}, tokens: data}
	h.count = func(ctx context.Context, q string, args ...any) (n int, err error) {
		err = db.QueryRowContext(ctx, q, args...).Scan(&n)
		return n, err
	}
	h.exec = func(ctx context.Context, q string, args ...any) error {
		_, err := db.ExecContext(ctx, q, args...)
		return err
	}
	h.dbTime = func(t time.Time) any { return sqliteengine.FormatTime(t) }
	cfg := newConfig("sqlite:"+path, opts)
	wreg := h.faults.wrap(t, reg)
	e, err := app.NewEmbedded(cfg, sqliteengine.NewDriver(db), nil, &app.APIOptions{Tools: wreg, RateLimit: -1},
		&app.WorkerOptions{Tools: wreg, MaxWorkers: 4, Fault: h.fault})
	require.NoError(t, err)
	h.redrv = &ops.Redriver{Gate: e.Gate, Jobs: e.Client}
	h.gate = e.Gate
	h.specs, h.lease = wreg, cfg.InflightTimeout
	h.reap = func(ctx context.Context) (*core.ReapResult, error) {
		return e.Gate.Reap(ctx, e.Client, cfg.InflightTimeout)
	}
	h.expire = func(ctx context.Context, tenant, toolName, key string) error {
		_, err := db.ExecContext(ctx, `UPDATE idempotency_claims SET expires_at = ?4
			WHERE tenant_id = ?1 AND tool = ?2 AND idempotency_key = ?3 AND expires_at IS NOT NULL`,
			tenant, toolName, key, sqliteengine.FormatTime(time.Now().Add(-time.Second)))
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx, 30*time.Second) }()
	srv := httptest.NewServer(e.Handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		require.NoError(t, <-done)
	})
	h.url = srv.URL
	h.token = newToken(t, data, reg)
	return h
}

func ownMigrations(opts *Options, engine string) fs.FS {
	if opts.Migrations == nil {
		return nil
	}
	return opts.Migrations(engine)
}

func newConfig(dbURL string, opts *Options) *config.Config {
	cfg := config.Defaults()
	cfg.DatabaseURL = dbURL
	cfg.Wait = 10 * time.Second
	cfg.InflightTimeout = 30 * time.Second
	cfg.ReaperInterval = 5 * time.Second
	if opts.Configure != nil {
		opts.Configure(cfg)
	}
	return cfg
}

func seed(t testing.TB, s store.Seeder, f *store.SeedFile) {
	t.Helper()
	if f == nil {
		return
	}
	_, err := s.Seed(context.Background(), f)
	require.NoError(t, err)
}

// newToken mints a token of Tenant with every scope of reg.
func newToken(t testing.TB, tokens store.Tokens, reg *toolspec.Registry) string {
	t.Helper()
	return mintToken(t, tokens, reg.Scopes())
}

// mintToken mints a token of Tenant, user "gatetest", with scopes.
func mintToken(t testing.TB, tokens store.Tokens, scopes []string) string {
	t.Helper()
	secret, id, err := tenancy.NewToken()
	require.NoError(t, err)
	_, err = tokens.TokenInsert(context.Background(), &store.TokenInsertParams{ID: id, TenantID: Tenant, UserID: "gatetest",
		Scopes: scopes, Hash: tenancy.HashToken(secret)})
	require.NoError(t, err)
	return secret
}

// Answer is a mutation call's answer as a client sees it.
type Answer struct {
	// Status is the HTTP status of the REST twin.
	Status int
	// Outcome is accepted, replayed, in_flight, conflict or expired.
	Outcome   string            `json:"outcome"`
	Replayed  bool              `json:"replayed"`
	Operation *domain.Operation `json:"operation"`
	Error     *domain.Error     `json:"error"`
}

// Call calls a mutation through the REST twin with key as its
// Idempotency-Key and args (without the key) as the body. An "unavailable"
// answer (the database busy, as SQLite's one writer can be under load) is
// retried with the same key, as the answer asks a client to.
//
// A tool that guards against re-minted keys (gate.Policy.DuplicateWindow)
// answers possible_duplicate when the arguments match an earlier call's
// under another key: the guarantees call the same arguments under a fresh
// key of their own on purpose, so Call confirms the new intent, as the
// person would (the Idempotency-Confirm-Duplicate-Of header naming the
// operation the answer named). CallUnconfirmed does not.
func (h *Harness) Call(t testing.TB, toolName, key string, args map[string]any) *Answer {
	t.Helper()
	ans := h.CallUnconfirmed(t, toolName, key, args, "")
	if ans.Error != nil && ans.Error.Code == vocab.CodePossibleDuplicate && ans.Operation != nil && ans.Operation.IdempotencyKey != key {
		ans = h.CallUnconfirmed(t, toolName, key, args, ans.Operation.OperationID)
	}
	return ans
}

// CallUnconfirmed is Call without the confirmation of a possible
// duplicate; confirm, when set, is sent as the confirmation of that
// operation.
func (h *Harness) CallUnconfirmed(t testing.TB, toolName, key string, args map[string]any, confirm string) *Answer {
	t.Helper()
	body, err := json.Marshal(args)
	require.NoError(t, err)
	var ans *Answer
	poll(retryEvery, func() bool {
		req, err := http.NewRequest(http.MethodPost, h.url+"/v1/tools/"+toolName, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		if confirm != "" {
			req.Header.Set("Idempotency-Confirm-Duplicate-Of", confirm)
		}
		ans = h.do(t, req)
		return ans.Error == nil || ans.Error.Code != vocab.CodeUnavailable
	})
	return ans
}

// Operation reads an operation by tool and key. An "unavailable" answer
// (SQLite's one writer busy under load) is retried, as it asks a client
// to.
func (h *Harness) Operation(t testing.TB, toolName, key string) *vocab.Operation {
	t.Helper()
	var status int
	var raw []byte
	poll(retryEvery, func() bool {
		req, err := http.NewRequest(http.MethodGet, h.url+"/v1/operations/"+toolName+"/"+key, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		status = resp.StatusCode
		return status != http.StatusServiceUnavailable
	})
	require.Equal(t, http.StatusOK, status, string(raw))
	var op vocab.Operation
	require.NoError(t, json.Unmarshal(raw, &op))
	return &op
}

// Await waits until the operation is terminal and returns it.
func (h *Harness) Await(t testing.TB, toolName, key string) *vocab.Operation {
	t.Helper()
	var op *vocab.Operation
	if !poll(50*time.Millisecond, func() bool {
		op = h.Operation(t, toolName, key)
		return op.Status == vocab.StatusSucceeded || op.Status == vocab.StatusFailed
	}) {
		require.FailNowf(t, "operation never finished", "%s/%s is still %s after %s", toolName, key, op.Status, AwaitTimeout)
	}
	return op
}

// retryEvery paces the retries of an answer that asks to be retried
// ("unavailable": SQLite's one writer busy under load).
const retryEvery = 100 * time.Millisecond

// poll calls try until it reports done, every interval, for at most
// AwaitTimeout; it reports whether try was done (false: the time ran out).
// It is the kit's one way to wait: a bounded poll, never a sleep for a
// guessed duration.
func poll(every time.Duration, try func() (done bool)) bool {
	deadline := time.Now().Add(AwaitTimeout)
	for {
		if try() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
}

// Count runs a query that returns one integer (count(*) of the tool's own
// rows, say) with $1, $2, … placeholders on either engine.
func (h *Harness) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	n, err := h.count(context.Background(), query, args...)
	require.NoError(t, err)
	return n
}

// LoseNextOutcome makes the next run of toolName's effect happen and then
// lose its outcome before the completing commit, as a worker killed after
// the effect or a response dropped on the way back would: an in-transaction
// effect's writes roll back; an external effect's provider has acted. The
// operation is retried with the same downstream key.
func (h *Harness) LoseNextOutcome(toolName string) { h.faults.arm(toolName) }

// Expire ends a finished operation's replay window now, as if its TTL had
// passed.
func (h *Harness) Expire(t testing.TB, toolName, key string) {
	t.Helper()
	require.NoError(t, h.expire(context.Background(), Tenant, toolName, key))
}

// PruneAt runs the pruner as if the clock read at: expired claims become
// tombstones, and tombstones past their retention go.
func (h *Harness) PruneAt(t testing.TB, at time.Time) {
	t.Helper()
	_, err := h.gate.PruneAt(context.Background(), 100, at)
	require.NoError(t, err)
}

// Redrive re-drives a failed operation as an operator does.
func (h *Harness) Redrive(t testing.TB, toolName, key string) *ops.RedriveLine {
	t.Helper()
	line, err := h.redrv.Redrive(context.Background(), &ops.RedriveParams{TenantID: Tenant, Tool: toolName, Key: key,
		Operator: "gatetest", Reason: "gatetest re-drive"})
	require.NoError(t, err)
	return line
}

func (h *Harness) do(t testing.TB, req *http.Request) *Answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	ans := &Answer{Status: resp.StatusCode}
	require.NoError(t, json.Unmarshal(raw, ans), string(raw))
	return ans
}

// Case describes one tool for Check.
type Case struct {
	// Tool is the mutation's name.
	Tool string
	// Args is a valid call that succeeds (without idempotency_key).
	Args map[string]any
	// Differ is Args with DifferField changed: the same key with it is a
	// conflict naming DifferField.
	Differ      map[string]any
	DifferField string
	// Failing, optional, is a call that fails definitively with FailCode.
	Failing  map[string]any
	FailCode vocab.Code
	// Effects counts op's effects where they land (rows in the tool's own
	// table, refunds at the test provider, mails in the mailbox).
	Effects func(t testing.TB, h *Harness, op *vocab.Operation) int
}

// Check runs the guarantees every mutation must keep, as subtests:
// Duplicate, Concurrent, Conflict, LostOutcome, KilledMidEffect (one
// subtest per KillPoint the tool has: AfterCall for an external effect,
// BeforeCommit for both kinds), ExpiredKeyIsNotRunAgain and, with Failing,
// RedriveAfterDefinitiveFailure. Each uses fresh keys.
//
// LostOutcome loses the outcome in process after the effect ran, and
// KilledMidEffect kills the job in process as SIGKILL would; worker
// processes killed with SIGKILL are the chaos run's part
// (scripts/chaos.sh), with the same expectation.
func Check(t *testing.T, h *Harness, c *Case) {
	t.Helper()
	require.NotEmpty(t, c.Tool, "Case.Tool")
	require.NotNil(t, c.Effects, "Case.Effects")
	require.NotNil(t, c.Differ, "Case.Differ")
	require.NotEmpty(t, c.DifferField, "Case.DifferField")
	prefix := c.Tool + "-" + randomHex(t)
	type guarantee struct {
		name  string
		check func(*testing.T, *Harness, *Case, string)
	}
	guarantees := []guarantee{
		{"Duplicate", CheckDuplicate},
		{"Concurrent", CheckConcurrent},
		{"Conflict", CheckConflict},
		{"LostOutcome", CheckLostOutcome},
	}
	for _, at := range h.killPoints(t, c.Tool) {
		guarantees = append(guarantees, guarantee{"KilledMidEffect/" + at.String(), func(t *testing.T, h *Harness, c *Case, prefix string) {
			CheckKilledMidEffect(t, h, c, prefix, at)
		}})
	}
	guarantees = append(guarantees, guarantee{"ExpiredKeyIsNotRunAgain", CheckExpiredKeyIsNotRunAgain})
	if spec, ok := h.specs.Get(c.Tool); ok && spec.Policy != nil && spec.Policy.DuplicateWindow > 0 {
		guarantees = append(guarantees, guarantee{"ReMintedKeyIsHeld", CheckReMintedKeyIsHeld})
	}
	if c.Failing != nil {
		guarantees = append(guarantees, guarantee{"RedriveAfterDefinitiveFailure", CheckRedriveAfterDefinitiveFailure})
	}
	for _, g := range guarantees {
		t.Run(g.name, func(t *testing.T) { g.check(t, h, c, prefix) })
	}
}

// CheckDuplicate checks that a retry with the same key and arguments replays the first outcome: one effect for two calls.
func CheckDuplicate(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	key := prefix + "-dup"
	first := h.Call(t, c.Tool, key, c.Args)
	require.Nil(t, first.Error, "first call")
	require.Equal(t, string(vocab.OutcomeAccepted), first.Outcome)
	op := h.Await(t, c.Tool, key)
	require.Equal(t, vocab.StatusSucceeded, op.Status, "%+v", op.Error)
	again := h.Call(t, c.Tool, key, c.Args)
	require.Nil(t, again.Error)
	require.Equal(t, string(vocab.OutcomeReplayed), again.Outcome)
	require.Equal(t, op.OperationID, again.Operation.OperationID)
	require.JSONEq(t, string(op.Result), string(again.Operation.Result), "the replay answers the stored result")
	require.Equal(t, 1, c.Effects(t, h, op), "one effect for two calls")
}

// CheckReMintedKeyIsHeld checks, for a tool that guards against re-minted
// keys, that the same arguments under a new key are refused with
// possible_duplicate naming the earlier operation and take no effect, and
// that the retry under the earlier key replays it.
func CheckReMintedKeyIsHeld(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	first := h.Call(t, c.Tool, prefix+"-remint-a", c.Args)
	require.Nil(t, first.Error, "first call")
	op := h.Await(t, c.Tool, prefix+"-remint-a")
	require.Equal(t, vocab.StatusSucceeded, op.Status, "%+v", op.Error)
	held := h.CallUnconfirmed(t, c.Tool, prefix+"-remint-b", c.Args, "")
	require.NotNil(t, held.Error, "the same arguments under a new key")
	require.Equal(t, vocab.CodePossibleDuplicate, held.Error.Code, held.Error.Message)
	require.Equal(t, http.StatusConflict, held.Status)
	require.NotNil(t, held.Operation)
	require.Equal(t, op.OperationID, held.Operation.OperationID, "names the earlier operation")
	again := h.Call(t, c.Tool, prefix+"-remint-a", c.Args)
	require.Equal(t, string(vocab.OutcomeReplayed), again.Outcome)
	require.Equal(t, 1, c.Effects(t, h, op), "one effect: the re-minted key ran nothing")
}

// CheckConcurrent checks that concurrent identical calls share one operation and one effect.
func CheckConcurrent(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	key := prefix + "-conc"
	const callers = 8
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[string]bool{}
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ans := h.Call(t, c.Tool, key, c.Args)
			if ans.Operation == nil {
				t.Errorf("a concurrent call got no operation: %+v", ans.Error)
				return
			}
			mu.Lock()
			ids[ans.Operation.OperationID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, ids, 1, "every concurrent caller got the same operation")
	op := h.Await(t, c.Tool, key)
	require.Equal(t, vocab.StatusSucceeded, op.Status, "%+v", op.Error)
	require.Equal(t, 1, c.Effects(t, h, op), "one effect for %d concurrent calls", callers)
}

// CheckConflict checks that the same key with other arguments is refused, naming the field, with no effect.
func CheckConflict(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	key := prefix + "-conflict"
	first := h.Call(t, c.Tool, key, c.Args)
	require.Nil(t, first.Error)
	op := h.Await(t, c.Tool, key)
	other := h.Call(t, c.Tool, key, c.Differ)
	require.NotNil(t, other.Error, "the same key with other arguments must be refused")
	require.Equal(t, vocab.CodeKeyReuseDifferentArgs, other.Error.Code)
	require.Contains(t, other.Error.Fields, c.DifferField)
	require.Equal(t, 1, c.Effects(t, h, op), "the conflict made no effect")
}

// CheckLostOutcome checks that an effect whose outcome is lost before the completing commit runs again with the same downstream key and makes no second effect.
func CheckLostOutcome(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	key := prefix + "-lost"
	h.LoseNextOutcome(c.Tool)
	first := h.Call(t, c.Tool, key, c.Args)
	require.Nil(t, first.Error)
	op := h.Await(t, c.Tool, key)
	require.Equal(t, vocab.StatusSucceeded, op.Status, "%+v", op.Error)
	require.GreaterOrEqual(t, op.Attempts, 2, "the effect ran again after its outcome was lost")
	require.False(t, h.faults.armed(c.Tool), "the fault was used")
	require.Equal(t, 1, c.Effects(t, h, op), "the second run made no second effect")
}

// CheckExpiredKeyIsNotRunAgain checks that after its replay window the same intent is refused as expired (kept and pruned), other arguments take the key, and after the retention the intent is new again.
func CheckExpiredKeyIsNotRunAgain(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	key := prefix + "-exp"
	h.Call(t, c.Tool, key, c.Args)
	op := h.Await(t, c.Tool, key)
	require.Equal(t, vocab.StatusSucceeded, op.Status, "%+v", op.Error)
	h.Expire(t, c.Tool, key)
	for _, stage := range []string{"claim kept", "tombstone"} {
		again := h.Call(t, c.Tool, key, c.Args)
		require.NotNil(t, again.Error, "%s: the same intent after its replay window must be refused", stage)
		require.Equal(t, vocab.CodeKeyExpired, again.Error.Code, stage)
		require.Contains(t, again.Error.Message, op.OperationID, "%s: the answer names the original operation", stage)
		require.Equal(t, op.OperationID, again.Operation.OperationID, stage)
		require.Equal(t, vocab.StatusSucceeded, again.Operation.Status, stage)
		require.Equal(t, 1, c.Effects(t, h, op), "%s: no second effect", stage)
		h.PruneAt(t, time.Now()) // the claim becomes a tombstone
	}
	// Other arguments are a new intent: it takes the key.
	other := h.Call(t, c.Tool, key, c.Differ)
	require.Nil(t, other.Error, "%+v", other.Error)
	require.Equal(t, string(vocab.OutcomeAccepted), other.Outcome)
	require.NotEqual(t, op.OperationID, other.Operation.OperationID)
	h.Await(t, c.Tool, key)

	// After the retention the same key and arguments are new again.
	key2 := prefix + "-ret"
	h.Call(t, c.Tool, key2, c.Args)
	first := h.Await(t, c.Tool, key2)
	h.Expire(t, c.Tool, key2)
	h.PruneAt(t, time.Now().Add(core.MaxRetention+time.Hour))
	fresh := h.Call(t, c.Tool, key2, c.Args)
	require.Nil(t, fresh.Error, "%+v", fresh.Error)
	require.Equal(t, string(vocab.OutcomeAccepted), fresh.Outcome)
	require.NotEqual(t, first.OperationID, fresh.Operation.OperationID)
}

// CheckRedriveAfterDefinitiveFailure checks that a definitive failure re-driven fails the same way, keeps its operation, and made no effect.
func CheckRedriveAfterDefinitiveFailure(t *testing.T, h *Harness, c *Case, prefix string) {
	t.Helper()
	key := prefix + "-fail"
	h.Call(t, c.Tool, key, c.Failing)
	op := h.Await(t, c.Tool, key)
	require.Equal(t, vocab.StatusFailed, op.Status)
	require.Equal(t, c.FailCode, op.Error.Code)
	line := h.Redrive(t, c.Tool, key)
	require.Equal(t, ops.ActionRedriven, line.Action)
	again := h.Await(t, c.Tool, key)
	require.Equal(t, vocab.StatusFailed, again.Status, "the same arguments fail the same way")
	require.Equal(t, c.FailCode, again.Error.Code)
	require.Equal(t, op.OperationID, again.OperationID, "a re-drive keeps the operation")
	require.Zero(t, c.Effects(t, h, again), "a failed operation made no effect")
}

func randomHex(t testing.TB) string {
	var b [4]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

// faults loses effects' outcomes and kills jobs on request, and keeps the
// downstream key of every run of an effect.
type faults struct {
	mu   sync.Mutex
	next map[string]bool
	// kills are the armed kills, by tool.
	kills map[string]*kill
	// runs are the downstream keys of each operation's effect runs, in
	// order.
	runs map[string][]string
}

// ran records a run of c's effect.
func (f *faults) ran(c *core.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[string][]string{}
	}
	f.runs[c.OperationID] = append(f.runs[c.OperationID], c.DownstreamKey)
}

// ranWith returns the downstream keys of operationID's effect runs.
func (f *faults) ranWith(operationID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.runs[operationID]...)
}

func (f *faults) arm(toolName string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = map[string]bool{}
	}
	f.next[toolName] = true
}

func (f *faults) armed(toolName string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next[toolName]
}

func (f *faults) take(toolName string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next[toolName] {
		delete(f.next, toolName)
		return true
	}
	return false
}

// wrap returns reg with every mutation's effect able to lose its outcome.
func (f *faults) wrap(t testing.TB, reg *toolspec.Registry) *toolspec.Registry {
	t.Helper()
	out := toolspec.NewRegistry()
	for _, spec := range reg.All() {
		cp := *spec
		if spec.Mutating {
			cp.Effect = &lossyEffect{inner: spec.Effect, name: spec.Name, f: f}
		}
		require.NoError(t, out.Add(&cp))
	}
	return out
}

// errLost is the outcome a lossy effect reports instead of its result.
var errLost = errors.New("gatetest: the effect's outcome was lost before the commit")

type lossyEffect struct {
	inner toolspec.Effect
	name  string
	f     *faults
}

func (e *lossyEffect) Apply(ctx context.Context, tx toolspec.Tx, c *core.Claim) (json.RawMessage, error) {
	e.f.ran(c)
	res, err := e.inner.Apply(ctx, tx, c)
	if err == nil && e.f.take(e.name) {
		return nil, gate.Transient("tooltest_lost_outcome", errLost)
	}
	return res, err
}

func (e *lossyEffect) Call(ctx context.Context, c *core.Claim) (json.RawMessage, error) {
	e.f.ran(c)
	res, err := e.inner.Call(ctx, c)
	if err == nil && e.f.take(e.name) {
		return nil, gate.Transient("tooltest_lost_outcome", errLost)
	}
	return res, err
}

func (e *lossyEffect) Record(ctx context.Context, tx toolspec.Tx, c *core.Claim, result json.RawMessage) error {
	return e.inner.Record(ctx, tx, c, result)
}
