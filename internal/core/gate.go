// Package gate is the idempotency gate: it claims (tenant, tool, key) under a
// unique index, enqueues the claim's job in the same transaction, and answers
// retries with the first outcome. Workers re-enter the same gate before any
// effect. The gate runs on any Store; engine/pgengine and engine/sqliteengine
// implement one each.
package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/telemetry"
	"github.com/idemgate/idemgate/internal/vocab"
)

// DefaultRetryAfter is what an in_flight answer tells the client to wait
// before polling again.
const DefaultRetryAfter = time.Second

// ApprovalRetryAfter is what an answer about an operation awaiting a
// person's approval tells the client to wait before polling again: people
// decide in minutes, not milliseconds.
const ApprovalRetryAfter = 5 * time.Second

// maxClaimLoops bounds the claim loop when a claim vanishes (pruned) or a
// take-over races between the insert and the read.
const maxClaimLoops = 8

// Enqueuer inserts the job that executes a claim, inside the claiming
// transaction (River's InsertTx), and returns the job's id.
type Enqueuer interface {
	JobInsert(ctx context.Context, tx Tx, claim *Claim) (int64, error)
}

// BatchEnqueuer is an Enqueuer that also inserts the jobs of many claims
// at once (River's InsertManyTx) and deletes jobs (River's
// JobDeleteManyTx), both inside the gate's transaction. With one, the gate
// commits the new claims of concurrent calls together (Config.MaxClaimBatch).
type BatchEnqueuer interface {
	Enqueuer
	// JobInsertMany inserts one job per claim, in order, and returns
	// their ids in the same order.
	JobInsertMany(ctx context.Context, tx Tx, claims []*Claim) ([]int64, error)
	// JobDeleteMany deletes the jobs, inserted in tx, of claims that were
	// not written.
	JobDeleteMany(ctx context.Context, tx Tx, ids []int64) error
}

// ApprovalNoticer is an Enqueuer that also tells approvers of a claim
// awaiting approval: the gate calls it in the transaction that writes such
// a claim (EventAwait, EventAwaitTakeOver), so that the notice is sent
// exactly when the claim commits (a transactional outbox).
type ApprovalNoticer interface {
	// ApprovalNoticeInsert inserts in tx whatever tells the approvers of
	// claim (just written, awaiting approval); it may insert nothing.
	ApprovalNoticeInsert(ctx context.Context, tx Tx, claim *Claim) error
}

// Waiter tells waiting callers that a claim has reached a terminal status.
// The gate's own (Config.Waiter nil) polls the database for all the
// process's waiting calls at once.
type Waiter interface {
	// Subscribe registers interest in claimID. The channel receives when
	// the claim is terminal, also when it already was at subscription;
	// it may receive spuriously, so the caller re-reads the claim. cancel
	// releases the subscription.
	Subscribe(claimID int64) (ch <-chan struct{}, cancel func())
}

// Config configures a Gate.
type Config struct {
	// Store is the database. Required.
	Store Store
	// Enqueuer inserts a claim's job in the claiming transaction. Required.
	Enqueuer Enqueuer
	// Policies are the mutating tools. Each tool must appear once.
	Policies []Policy
	// Secret keys the intent keys that new claims' downstream keys derive
	// from (IntentKeyer; the deployment's IDEMGATE_SECRET): the same intent
	// gets the same downstream key in any database of the deployment, so an
	// intent re-created after a lost commit (failover to an asynchronous
	// standby, a restore) reaches the provider with the key it used before.
	// Every process that claims must have the same secret. Default (empty):
	// no intent keys, and downstream keys derive from the random operation
	// id, which a lost commit forgets (the api and the embedded mode warn at
	// start).
	Secret []byte
	// Waiter wakes callers waiting for an outcome. Nil is the gate's own:
	// while calls wait, one query per PollInterval for all of them.
	Waiter Waiter
	// PollInterval is how often the gate's own Waiter polls while calls
	// wait. Default DefaultPollInterval.
	PollInterval time.Duration
	// DBTimeout bounds each claiming transaction and audit write, so that a
	// call against an unreachable database fails with vocab.ErrUnavailable
	// instead of hanging. Default DefaultDBTimeout.
	DBTimeout time.Duration
	// MaxClaimBatch is the most new claims of concurrent calls committed
	// in one transaction (group commit; see batch.go). Default
	// DefaultMaxClaimBatch; 1 claims each call in a transaction of its
	// own. Group commit needs an Enqueuer that is a BatchEnqueuer; a call
	// in a sampled trace always claims on its own, so that its trace shows
	// its own job insert.
	MaxClaimBatch int
	// MaxPendingApprovals caps the claims of a tenant awaiting approval: a
	// call that would wait for a person while the tenant already has this
	// many waiting is refused with vocab.CodeApprovalsPendingLimit,
	// nothing claimed, one denied audit row. Default
	// DefaultMaxPendingApprovals; negative: no cap.
	MaxPendingApprovals int
	// OnTransition, when set, is told of every transition the gate
	// commits, by event (metrics).
	OnTransition func(Event)
	// TracerProvider receives a span per Claim (gate.claim). Nil or a
	// no-op provider: no spans.
	TracerProvider trace.TracerProvider
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultDBTimeout is the default Config.DBTimeout.
const DefaultDBTimeout = 2 * time.Second

// DefaultMaxPendingApprovals is the default Config.MaxPendingApprovals.
const DefaultMaxPendingApprovals = 50

// ApprovalsPendingRetryAfter is what a call refused with
// vocab.CodeApprovalsPendingLimit is told to wait before trying again:
// the waiting calls clear as people decide, in minutes.
const ApprovalsPendingRetryAfter = time.Minute

// Gate claims intents and answers retries.
type Gate struct {
	store    Store
	enqueuer Enqueuer
	policies map[string]*Policy
	intents  IntentKeyer
	waiter   Waiter
	timeout  time.Duration
	logger   *slog.Logger
	// maxPending is Config.MaxPendingApprovals; 0: no cap.
	maxPending int
	// onTransition is Config.OnTransition.
	onTransition func(Event)
	tracer       telemetry.Tracer
	// flights folds identical concurrent calls; audits batches the audit
	// rows of calls answered from an existing claim.
	flights flights
	audits  *auditBatcher
	// batch groups new claims; nil when group commit is off.
	batch *batcher
}

// New returns a Gate, or an error naming the first invalid field of cfg.
func New(cfg *Config) (*Gate, error) {
	if cfg.Store == nil {
		return nil, errors.New("gate: Config.Store is required")
	}
	if cfg.Enqueuer == nil {
		return nil, errors.New("gate: Config.Enqueuer is required")
	}
	if cfg.MaxClaimBatch < 0 {
		return nil, fmt.Errorf("gate: Config.MaxClaimBatch is %d; it must be 0 (default) or more", cfg.MaxClaimBatch)
	}
	g := &Gate{
		store:    cfg.Store,
		enqueuer: cfg.Enqueuer,
		policies: make(map[string]*Policy, len(cfg.Policies)),
		intents:  NewIntentKeyer(cfg.Secret),
		waiter:   cfg.Waiter,
		timeout:  cfg.DBTimeout,
		logger:   cfg.Logger,

		maxPending:   cfg.MaxPendingApprovals,
		onTransition: cfg.OnTransition,
		tracer:       telemetry.NewTracer(cfg.TracerProvider, "github.com/idemgate/idemgate/internal/core"),
	}
	if g.timeout == 0 {
		g.timeout = DefaultDBTimeout
	}
	switch {
	case g.maxPending == 0:
		g.maxPending = DefaultMaxPendingApprovals
	case g.maxPending < 0:
		g.maxPending = 0
	}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	g.audits = newAuditBatcher(g.store, g.timeout)
	if enq, ok := cfg.Enqueuer.(BatchEnqueuer); ok && cfg.MaxClaimBatch != 1 {
		n := cfg.MaxClaimBatch
		if n <= 0 {
			n = DefaultMaxClaimBatch
		}
		g.batch = newBatcher(g, enq, n)
	}
	if g.waiter == nil {
		interval := cfg.PollInterval
		if interval <= 0 {
			interval = DefaultPollInterval
		}
		g.waiter = &poller{store: g.store, interval: interval, timeout: g.timeout, logger: g.logger}
	}
	for i := range cfg.Policies {
		p := cfg.Policies[i]
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := g.policies[p.Tool]; dup {
			return nil, fmt.Errorf("gate: policy %s is configured twice", p.Tool)
		}
		g.policies[p.Tool] = &p
	}
	return g, nil
}

// Store returns the gate's store.
func (g *Gate) Store() Store { return g.store }

// Policy returns the policy of tool, if it is a mutating tool.
func (g *Gate) Policy(tool string) (*Policy, bool) {
	p, ok := g.policies[tool]
	return p, ok
}

// Intent is a validated mutation request: decoded once, fingerprinted once,
// and the same value is stored and later executed.
type Intent struct {
	Tool string
	Key  string
	// Args are the decoded arguments, idempotency_key included.
	Args map[string]any
	// Canonical is the RFC 8785 JSON of Args without idempotency_key: what
	// the claim stores and the worker executes.
	Canonical json.RawMessage
	// ArgsHash is the hex sha256 of the canonical arguments without the
	// tool's volatile fields.
	ArgsHash string
	// ConfirmDuplicateOf is the operation id the call's ConfirmField
	// names: the caller confirmed a new intent beside that operation.
	ConfirmDuplicateOf string
}

// NewIntent validates the idempotency key in args and fingerprints them
// under tool's policy. Errors are *domain.Error naming the field.
func (g *Gate) NewIntent(tool string, args map[string]any) (*Intent, error) {
	p, ok := g.policies[tool]
	if !ok {
		return nil, vocab.Errorf(vocab.CodeNotFound, "tool", "%q is not a mutating tool", tool)
	}
	raw, present := args["idempotency_key"]
	key, isString := raw.(string)
	if present && !isString {
		return nil, vocab.Errorf(vocab.CodeInvalidIdempotencyKey, "idempotency_key", "must be a string")
	}
	if err := ValidateKey(key, present); err != nil {
		return nil, err
	}
	confirm, err := confirmation(p, args)
	if err != nil {
		return nil, err
	}
	_, hash, err := Fingerprint(args, p.VolatileFields)
	if err != nil {
		return nil, err
	}
	canonical, err := CanonicalArgs(args)
	if err != nil {
		return nil, err
	}
	return &Intent{Tool: tool, Key: key, Args: args, Canonical: canonical, ArgsHash: hash, ConfirmDuplicateOf: confirm}, nil
}

// confirmation is the operation id of args' ConfirmField ("" without
// one): an operation id, on a tool that guards duplicates.
func confirmation(p *Policy, args map[string]any) (string, error) {
	raw, present := args[ConfirmField]
	if !present {
		return "", nil
	}
	if p.DuplicateWindow <= 0 {
		return "", vocab.Errorf(vocab.CodeInvalidArgument, ConfirmField,
			"%s does not hold calls as possible duplicates: leave %s out", p.Tool, ConfirmField)
	}
	id, ok := raw.(string)
	if _, err := uuid.Parse(id); !ok || err != nil || len(id) != 36 {
		return "", vocab.Errorf(vocab.CodeInvalidArgument, ConfirmField,
			"must be the operation_id (a UUID) that a possible_duplicate answer named")
	}
	return strings.ToLower(id), nil
}

// ClaimParams are the parameters of Gate.Claim.
type ClaimParams struct {
	Actor     vocab.Actor
	RequestID string
	// ClientRequestID is the caller's X-Request-Id, kept apart in audit rows.
	ClientRequestID string
	Intent          *Intent
	// Wait is how long to wait for a terminal status before answering with
	// the handle (IDEMGATE_WAIT). Zero answers at once.
	Wait time.Duration
	// ApprovalWindow, when positive, means the call needs a person's
	// approval: a new claim awaits approval for this long, with no job
	// (EventAwait). A retry of the same intent answers the same waiting
	// operation; the window does not change an existing claim.
	ApprovalWindow time.Duration
	// ApprovalSummary is the tool's summary for the approver, stored with
	// a claim that waits.
	ApprovalSummary string
	// Approval, when set, gives ApprovalWindow (or 0) and ApprovalSummary,
	// and is asked only once the gate knows the call writes a new intent
	// (no claim of its key, or one to take over), outside any transaction:
	// retries and replays, the common case, never pay for it. Its error
	// ends the call with no claim written.
	Approval func(ctx context.Context) (window time.Duration, summary string, err error)
}

// approvalSummary is the summary to store: none for a call that does not
// wait.
func (p *ClaimParams) approvalSummary() string {
	if p.ApprovalWindow <= 0 {
		return ""
	}
	return p.ApprovalSummary
}

// ClaimResult is the answer to a mutation call.
type ClaimResult struct {
	Outcome vocab.Outcome
	// Replayed is true when the stored outcome of an earlier call is returned.
	Replayed bool
	// Claim is the claim as last read.
	Claim *Claim
	// RetryAfter is set for in_flight answers.
	RetryAfter time.Duration
	// Conflict is set for conflict answers: the differing fields and a
	// message, with code idempotency_key_reuse_with_different_args.
	Conflict *vocab.Error
	// Expired is set for expired answers (code idempotency_key_expired),
	// naming the original operation and its outcome; Claim then holds what
	// is known of that operation.
	Expired *vocab.Error
	// Duplicate is set for possible_duplicate answers (a guarded tool),
	// naming the earlier operation; Claim then holds that operation.
	Duplicate *vocab.Error
}

// Claim claims the intent for the actor's tenant, or answers from the
// existing claim: accepted, replayed, conflict or in_flight. It writes one
// audit row per call, in a span named gate.claim when traced.
func (g *Gate) Claim(ctx context.Context, params *ClaimParams) (*ClaimResult, error) {
	ctx, span := g.tracer.Start(ctx, "gate.claim", trace.WithAttributes(
		attribute.String("idemgate.tenant", params.Actor.TenantID),
		attribute.String("idemgate.tool", params.Intent.Tool),
		attribute.String("idemgate.idempotency_key", params.Intent.Key),
	))
	defer span.End()
	res, err := g.claim(ctx, params)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "claim failed")
		return nil, err
	}
	span.SetAttributes(attribute.String("idemgate.outcome", string(res.Outcome)))
	if res.Claim != nil {
		span.SetAttributes(attribute.String("idemgate.operation_id", res.Claim.OperationID),
			attribute.Int64("idemgate.job_id", res.Claim.JobID),
			attribute.String("idemgate.status", string(res.Claim.Status)))
	}
	return res, nil
}

// claim is Claim without the span: the database stage (shared by
// identical concurrent calls, see flight.go), then the answer.
func (g *Gate) claim(ctx context.Context, params *ClaimParams) (*ClaimResult, error) {
	start := time.Now()
	in := params.Intent
	policy, ok := g.policies[in.Tool]
	if !ok {
		return nil, vocab.Errorf(vocab.CodeNotFound, "tool", "%q is not a mutating tool", in.Tool)
	}
	auditArgs, err := json.Marshal(policy.RedactArgs(in.Args))
	if err != nil {
		return nil, fmt.Errorf("gate: marshal audit args: %w", err)
	}
	key := flightKey{tenant: params.Actor.TenantID, tool: in.Tool, key: in.Key, argsHash: in.ArgsHash, confirm: in.ConfirmDuplicateOf}
	f, leader := g.flights.join(key)
	var st *stage
	if leader {
		st, err = g.stage(ctx, params, policy, auditArgs, start)
		g.flights.land(key, f, st, err)
	} else {
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, errors.Join(vocab.ErrUnavailable, ctx.Err())
		}
		if st, err = f.st, f.err; err == nil {
			st = st.forFollower()
		} else {
			st, err = g.stage(ctx, params, policy, auditArgs, start)
		}
	}
	switch {
	case err != nil:
		return nil, err
	case st.accepted != nil:
		return g.accepted(ctx, params, st.accepted)
	case st.expired != nil:
		return g.refuseExpired(ctx, params, start, st.expired, auditArgs)
	case st.duplicate != nil:
		return g.refuseDuplicate(ctx, params, policy, start, st.duplicate, auditArgs)
	}
	return g.answerExisting(ctx, params, policy, st.existing, auditArgs, start)
}

// stage reads the claim of the call's key and, when there is none (or it
// expired), runs the claiming transaction.
func (g *Gate) stage(ctx context.Context, params *ClaimParams, policy *Policy, auditArgs json.RawMessage, start time.Time) (*stage, error) {
	in := params.Intent
	// Retries are the common case: read the claim first, outside any
	// transaction (one round trip, no write). Only a missing or expired
	// claim goes on to the claiming transaction, where the unique index
	// stays the lock.
	readCtx, cancelRead := context.WithTimeout(ctx, g.timeout)
	existing, err := g.store.ClaimGetByKey(readCtx, &ClaimGetByKeyParams{
		TenantID: params.Actor.TenantID, Tool: in.Tool, IdempotencyKey: in.Key,
	})
	cancelRead()
	switch {
	case err == nil && !existing.Expired:
		return &stage{existing: existing}, nil
	case err == nil && existing.ArgsHash == in.ArgsHash:
		return &stage{expired: existing}, nil
	case err == nil, errors.Is(err, vocab.ErrNotFound):
	default:
		return nil, err
	}
	if params.Approval != nil && params.ApprovalWindow <= 0 {
		window, summary, aerr := params.Approval(ctx)
		if aerr != nil {
			return nil, aerr
		}
		p := *params
		p.ApprovalWindow, p.ApprovalSummary, p.Approval = window, summary, nil
		params = &p
	}
	// A new key joins the next group of new claims; an expired claim of
	// other arguments is taken over on the single path, where it is read
	// and replaced in one transaction.
	if g.batch != nil && err != nil && params.ApprovalWindow <= 0 && !trace.SpanContextFromContext(ctx).IsSampled() {
		claim, err := g.batch.claim(ctx, params, policy, auditArgs, start)
		if err != nil {
			return nil, err
		}
		if claim != nil {
			return &stage{accepted: &ClaimResult{Outcome: vocab.OutcomeAccepted, Claim: claim}}, nil
		}
	}
	for range maxClaimLoops {
		res, current, err := g.claimOnce(ctx, params, policy, auditArgs, start)
		switch {
		case err != nil:
			return nil, err
		case res != nil && res.Outcome == vocab.OutcomeExpired:
			return &stage{expired: res.Claim}, nil
		case res != nil && res.Outcome == vocab.OutcomeDuplicate:
			return &stage{duplicate: res}, nil
		case res != nil:
			return &stage{accepted: res}, nil
		case current != nil:
			return &stage{existing: current}, nil
		}
	}
	return nil, fmt.Errorf("gate: claim of %s/%s did not settle after %d attempts", in.Tool, in.Key, maxClaimLoops)
}

// accepted waits up to the call's Wait for the outcome of the claim it
// created; its audit row is committed with the claim.
func (g *Gate) accepted(ctx context.Context, params *ClaimParams, res *ClaimResult) (*ClaimResult, error) {
	if params.Wait > 0 && !res.Claim.Status.Terminal() && res.Claim.Status != vocab.StatusAwaitingApproval {
		var err error
		if res.Claim, err = g.await(ctx, res.Claim, params.Wait); err != nil {
			return nil, err
		}
	}
	if !res.Claim.Status.Terminal() {
		res.RetryAfter = DefaultRetryAfter
	}
	return res, nil
}

// answerExisting answers a call whose key has a live claim: conflict,
// replayed (after waiting up to Wait for a terminal status) or in_flight,
// with one audit row.
func (g *Gate) answerExisting(ctx context.Context, params *ClaimParams, policy *Policy, current *Claim, auditArgs json.RawMessage, start time.Time) (*ClaimResult, error) {
	in := params.Intent
	res := &ClaimResult{Claim: current}
	if current.ArgsHash != in.ArgsHash {
		// Other arguments than the live claim's: if they are a fingerprint
		// that ran under this key before (the key changed hands since),
		// the answer names that operation, as once the key is free again.
		readCtx, cancelRead := context.WithTimeout(ctx, g.timeout)
		prior, err := g.history(readCtx, g.store, params)
		cancelRead()
		if err != nil {
			return nil, err
		}
		if prior != nil {
			return g.refuseExpired(ctx, params, start, prior.Claim, auditArgs)
		}
		res.Outcome = vocab.OutcomeConflict
		res.Conflict = g.conflict(current, in, policy)
	} else {
		if params.Wait > 0 && !current.Status.Terminal() && current.Status != vocab.StatusAwaitingApproval {
			var err error
			if res.Claim, err = g.await(ctx, current, params.Wait); err != nil {
				return nil, err
			}
		}
		if res.Claim.Status.Terminal() {
			res.Outcome, res.Replayed = vocab.OutcomeReplayed, true
		} else {
			res.Outcome, res.RetryAfter = vocab.OutcomeInFlight, DefaultRetryAfter
		}
	}
	reason := ""
	if res.Conflict != nil {
		reason = "differs in " + strings.Join(res.Conflict.Fields, ", ")
	}
	auditCtx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	ev := callAudit(ctx, params, auditArgs, start, vocab.Decision(res.Outcome), reason)
	ev.OperationID, ev.JobID, ev.Result = res.Claim.OperationID, res.Claim.JobID, resultSummary(res.Claim)
	if err := g.audits.write(auditCtx, ev); err != nil {
		return nil, err
	}
	return res, nil
}

// callAudit is the audit row of a call: who called, with which key and
// arguments, when, in which trace; callers add the operation and the
// outcome.
func callAudit(ctx context.Context, params *ClaimParams, auditArgs json.RawMessage, start time.Time, d vocab.Decision, reason string) *AuditInsertParams {
	in := params.Intent
	return &AuditInsertParams{
		TenantID:        params.Actor.TenantID,
		UserID:          params.Actor.UserID,
		TokenID:         params.Actor.TokenID,
		RequestID:       params.RequestID,
		ClientRequestID: params.ClientRequestID,
		Tool:            in.Tool,
		IdempotencyKey:  in.Key,
		Decision:        d,
		Reason:          reason,
		ArgsHash:        in.ArgsHash,
		Args:            auditArgs,
		Duration:        time.Since(start),
		TraceID:         telemetry.TraceID(ctx),
	}
}

// refuseExpired answers the same key and arguments as prior, an intent
// whose replay window ended: idempotency_key_expired naming the operation
// and its outcome, one denied audit row, nothing run.
func (g *Gate) refuseExpired(ctx context.Context, params *ClaimParams, start time.Time, prior *Claim, auditArgs json.RawMessage) (*ClaimResult, error) {
	in := params.Intent
	msg := fmt.Sprintf("idempotency_key %q was used with these arguments by operation %s, which ended %s",
		in.Key, prior.OperationID, prior.Status)
	if prior.Error != nil && prior.Error.Code != "" {
		msg += " (" + string(prior.Error.Code) + ")"
	}
	msg += "; its replay window is over and it is not run again: use a new key for a new intent"
	res := &ClaimResult{
		Outcome: vocab.OutcomeExpired,
		Expired: &vocab.Error{Code: vocab.CodeKeyExpired, Message: msg, Field: "idempotency_key"},
		Claim: &Claim{OperationID: prior.OperationID, TenantID: params.Actor.TenantID, Tool: in.Tool, IdempotencyKey: in.Key,
			ArgsHash: in.ArgsHash, Status: prior.Status, Error: prior.Error},
	}
	auditCtx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	ev := callAudit(ctx, params, auditArgs, start, vocab.DecisionDenied,
		string(vocab.CodeKeyExpired)+": same arguments as operation "+prior.OperationID)
	ev.OperationID = prior.OperationID
	if err := g.audits.write(auditCtx, ev); err != nil {
		return nil, err
	}
	return res, nil
}

// claimOnce runs one claiming transaction. It returns an accepted result
// (or an expired one: the same intent ran before), or the existing claim to
// answer from, or neither when the loop must run again (the claim vanished
// or a take-over lost a race).
func (g *Gate) claimOnce(ctx context.Context, params *ClaimParams, policy *Policy, auditArgs json.RawMessage, start time.Time) (*ClaimResult, *Claim, error) {
	in := params.Intent
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	tx, err := g.store.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()

	// The job first, then the claim pointing at it with its audit row, in
	// one statement: a claim never exists without its job, and a claim
	// that loses the race rolls its job back with it.
	// A claim that awaits approval has no job until it is approved.
	operationID := newOperationID()
	event, reason, jobID := EventInsert, "", int64(0)
	if params.ApprovalWindow > 0 && g.maxPending > 0 {
		// Only calls that would wait count the waiting ones, serialized
		// per tenant until this transaction ends: concurrent calls cannot
		// both see room for one.
		n, err := tx.ApprovalPendingCount(ctx, &ApprovalPendingCountParams{TenantID: params.Actor.TenantID})
		if err != nil {
			return nil, nil, err
		}
		if n >= g.maxPending {
			_ = tx.Rollback(ctx)
			return nil, nil, g.refusePending(ctx, params, auditArgs, start, n)
		}
	}
	if params.ApprovalWindow > 0 {
		event, reason = EventAwait, fmt.Sprintf("awaiting approval for up to %s", params.ApprovalWindow)
	} else {
		var err error
		jobID, err = g.enqueuer.JobInsert(ctx, tx, &Claim{OperationID: operationID, TenantID: params.Actor.TenantID,
			Tool: in.Tool, IdempotencyKey: in.Key})
		if err != nil {
			return nil, nil, fmt.Errorf("gate: insert job: %w", err)
		}
	}
	if in.ConfirmDuplicateOf != "" {
		reason = joinReason(reason, "confirmed as a new intent beside operation "+in.ConfirmDuplicateOf)
	}
	ev := callAudit(ctx, params, auditArgs, start, vocab.DecisionAccepted, reason)
	ev.OperationID, ev.JobID = operationID, jobID
	claim, err := apply(ctx, tx, event, nil, Facts{}, &ClaimInsertParams{
		OperationID: operationID, TenantID: params.Actor.TenantID, Tool: in.Tool, IdempotencyKey: in.Key,
		UserID: params.Actor.UserID, Args: in.Canonical, ArgsHash: in.ArgsHash,
		IntentKey: g.intentKey(params), TTL: policy.TTL, Retention: policy.retention(), JobID: jobID,
		ApprovalWindow: params.ApprovalWindow, ApprovalSummary: params.approvalSummary(), Audit: ev,
		DuplicateWindow: policy.DuplicateWindow, ConfirmDuplicateOf: in.ConfirmDuplicateOf,
	})
	switch {
	case err == nil:
	case errors.Is(err, vocab.ErrAlreadyExists):
		var res *ClaimResult
		var existing *Claim
		claim, res, existing, err = g.takeOverOrAnswer(ctx, tx, params, policy, operationID, jobID)
		if claim == nil {
			return res, existing, err
		}
		ev.Reason = joinReason("took over expired operation "+existing.OperationID, reason)
		event = EventTakeOver
		if params.ApprovalWindow > 0 {
			event = EventAwaitTakeOver
		}
		if err := tx.AuditInsert(ctx, ev); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, err
	}
	if params.ApprovalWindow > 0 {
		if n, ok := g.enqueuer.(ApprovalNoticer); ok {
			if err := n.ApprovalNoticeInsert(ctx, tx, claim); err != nil {
				return nil, nil, fmt.Errorf("gate: insert approval notice: %w", err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	g.observe(event)
	return &ClaimResult{Outcome: vocab.OutcomeAccepted, Claim: claim}, nil, nil
}

// refusePending refuses a call that would wait for approval while its
// tenant has n calls waiting, the cap or more: approvals_pending_limit,
// nothing claimed, one denied audit row.
func (g *Gate) refusePending(ctx context.Context, params *ClaimParams, auditArgs json.RawMessage, start time.Time, n int) error {
	refusal := vocab.Errorf(vocab.CodeApprovalsPendingLimit, "",
		"%d calls of this tenant already await a person's approval, the most allowed (%d); this call was not claimed: "+
			"retry with the same idempotency_key once approvers have decided some", n, g.maxPending)
	auditCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	ev := callAudit(ctx, params, auditArgs, start, vocab.DecisionDenied,
		fmt.Sprintf("%s: %d awaiting approval, the most allowed is %d", vocab.CodeApprovalsPendingLimit, n, g.maxPending))
	if err := g.audits.write(auditCtx, ev); err != nil {
		return err
	}
	return refusal
}

// takeOverOrAnswer handles an insert that found the key taken, in tx: it
// takes an expired claim of another intent over (EventTakeOver), pointing
// it at jobID, and returns
// it with the claim it replaced; otherwise claim is nil and it returns an
// expired result (this very intent ran before), the live claim to answer
// from, or neither (loop).
func (g *Gate) takeOverOrAnswer(ctx context.Context, tx Tx, params *ClaimParams, policy *Policy, operationID string, jobID int64) (claim *Claim, res *ClaimResult, existing *Claim, err error) {
	in := params.Intent
	existing, err = tx.ClaimGetByKey(ctx, &ClaimGetByKeyParams{TenantID: params.Actor.TenantID, Tool: in.Tool, IdempotencyKey: in.Key})
	if errors.Is(err, vocab.ErrNotFound) {
		// No claim: a tombstone of this very intent refused the insert, or
		// the duplicate guard did, or the claim was archived between the
		// insert and the read.
		prior, terr := g.history(ctx, tx, params)
		if prior != nil || terr != nil {
			return nil, prior, nil, terr
		}
		if dup, derr := g.guarded(ctx, tx, params, policy, operationID); dup != nil || derr != nil {
			return nil, dup, nil, derr
		}
		return nil, nil, nil, nil // loop
	}
	switch {
	case err != nil:
		return nil, nil, nil, err
	case !existing.Expired:
		return nil, nil, existing, nil
	case existing.ArgsHash == in.ArgsHash:
		return nil, &ClaimResult{Outcome: vocab.OutcomeExpired, Claim: existing}, nil, nil
	}
	// Another intent's claim ended: before taking the key over, in the
	// same transaction, the key's history must not know this fingerprint
	// (it ran under this key before, however many take-overs ago). Only a
	// claim of this very fingerprint could add it meanwhile, and then the
	// take-over's condition fails.
	if prior, err := g.history(ctx, tx, params); prior != nil || err != nil {
		return nil, prior, nil, err
	}
	// The insert upserted the duplicate guard before it found the key
	// taken: the take-over is this claim only if the guard let it.
	if dup, err := g.guarded(ctx, tx, params, policy, operationID); dup != nil || err != nil {
		return nil, dup, nil, err
	}
	event := EventTakeOver
	if params.ApprovalWindow > 0 {
		event = EventAwaitTakeOver
	}
	claim, err = apply(ctx, tx, event, existing, Facts{}, &ClaimTakeOverParams{
		ID: existing.ID, OperationID: operationID, UserID: params.Actor.UserID,
		Args: in.Canonical, ArgsHash: in.ArgsHash, IntentKey: g.intentKey(params), TTL: policy.TTL,
		Retention: policy.retention(), JobID: jobID, ApprovalWindow: params.ApprovalWindow,
		ApprovalSummary: params.approvalSummary(),
	})
	if errors.Is(err, vocab.ErrStateChanged) || errors.Is(err, vocab.ErrNotFound) {
		return nil, nil, nil, nil // another intent took it over first: loop
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return claim, nil, existing, nil
}

// guarded reads, after an insert of a guarded tool wrote no claim, whether
// its duplicate guard refused it: the guard names the operation the insert
// was to create (operationID) when it let the call through. A refusal is
// a possible_duplicate result naming the guard's operation, as the tenant
// sees it now (or as the guard row knows it, once archived).
func (g *Gate) guarded(ctx context.Context, tx Tx, params *ClaimParams, policy *Policy, operationID string) (*ClaimResult, error) {
	if policy.DuplicateWindow <= 0 {
		return nil, nil
	}
	in := params.Intent
	guard, err := tx.FingerprintGuardGet(ctx, &FingerprintGuardGetParams{TenantID: params.Actor.TenantID, Tool: in.Tool, ArgsHash: in.ArgsHash})
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case guard.OperationID == operationID:
		return nil, nil
	}
	earlier, err := tx.ClaimGetByOperation(ctx, &ClaimGetByOperationParams{TenantID: params.Actor.TenantID, OperationID: guard.OperationID})
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		// Archived meanwhile: what the key's history knows of it.
		earlier = &Claim{OperationID: guard.OperationID, TenantID: params.Actor.TenantID, Tool: in.Tool,
			IdempotencyKey: guard.IdempotencyKey, ArgsHash: in.ArgsHash}
		ts, terr := tx.TombstoneGetByKey(ctx, &TombstoneGetByKeyParams{TenantID: params.Actor.TenantID, Tool: in.Tool,
			IdempotencyKey: guard.IdempotencyKey, ArgsHash: in.ArgsHash})
		switch {
		case terr == nil && ts.OperationID == guard.OperationID:
			earlier = ts.claim()
		case terr != nil && !errors.Is(terr, vocab.ErrNotFound):
			return nil, terr
		}
	case err != nil:
		return nil, err
	}
	return &ClaimResult{Outcome: vocab.OutcomeDuplicate, Claim: earlier, Duplicate: duplicateError(earlier, policy)}, nil
}

// duplicateError is the possible_duplicate refusal naming earlier.
func duplicateError(earlier *Claim, policy *Policy) *vocab.Error {
	when := ""
	if !earlier.CreatedAt.IsZero() {
		when = " at " + earlier.CreatedAt.UTC().Format(time.RFC3339)
	}
	return vocab.Errorf(vocab.CodePossibleDuplicate, ConfirmField,
		"these arguments were claimed%s by operation %s under idempotency_key %q (status %s) less than %s ago or are still in progress, "+
			"so this call may be a retry with a new key: nothing was claimed. To retry the same intent, use idempotency_key %q. "+
			"Only if the person confirms that this is a new, separate %s, call again with %s set to %q.",
		when, earlier.OperationID, earlier.IdempotencyKey, earlier.Status, policy.DuplicateWindow, earlier.IdempotencyKey,
		policy.Tool, ConfirmField, earlier.OperationID)
}

// refuseDuplicate answers a guarded call refused as a possible duplicate:
// the refusal naming the earlier operation, one denied audit row, nothing
// claimed.
func (g *Gate) refuseDuplicate(ctx context.Context, params *ClaimParams, policy *Policy, start time.Time, dup *ClaimResult, auditArgs json.RawMessage) (*ClaimResult, error) {
	auditCtx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	reason := fmt.Sprintf("%s: same arguments as operation %s (idempotency_key %q) within %s",
		vocab.CodePossibleDuplicate, dup.Claim.OperationID, dup.Claim.IdempotencyKey, policy.DuplicateWindow)
	if c := params.Intent.ConfirmDuplicateOf; c != "" {
		reason += "; the call confirmed operation " + c + ", not this one"
	}
	ev := callAudit(ctx, params, auditArgs, start, vocab.DecisionDenied, reason)
	ev.OperationID = dup.Claim.OperationID
	if err := g.audits.write(auditCtx, ev); err != nil {
		return nil, err
	}
	return dup, nil
}

// joinReason joins audit reasons with "; ", leaving out empty ones.
func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// intentKey is the intent key of the call's (tenant, tool, key,
// fingerprint), "" without a secret.
func (g *Gate) intentKey(params *ClaimParams) string {
	in := params.Intent
	return g.intents.Key(params.Actor.TenantID, in.Tool, in.Key, in.ArgsHash)
}

// history looks the call's fingerprint up in its key's history: an
// expired result naming the operation that ran it, or nil when the key
// never ran it within the retention.
func (g *Gate) history(ctx context.Context, x Executor, params *ClaimParams) (*ClaimResult, error) {
	in := params.Intent
	ts, err := x.TombstoneGetByKey(ctx, &TombstoneGetByKeyParams{TenantID: params.Actor.TenantID, Tool: in.Tool,
		IdempotencyKey: in.Key, ArgsHash: in.ArgsHash})
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &ClaimResult{Outcome: vocab.OutcomeExpired, Claim: ts.claim()}, nil
}

// conflict builds the conflict error naming the fields that differ.
func (g *Gate) conflict(existing *Claim, in *Intent, policy *Policy) *vocab.Error {
	fields := []string{}
	if stored, err := decodeStored(existing.Args); err == nil {
		fields = DiffFields(stored, in.Args, policy.VolatileFields)
	} else {
		g.logger.Error("gate: stored arguments do not decode", "operation_id", existing.OperationID, "error", err)
	}
	msg := fmt.Sprintf("idempotency_key %q was first used with other arguments", in.Key)
	if len(fields) > 0 {
		msg += " (differs in " + strings.Join(fields, ", ") + ")"
	}
	return &vocab.Error{
		Code:    vocab.CodeKeyReuseDifferentArgs,
		Field:   "idempotency_key",
		Message: msg,
		Fields:  fields,
	}
}

// Await waits up to d for claim to turn terminal (woken by the Waiter)
// and returns it as last read: terminal, or still in flight when d
// ended or ctx was cancelled.
func (g *Gate) Await(ctx context.Context, claim *Claim, d time.Duration) (*Claim, error) {
	return g.await(ctx, claim, d)
}

// await waits up to d for claim to turn terminal and returns it as last
// read. The caller has just read or written claim; it is read again only
// when the Waiter says it is terminal.
func (g *Gate) await(ctx context.Context, claim *Claim, d time.Duration) (*Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	notify, unsubscribe := g.waiter.Subscribe(claim.ID)
	defer unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return claim, nil
		case <-notify:
		}
		readCtx, cancelRead := context.WithTimeout(ctx, g.timeout)
		c, err := g.store.ClaimGetByID(readCtx, &ClaimGetByIDParams{ID: claim.ID})
		cancelRead()
		if ctx.Err() != nil {
			return claim, nil
		}
		if errors.Is(err, vocab.ErrNotFound) || errors.Is(err, vocab.ErrUnavailable) {
			// Pruned, or the database went away after the claim committed:
			// answer with the handle as last read.
			return claim, nil
		}
		if err != nil {
			return nil, err
		}
		if claim = c; claim.Status.Terminal() {
			return claim, nil
		}
	}
}

// newOperationID mints an operation id: a UUID of version 7, whose first
// bits are the time, so that new claims' entries land together at the end
// of the operation id index rather than on random pages of it (the index's
// pages stay in memory as the table grows). The time it shows is the
// claim's created_at, which the operation already shows its caller.
func newOperationID() string {
	id, err := uuid.NewV7()
	if err != nil { // the system's random source failed
		return uuid.NewString()
	}
	return id.String()
}

// resultSummary is what an audit row keeps of a claim's outcome: its status
// and error code, never the result body.
func resultSummary(c *Claim) json.RawMessage {
	summary := map[string]any{"status": c.Status}
	if c.Error != nil {
		summary["error_code"] = c.Error.Code
	}
	b, _ := json.Marshal(summary)
	return b
}

// decodeStored decodes arguments the gate stored itself: already validated
// and canonical, so without DecodeArgs's limits (canonical numbers can be
// longer than the client's spelling of them).
func decodeStored(raw json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
