// Package tool declares idemgate's tools. One typed declaration defines a
// tool completely: its name, scope and gate policy, its arguments and result
// as Go structs, and its effect. The MCP tool list (with inputSchema and
// outputSchema), the REST twin, River's job kinds and workers, metric
// labels, the scopes a token may hold and operator re-drive all derive from
// a Registry of declarations, so a team adds its own mutation in one file
// and one registration line.
//
// A mutation's effect is one of two kinds:
//
//   - In-transaction ([Mutation.InTx]): it writes only to idemgate's own
//     database (a ledger, seats, the team's own tables) and runs inside the
//     transaction that checks the claim's lease, stores the result, writes
//     the audit row and completes the River job. Nothing outside that
//     transaction can happen, so nothing can happen twice: a worker killed
//     mid-way rolls everything back and the next one starts afresh.
//   - External ([Mutation.Call]): Stripe, SMTP, any HTTP API. The lease is
//     committed first; the effect gets the claim's downstream key
//     ([Op.DownstreamKey]) to pass as the provider's idempotency key and a
//     deadline inside the lease; its result (and [Mutation.Record]'s rows)
//     are written in the completing transaction. A worker killed after the
//     effect and before the commit leaves a lease that expires; the effect
//     runs again with the same downstream key, and the provider deduplicates.
//
// Arguments are decoded strictly before anything else: duplicate members,
// unknown fields and inexact integers are refused with a code and the
// field's name, and the fingerprint is the RFC 8785 canonical JSON of the
// arguments without the idempotency key and the policy's volatile fields.
package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/toolspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// namePattern is what tool names look like: MCP's recommended characters.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// scopePattern is what scopes look like, such as "billing:refund".
var scopePattern = regexp.MustCompile(`^[a-z][a-z0-9_.-]*:[a-z][a-z0-9_.-]*$`)

// Policy is a mutation's gate policy. Zero fields take the defaults.
type Policy struct {
	// TTL is how long a finished operation keeps answering replays.
	// Default DefaultTTL (24h); at least a minute, at most 30 days.
	TTL time.Duration
	// VolatileFields are arguments left out of the fingerprint: a retry
	// that changes only them is not a conflict (a free-text reason).
	VolatileFields []string
	// AuditFields are the arguments copied into audit rows. Default none.
	AuditFields []string
	// ResultFields are the result members stored and replayed. Default:
	// every member of the result type.
	ResultFields []string
	// Retention is how long after the TTL the intent is remembered: the
	// same key with the same arguments answers idempotency_key_expired
	// naming the original operation and is never run again. Default
	// 30 days; negative keeps nothing.
	Retention time.Duration
	// Lease overrides the in-flight lease (IDEMGATE_INFLIGHT_TIMEOUT) of
	// an external effect. An external effect's deadline is ¾ of it.
	Lease time.Duration
	// ReclaimBudget is how many leases the reaper lets an operation take
	// before it fails with outcome_unknown. Default 5.
	ReclaimBudget int
	// FailUnknownOutcome fails an expired lease with outcome_unknown at
	// once instead of running the effect again: for a downstream that
	// cannot deduplicate (SMTP) when a human should decide.
	FailUnknownOutcome bool
	// ApprovalWindow is how long a call that needs approval (Mutation.
	// Approval) waits for a decision before it fails approval_expired.
	// Default the smaller of DefaultApprovalWindow and TTL; at most TTL.
	ApprovalWindow time.Duration
	// DuplicateWindow guards the tool against agents that re-mint keys:
	// a call with the same fingerprint as an operation of the tenant
	// claimed under another key less than DuplicateWindow ago, or still
	// waiting or running, is refused with possible_duplicate naming it,
	// and runs only when it confirms a new intent beside that operation
	// (the argument confirm_duplicate_of, or an elicitation a person
	// answers). Zero: off. At most 24h.
	DuplicateWindow time.Duration
}

// DefaultApprovalWindow is a Policy's default ApprovalWindow.
const DefaultApprovalWindow = 24 * time.Hour

// DefaultTTL is a Policy's default TTL.
const DefaultTTL = 24 * time.Hour

// Op is one operation of a mutation, as its effect sees it.
type Op[A any] struct {
	// Args are the validated arguments, decoded from the claim.
	Args A
	// OperationID names the intent: audit rows, jobs and provider metadata
	// carry it.
	OperationID string
	// TenantID is the caller's tenant. Effects must scope every read and
	// write to it.
	TenantID string
	// Tool and IdempotencyKey are the claim's identity.
	Tool           string
	IdempotencyKey string
	// DownstreamKey is the key to give the provider (Stripe's
	// Idempotency-Key, a mail's Message-ID): stable across retries and
	// reclaims of one intent, never the client's raw key.
	DownstreamKey string
	// Attempt counts the leases taken so far, this one included.
	Attempt int
	// FirstCalledAt is when the current generation's first lease was
	// taken, for providers whose idempotency window is limited.
	FirstCalledAt *time.Time
}

// Mutation declares a mutating tool with arguments A and result R. Set
// exactly one of InTx and Call.
type Mutation[A, R any] struct {
	// Name is the MCP tool name and the REST route (/v1/tools/{name}):
	// lowercase letters, digits and underscores.
	Name string
	// Title and Description are shown to agents.
	Title       string
	Description string
	// Scope is the token scope the call needs, such as "coupons:issue".
	Scope string
	// Policy is the tool's gate policy.
	Policy Policy
	// Provider labels the downstream in metrics ("stripe", "smtp").
	// Default "database" for InTx, "external" for Call.
	Provider string
	// InTx is an in-transaction effect: it runs inside the completing
	// transaction and writes only through tx.
	InTx func(ctx context.Context, tx Tx, op *Op[A]) (*R, error)
	// Call is an external effect: it runs outside any transaction under a
	// deadline inside the lease, and must pass op.DownstreamKey to the
	// provider as its idempotency key.
	Call func(ctx context.Context, op *Op[A]) (*R, error)
	// Record, optional with Call, writes the external effect's rows in the
	// completing transaction, after the claim's fenced update succeeded.
	Record func(ctx context.Context, tx Tx, op *Op[A], result *R) error
	// Check, optional, validates arguments beyond their schema before the
	// claim (cross-field rules). Return an error from Invalid.
	Check func(args *A) error
	// Approval, optional, says whether a call needs a person's approval
	// before its effect runs (a refund over the tenant's threshold). It
	// runs before the claim, with a read-only tx on the service's database
	// (the tenant's settings) and the caller. Such a call is claimed and
	// waits, with no job, until an approver of the tenant who is not the
	// caller approves its exact arguments (or denies it, or
	// Policy.ApprovalWindow passes).
	Approval func(ctx context.Context, tx Tx, caller domain.Caller, args *A) (bool, error)
	// Review, optional with Approval, runs on Approval's read-only tx when
	// a call is to wait, before anyone is asked. It returns a one-line
	// summary for the approver with the facts it read (a refund's currency,
	// the order's total and what is already refunded), shown on the
	// approval page and in the notice mail as of the request, at most
	// 500 characters (a longer one is cut). Or it refuses a call that cannot succeed with
	// the error its effect would give (NothingHappened, Invalid, NotFound):
	// the caller gets that code at once and nothing waits. Share the check
	// with the effect so the two cannot drift.
	Review func(ctx context.Context, tx Tx, caller domain.Caller, args *A) (summary string, err error)
}

// maxSummary bounds a Review's summary, in characters: a longer one is cut.
const maxSummary = 500

// Read declares a read tool: a scope, arguments A, a result R, no key.
type Read[A, R any] struct {
	Name        string
	Title       string
	Description string
	Scope       string
	// Handle answers the call. tx is a read-only transaction on the
	// service's own database (its pool; on SQLite its one connection),
	// begun when Handle first uses it and rolled back after: a write
	// through it fails. Filter by caller.TenantID. Return ErrNotFound (or
	// an error from NotFound) when the thing asked for does not exist for
	// the caller.
	Handle func(ctx context.Context, tx Tx, caller domain.Caller, args *A) (*R, error)
}

// Tool is a declaration: a *Mutation or a *Read. Add it to a Registry.
type Tool interface {
	spec() (*toolspec.Spec, error)
}

func (m *Mutation[A, R]) spec() (*toolspec.Spec, error) {
	if err := checkNames(m.Name, m.Title, m.Description, m.Scope); err != nil {
		return nil, err
	}
	switch {
	case m.InTx == nil && m.Call == nil:
		return nil, fmt.Errorf("tool %s: set InTx (an in-transaction effect) or Call (an external one)", m.Name)
	case m.InTx != nil && m.Call != nil:
		return nil, fmt.Errorf("tool %s: set only one of InTx and Call", m.Name)
	case m.InTx != nil && m.Record != nil:
		return nil, fmt.Errorf("tool %s: Record goes with Call; an InTx effect writes its rows itself", m.Name)
	}
	in, err := inputSchema[A](true, m.Policy.DuplicateWindow > 0)
	if err != nil {
		return nil, fmt.Errorf("tool %s: arguments: %w", m.Name, err)
	}
	out, resultFields, err := outputSchema[R](true)
	if err != nil {
		return nil, fmt.Errorf("tool %s: result: %w", m.Name, err)
	}
	p := m.Policy
	if p.TTL == 0 {
		p.TTL = DefaultTTL
	}
	if p.ResultFields == nil {
		p.ResultFields = resultFields
	}
	switch {
	case p.ApprovalWindow < 0 || p.ApprovalWindow > p.TTL:
		return nil, fmt.Errorf("tool %s: Policy.ApprovalWindow %v must be between 0 (the default) and the TTL %v", m.Name, p.ApprovalWindow, p.TTL)
	case p.ApprovalWindow != 0 && m.Approval == nil:
		return nil, fmt.Errorf("tool %s: Policy.ApprovalWindow is set but Approval is not: no call would wait", m.Name)
	case p.ApprovalWindow == 0:
		p.ApprovalWindow = min(DefaultApprovalWindow, p.TTL)
	}
	for _, f := range append(append([]string{}, p.VolatileFields...), p.AuditFields...) {
		if _, ok := in.props[f]; !ok {
			return nil, fmt.Errorf("tool %s: Policy names %q, which is not an argument", m.Name, f)
		}
	}
	policy := &core.Policy{
		Tool: m.Name, TTL: p.TTL, VolatileFields: p.VolatileFields, AuditArgFields: p.AuditFields,
		ResultFields: p.ResultFields, InflightTimeout: p.Lease, ReclaimBudget: p.ReclaimBudget, Retention: p.Retention,
		FailUnknownOutcome: p.FailUnknownOutcome, DuplicateWindow: p.DuplicateWindow,
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	provider := m.Provider
	if provider == "" {
		provider = "database"
		if m.Call != nil {
			provider = "external"
		}
	}
	spec := &toolspec.Spec{
		Name: m.Name, Title: m.Title, Description: m.Description, Scope: m.Scope,
		Mutating: true, InTx: m.InTx != nil, Provider: provider,
		InputSchema: in.published, OutputSchema: out, Policy: policy,
		Effect: &effect[A, R]{m: m},
	}
	if m.Approval != nil {
		spec.ApprovalWindow = p.ApprovalWindow
		spec.NeedsApproval = func(ctx context.Context, tx toolspec.Tx, caller toolspec.Caller, raw json.RawMessage) (bool, error) {
			var a A
			if err := json.Unmarshal(raw, &a); err != nil {
				return false, vocab.Errorf(vocab.CodeInvalidArgument, "arguments", "%v", err)
			}
			return m.Approval(ctx, tx, caller, &a)
		}
	}
	if m.Review != nil {
		if m.Approval == nil {
			return nil, fmt.Errorf("tool %s: Review is set but Approval is not: no call would wait to be reviewed", m.Name)
		}
		spec.Review = func(ctx context.Context, tx toolspec.Tx, caller toolspec.Caller, raw json.RawMessage) (string, error) {
			var a A
			if err := json.Unmarshal(raw, &a); err != nil {
				return "", vocab.Errorf(vocab.CodeInvalidArgument, "arguments", "%v", err)
			}
			summary, err := m.Review(ctx, tx, caller, &a)
			if err != nil {
				return "", err
			}
			return oneLine(summary, maxSummary), nil
		}
	}
	spec.Check = func(args map[string]any) error {
		if err := in.validate(args); err != nil {
			return err
		}
		if m.Check == nil {
			return nil
		}
		raw, err := json.Marshal(args)
		if err != nil {
			return vocab.Errorf(vocab.CodeInvalidArgument, "arguments", "%v", err)
		}
		var a A
		if err := json.Unmarshal(raw, &a); err != nil {
			return vocab.Errorf(vocab.CodeInvalidArgument, "arguments", "%v", err)
		}
		return m.Check(&a)
	}
	return spec, nil
}

func (r *Read[A, R]) spec() (*toolspec.Spec, error) {
	if err := checkNames(r.Name, r.Title, r.Description, r.Scope); err != nil {
		return nil, err
	}
	if r.Handle == nil {
		return nil, fmt.Errorf("tool %s: Handle is required", r.Name)
	}
	in, err := inputSchema[A](false, false)
	if err != nil {
		return nil, fmt.Errorf("tool %s: arguments: %w", r.Name, err)
	}
	out, _, err := outputSchema[R](false)
	if err != nil {
		return nil, fmt.Errorf("tool %s: result: %w", r.Name, err)
	}
	return &toolspec.Spec{
		Name: r.Name, Title: r.Title, Description: r.Description, Scope: r.Scope,
		InputSchema: in.published, OutputSchema: out, Check: in.validate,
		Serve: func(ctx context.Context, tx toolspec.Tx, caller toolspec.Caller, raw json.RawMessage) (any, error) {
			var a A
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, vocab.Errorf(vocab.CodeInvalidArgument, "arguments", "%v", err)
			}
			res, err := r.Handle(ctx, tx, caller, &a)
			if err != nil {
				return nil, err
			}
			return res, nil
		},
	}, nil
}

// oneLine is s as printable text on one line of at most n characters:
// invalid UTF-8 replaced, control characters (line breaks included) made
// spaces, the rest cut with an ellipsis.
func oneLine(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func checkNames(name, title, description, scope string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("tool: Name %q must match %s", name, namePattern)
	}
	if title == "" || description == "" {
		return fmt.Errorf("tool %s: Title and Description are required (agents read them)", name)
	}
	if !scopePattern.MatchString(scope) {
		return fmt.Errorf("tool %s: Scope %q must look like resource:action", name, scope)
	}
	return nil
}

// effect erases a Mutation's types for the worker.
type effect[A, R any] struct{ m *Mutation[A, R] }

func (e *effect[A, R]) op(c *core.Claim) (*Op[A], error) {
	op := &Op[A]{
		OperationID: c.OperationID, TenantID: c.TenantID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey,
		DownstreamKey: c.DownstreamKey, Attempt: c.Attempts, FirstCalledAt: c.FirstCalledAt,
	}
	if err := json.Unmarshal(c.Args, &op.Args); err != nil {
		return nil, NothingHappened(vocab.CodeInvalidArgument, "stored arguments do not decode: %v", err)
	}
	return op, nil
}

func (e *effect[A, R]) Apply(ctx context.Context, tx toolspec.Tx, c *core.Claim) (json.RawMessage, error) {
	if e.m.InTx == nil {
		return nil, fmt.Errorf("tool %s: not an in-transaction effect", e.m.Name)
	}
	op, err := e.op(c)
	if err != nil {
		return nil, err
	}
	res, err := e.m.InTx(ctx, tx, op)
	if err != nil {
		return nil, err
	}
	return marshalResult(e.m.Name, res)
}

func (e *effect[A, R]) Call(ctx context.Context, c *core.Claim) (json.RawMessage, error) {
	if e.m.Call == nil {
		return nil, fmt.Errorf("tool %s: not an external effect", e.m.Name)
	}
	op, err := e.op(c)
	if err != nil {
		return nil, err
	}
	res, err := e.m.Call(ctx, op)
	if err != nil {
		return nil, err
	}
	return marshalResult(e.m.Name, res)
}

func (e *effect[A, R]) Record(ctx context.Context, tx toolspec.Tx, c *core.Claim, result json.RawMessage) error {
	if e.m.Record == nil {
		return nil
	}
	op, err := e.op(c)
	if err != nil {
		return err
	}
	var r R
	if err := json.Unmarshal(result, &r); err != nil {
		return fmt.Errorf("tool %s: result does not decode: %w", e.m.Name, err)
	}
	return e.m.Record(ctx, tx, op, &r)
}

func marshalResult[R any](name string, res *R) (json.RawMessage, error) {
	if res == nil {
		return nil, fmt.Errorf("tool %s: the effect returned no result and no error", name)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("tool %s: result: %w", name, err)
	}
	return b, nil
}

// ErrNotFound is what a read tool's Handle returns for a missing thing (the
// caller gets not_found), and what Row.Scan returns when there is no row.
var ErrNotFound = vocab.ErrNotFound
