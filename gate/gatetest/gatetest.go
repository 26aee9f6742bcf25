// Package gatetest runs a team's own tools through idemgate's real gate,
// River workers, REST api and MCP server, on Postgres and on SQLite, and
// checks the guarantees every mutation must keep, as River's rivertest
// does for workers.
//
//	func TestIssueCoupon(t *testing.T) {
//		reg := gate.NewRegistry().MustAdd(IssueCoupon)
//		h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: Migrations})
//		gatetest.Check(t, h, &gatetest.Case{Tool: "issue_coupon", Args: …, Differ: …, DifferField: "percent_off",
//			Effects: func(t testing.TB, h *gatetest.Harness, op *domain.Operation) int {
//				return h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID)
//			}})
//	}
//
// Check kills the worker in the middle of the effect, in process, as
// SIGKILL would: after an external effect's provider answered
// ([Harness.KillNextAfterCall]) and inside the completing transaction
// before its COMMIT ([Harness.KillNextBeforeCommit]). The harness then
// moves the lease past its expiry and runs the reaper, and the effect runs
// again with the same downstream key: an in-transaction effect rolled
// back, and an external one's provider must deduplicate by
// [gate.Op.DownstreamKey], for Effects to count one. A test of its own
// can kill a call the same way, and call the tools as an agent does
// through [Harness.MCP] (a go-sdk client session) or, for a read tool,
// [Harness.Read]:
//
//	h.KillNextBeforeCommit("issue_coupon")
//	session := h.MCP(t)
//	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "issue_coupon", Arguments: …})
//	op := h.Await(t, "issue_coupon", key) // succeeded on the reaper's fresh job, once
//
// Postgres comes from TEST_DATABASE_URL (default the server on
// 127.0.0.1:5432, user postgres); each harness gets a fresh database.
package gatetest

import (
	"io/fs"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/toolkit"
	"github.com/idemgate/idemgate/internal/toolspec"
)

// Options configure a Harness. The zero value is valid.
type Options struct {
	// Migrations returns the tools' own goose SQL migrations for an engine
	// (gate.Postgres or gate.SQLite), applied after idemgate's; nil: none.
	Migrations func(engine string) fs.FS
	// DBPrefix starts the name of a Postgres harness's database, so that a
	// team's test databases follow its own naming; default "idemgate_t_".
	// The database is dropped when the test ends.
	DBPrefix string
}

// Harness is an api and a worker running a registry's tools in process,
// calling them as tenant "acme" with a token holding every tool's scope.
type Harness struct {
	h *toolkit.Harness
}

// Postgres starts a harness on a fresh Postgres database.
func Postgres(t testing.TB, reg *gate.Registry, opts *Options) *Harness {
	t.Helper()
	return &Harness{h: toolkit.Postgres(t, toolspec.Of(reg), kitOptions(opts))}
}

// SQLite starts a harness on a fresh SQLite file, api and worker in one
// process as the embedded deployment runs them.
func SQLite(t testing.TB, reg *gate.Registry, opts *Options) *Harness {
	t.Helper()
	return &Harness{h: toolkit.SQLite(t, toolspec.Of(reg), kitOptions(opts))}
}

func kitOptions(opts *Options) *toolkit.Options {
	if opts == nil {
		return &toolkit.Options{}
	}
	return &toolkit.Options{Migrations: opts.Migrations, DBPrefix: opts.DBPrefix}
}

// Engine names the harness's database: gate.Postgres or gate.SQLite.
func (h *Harness) Engine() string { return h.h.Engine }

// DatabaseURL returns the harness's database, for a test's own reads and
// writes: a postgres:// URL (with pool_max_conns, which pgxpool reads), or
// "sqlite:" and the file's path.
func (h *Harness) DatabaseURL() string { return h.h.DatabaseURL }

// Answer is a mutation call's answer as a client sees it.
type Answer struct {
	// Status is the HTTP status of the REST twin.
	Status int
	// Outcome is accepted, replayed, in_flight, conflict or expired.
	Outcome   string
	Replayed  bool
	Operation *domain.Operation
	Error     *domain.Error
}

// Call calls a mutation through the REST twin with key as its
// Idempotency-Key and args (without the key) as the body. An "unavailable"
// answer (SQLite's one writer busy) is retried with the same key, as the
// answer asks a client to.
func (h *Harness) Call(t testing.TB, toolName, key string, args map[string]any) *Answer {
	t.Helper()
	a := Answer(*h.h.Call(t, toolName, key, args))
	return &a
}

// Await waits until the operation is terminal and returns it.
func (h *Harness) Await(t testing.TB, toolName, key string) *domain.Operation {
	t.Helper()
	return h.h.Await(t, toolName, key)
}

// Count runs a query that returns one integer (count(*) of the tool's own
// rows, say) with $1, $2, … placeholders on either engine.
func (h *Harness) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	return h.h.Count(t, query, args...)
}

// LoseNextOutcome makes the next run of toolName's effect happen and then
// lose its outcome before the completing commit, as a worker killed after
// the effect or a response dropped on the way back would: an in-transaction
// effect's writes roll back; an external effect's provider has acted. The
// operation is retried with the same downstream key.
func (h *Harness) LoseNextOutcome(toolName string) { h.h.LoseNextOutcome(toolName) }

// KillNextAfterCall kills the worker running toolName's effect next, an
// external (Call) one, as SIGKILL would, just after the provider answered
// and before anything of it is recorded: the job stays running, the
// claim's lease held. The harness then moves the lease past its expiry
// and runs the reaper, which gives the claim a fresh job; the effect runs
// again with the same downstream key, and a provider that deduplicates by
// it acts once. It panics on an in-transaction tool.
func (h *Harness) KillNextAfterCall(toolName string) { h.h.KillNext(toolName, toolkit.AfterCall) }

// KillNextBeforeCommit kills the worker running toolName's effect next
// inside the completing transaction, after the effect's writes (InTx, or
// Call's Record) and just before COMMIT, as SIGKILL would: the
// transaction rolls back and the job stays running. The harness then
// brings the claim back as KillNextAfterCall does, and the effect runs
// again with the same downstream key. In-transaction jobs that ran at the
// same time may share that transaction (the worker's group commit): they
// roll back with it, and River runs them again.
func (h *Harness) KillNextBeforeCommit(toolName string) { h.h.KillNext(toolName, toolkit.BeforeCommit) }

// URL is the harness's base URL: MCP at URL()+"/mcp", the REST twins at
// URL()+"/v1/tools/{name}".
func (h *Harness) URL() string { return h.h.URL() }

// Token mints a bearer token of the harness's tenant holding exactly
// scopes; none: a token that may call nothing.
func (h *Harness) Token(t testing.TB, scopes ...string) string {
	t.Helper()
	return h.h.Token(t, scopes...)
}

// MCP connects an MCP client session over Streamable HTTP to
// URL()+"/mcp" with a token holding every tool's scope; it is closed when
// t's test ends.
func (h *Harness) MCP(t testing.TB) *mcp.ClientSession {
	t.Helper()
	return h.h.MCP(t)
}

// Read calls a read tool (a gate.Read, or get_operation) through its REST
// twin with args as the body, and decodes its result into out (nil:
// ignore it). A refusal (not found, invalid arguments, a missing scope) is
// returned as an *domain.Error with its code. Mutations go through Call.
func (h *Harness) Read(t testing.TB, toolName string, args, out any) error {
	t.Helper()
	return h.h.Read(t, toolName, args, out)
}

// ExpireAndPrune ends a finished operation's replay window now and then
// runs the pruner as if the clock read at: the claim moves into its key's
// history, and history rows past their retention go.
func (h *Harness) ExpireAndPrune(t testing.TB, toolName, key string, at time.Time) {
	t.Helper()
	h.h.Expire(t, toolName, key)
	h.h.PruneAt(t, at)
}

// Case describes one mutation for Check.
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
	FailCode domain.Code
	// Effects counts op's effects where they land (rows in the tool's own
	// table, calls at the provider, mails in the mailbox).
	Effects func(t testing.TB, h *Harness, op *domain.Operation) int
}

// Check runs the guarantees every mutation must keep, one subtest each:
// Duplicate, Concurrent, Conflict, LostOutcome, KilledMidEffect/AfterCall
// (external tools) and KilledMidEffect/BeforeCommit (see
// KillNextAfterCall and KillNextBeforeCommit: one effect in all, every
// run with the same downstream key, the claim on a fresh job; a tool with
// Policy.FailUnknownOutcome fails outcome_unknown instead),
// ExpiredKeyIsNotRunAgain and, with Failing,
// RedriveAfterDefinitiveFailure. Each uses fresh keys.
func Check(t *testing.T, h *Harness, c *Case) {
	t.Helper()
	kc := &toolkit.Case{Tool: c.Tool, Args: c.Args, Differ: c.Differ, DifferField: c.DifferField,
		Failing: c.Failing, FailCode: c.FailCode}
	if c.Effects != nil {
		kc.Effects = func(t testing.TB, _ *toolkit.Harness, op *domain.Operation) int { return c.Effects(t, h, op) }
	}
	toolkit.Check(t, h.h, kc)
}
