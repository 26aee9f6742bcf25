package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy/tokenspec"
	"github.com/idemgate/idemgate/internal/vocab"
)

// approvalCmd is `idemctl approval`: list, approve and deny operations
// awaiting a person's approval.
type approvalCmd struct {
	List    approvalListCmd    `cmd:"" usage:"--tenant T [--limit N]" help:"List a tenant's operations awaiting approval as JSON lines"`
	Approve approvalApproveCmd `cmd:"" usage:"--tenant T --id OPERATION_ID --as USER --args-hash H [--reason R]" help:"Approve an operation awaiting approval, as a person of its tenant"`
	Deny    approvalDenyCmd    `cmd:"" usage:"--tenant T --id OPERATION_ID --as USER --args-hash H [--reason R]" help:"Deny an operation awaiting approval, as a person of its tenant"`
}

// approvalListCmd is `idemctl approval list`: a tenant's operations
// awaiting approval, oldest first, as JSON lines.
type approvalListCmd struct {
	Tenant string `help:"tenant (required)"`
	Limit  int    `default:"${default_list_limit}" placeholder:"N" help:"at most this many operations, the oldest (1 to ${max_list_limit})"`
}

func (*approvalListCmd) Help() string {
	return "List a tenant's operations awaiting a person's approval, oldest first, one JSON object per line:\n" +
		"operation_id, tool, idempotency_key, args, args_hash (the fingerprint a decision names), requested_by,\n" +
		"requested_at and approval_expires_at. One whose window has ended is listed until the reaper expires it;\n" +
		"deciding on it is refused."
}

func (c *approvalListCmd) Run(ctx context.Context, a *app) error {
	if c.Tenant == "" {
		return &usageError{errors.New("--tenant is required")}
	}
	if err := validTenant(c.Tenant); err != nil {
		return err
	}
	if c.Limit < 1 || c.Limit > maxListLimit {
		return &usageError{fmt.Errorf("--limit: must be within 1 and %d, got %d", maxListLimit, c.Limit)}
	}
	db, err := a.openExistingDatabase(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	claims, err := listAwaiting(ctx, db.data(), c.Tenant, c.Limit, maxListLimit)
	if err != nil {
		return fmt.Errorf("approval list: %w", err)
	}
	enc := json.NewEncoder(a.stdout)
	for _, c := range claims {
		if err := enc.Encode(viewApproval(c)); err != nil {
			return err
		}
	}
	return nil
}

// listAwaiting returns the oldest limit claims of tenant awaiting
// approval, oldest first. The store pages a tenant's claims newest first
// only, so it reads every waiting claim, page claims at a time, and keeps
// the last limit (waiting claims live no longer than their window).
func listAwaiting(ctx context.Context, s core.Executor, tenant string, limit, page int) ([]*core.Claim, error) {
	var (
		oldest []*core.Claim
		after  *core.ClaimCursor
	)
	for {
		claims, err := s.ClaimListNewest(ctx, &core.ClaimListNewestParams{TenantID: tenant, Status: vocab.StatusAwaitingApproval,
			After: after, Limit: page})
		if err != nil {
			return nil, err
		}
		oldest = append(oldest, claims...)
		if len(oldest) > limit {
			oldest = slices.Clone(oldest[len(oldest)-limit:])
		}
		if len(claims) < page {
			break
		}
		last := claims[len(claims)-1]
		after = &core.ClaimCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	slices.Reverse(oldest)
	return oldest, nil
}

// approvalView is an operation awaiting approval as approval list prints
// it: what an approver decides on.
type approvalView struct {
	OperationID       string          `json:"operation_id"`
	Tool              string          `json:"tool"`
	IdempotencyKey    string          `json:"idempotency_key"`
	Args              json.RawMessage `json:"args"`
	ArgsHash          string          `json:"args_hash"`
	RequestedBy       string          `json:"requested_by"`
	RequestedAt       time.Time       `json:"requested_at"`
	ApprovalExpiresAt *time.Time      `json:"approval_expires_at"`
}

func viewApproval(c *core.Claim) approvalView {
	return approvalView{OperationID: c.OperationID, Tool: c.Tool, IdempotencyKey: c.IdempotencyKey, Args: c.Args,
		ArgsHash: c.ArgsHash, RequestedBy: c.UserID, RequestedAt: c.CreatedAt, ApprovalExpiresAt: c.ApprovalExpiresAt}
}

// decideFlags are the flags of approval approve and approval deny.
type decideFlags struct {
	Tenant   string `help:"tenant (required)"`
	ID       string `name:"id" placeholder:"OPERATION_ID" help:"the operation, as approval list prints it (required)"`
	As       string `placeholder:"USER" help:"the person deciding: a user of the tenant with a live token of scope ${scope_approvals_decide}, not the requester (required)"`
	ArgsHash string `placeholder:"H" help:"the fingerprint of the arguments decided on, as approval list prints it (required)"`
	Reason   string `help:"a note for the audit trail (at most ${max_reason_len} characters)"`
}

// decideHelp is the help of approval approve and deny; what says what the
// decision does.
func decideHelp(what string) string {
	return what + "\n" +
		"\n" +
		"--as names the person deciding. They must hold a live (unexpired, unrevoked) token of the tenant with\n" +
		"scope " + tokenspec.ScopeApprovalsDecide + ", and may not be the operation's requester (four eyes); --args-hash must be the\n" +
		"operation's fingerprint, as approval list prints it. The audit row names them, with --reason.\n" +
		"\n" +
		"Prints the decided operation as one JSON object (the fields of op list). A refused decision (--as may\n" +
		"not decide, another fingerprint, not awaiting approval, the window ended) exits 3 and changes nothing\n" +
		"but a denied audit row; an unknown operation exits 1."
}

// approvalApproveCmd is `idemctl approval approve`: core.Gate.Approve.
type approvalApproveCmd struct{ decideFlags }

func (*approvalApproveCmd) Help() string {
	return decideHelp("Approve an operation awaiting approval: its job is enqueued in the transaction that records the\n" +
		"decision, and it goes to queued.")
}

func (c *approvalApproveCmd) Run(ctx context.Context, a *app) error {
	return c.decide(ctx, a, core.EventApprove)
}

// approvalDenyCmd is `idemctl approval deny`: core.Gate.Deny.
type approvalDenyCmd struct{ decideFlags }

func (*approvalDenyCmd) Help() string {
	return decideHelp("Deny an operation awaiting approval: it fails with code approval_denied, final (never re-driven).")
}

func (c *approvalDenyCmd) Run(ctx context.Context, a *app) error {
	return c.decide(ctx, a, core.EventDeny)
}

// check checks the flags before the database is opened.
func (f *decideFlags) check() error {
	for _, fl := range []struct{ name, v string }{{"--tenant", f.Tenant}, {"--id", f.ID}, {"--as", f.As}, {"--args-hash", f.ArgsHash}} {
		if fl.v == "" {
			return &usageError{fmt.Errorf("%s is required", fl.name)}
		}
	}
	if err := validTenant(f.Tenant); err != nil {
		return err
	}
	if _, err := uuid.Parse(f.ID); err != nil || len(f.ID) != 36 {
		return &usageError{fmt.Errorf("--id: %q is not an operation id (a UUID, as approval list prints it)", f.ID)}
	}
	if err := domain.CheckID(f.As); err != nil {
		return &usageError{fmt.Errorf("--as: %q %v (must be %s)", f.As, err, vocab.IdentityRule)}
	}
	if f.Reason != "" {
		if err := ops.ValidateReason(f.Reason); err != nil {
			return &usageError{fmt.Errorf("--reason: %w", err)}
		}
	}
	return nil
}

// decide runs the decision e (approve or deny) through the gate, once
// --as is known to be a person who may decide, and prints the operation.
func (f *decideFlags) decide(ctx context.Context, a *app, e core.Event) error {
	if err := f.check(); err != nil {
		return err
	}
	db, o, err := a.openOps(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	cmd, requestID := "approval "+string(e), newRequestID()
	c, err := db.data().ClaimGetByOperation(ctx, &core.ClaimGetByOperationParams{TenantID: f.Tenant, OperationID: f.ID})
	if errors.Is(err, vocab.ErrNotFound) {
		return fmt.Errorf("%s: --id: no operation %s in tenant %q", cmd, f.ID, f.Tenant)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if err := f.mayDecide(ctx, db.data(), c, e, requestID); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	p := &core.DecideParams{Approver: vocab.Actor{TenantID: f.Tenant, UserID: f.As}, RequestID: requestID,
		OperationID: f.ID, ArgsHash: f.ArgsHash, Reason: f.Reason}
	decided := o.Gate.Approve
	if e == core.EventDeny {
		decided = o.Gate.Deny
	}
	c, err = decided(ctx, p)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, f.refusal(c, err))
	}
	a.logger.Info(cmd, "operation_id", c.OperationID, "tool", c.Tool, "key", c.IdempotencyKey, "status", c.Status,
		"as", f.As, "request_id", requestID)
	return json.NewEncoder(a.stdout).Encode(ops.ViewOperation(c))
}

// mayDecide refuses (exit 3, with a denied audit row on c) a decision by
// --as when they hold no live token of the tenant with scope
// approvals:decide: idemctl decides only for a person the api would let
// decide.
func (f *decideFlags) mayDecide(ctx context.Context, s data, c *core.Claim, e core.Event, requestID string) error {
	toks, err := s.TokenList(ctx, &store.TokenListParams{TenantID: f.Tenant})
	if err != nil {
		return err
	}
	now := time.Now()
	if slices.ContainsFunc(toks, func(t *store.Token) bool {
		return t.UserID == f.As && t.RevokedAt == nil && (t.ExpiresAt == nil || now.Before(*t.ExpiresAt)) &&
			slices.Contains(t.Scopes, tokenspec.ScopeApprovalsDecide)
	}) {
		return nil
	}
	msg := fmt.Sprintf("%q holds no live token of tenant %q with scope %s", f.As, f.Tenant, tokenspec.ScopeApprovalsDecide)
	refused := &exitError{code: exitRefused, err: errors.New("--as: " + msg)}
	ev := &core.AuditInsertParams{TenantID: c.TenantID, UserID: f.As, RequestID: requestID, Tool: c.Tool,
		IdempotencyKey: c.IdempotencyKey, OperationID: c.OperationID, JobID: c.JobID, Decision: vocab.DecisionDenied,
		Reason: fmt.Sprintf("%s refused: idemctl: %s", e, msg), ArgsHash: c.ArgsHash}
	if err := s.AuditInsert(ctx, ev); err != nil {
		return errors.Join(refused, fmt.Errorf("write the denied audit row: %w", err))
	}
	return refused
}

// refusal says a refused decision in terms of the flags, with exit code 3;
// an unknown operation exits 1.
func (f *decideFlags) refusal(c *core.Claim, err error) error {
	var msg string
	switch {
	case errors.Is(err, vocab.ErrNotFound):
		return fmt.Errorf("--id: no operation %s in tenant %q", f.ID, f.Tenant)
	case errors.Is(err, core.ErrApprovalFingerprint):
		msg = fmt.Sprintf("--args-hash: %s is not the fingerprint of the operation's arguments: decide on what approval list prints", f.ArgsHash)
	case errors.Is(err, core.ErrApprovalSelf):
		msg = fmt.Sprintf("--as: %q requested the operation; the requester may not approve or deny their own call (four eyes)", f.As)
	case errors.Is(err, core.ErrApprovalExpired):
		msg = fmt.Sprintf("--id: the approval window of operation %s has ended", f.ID)
	case errors.Is(err, core.ErrApprovalNotAwaiting):
		status := vocab.Status("")
		if c != nil {
			status = c.Status
		}
		msg = fmt.Sprintf("--id: operation %s is %s, not awaiting approval (decided already, or never asked)", f.ID, status)
	default:
		return err
	}
	return &exitError{code: exitRefused, err: errors.New(msg)}
}

// newRequestID names one idemctl decision in its audit rows.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "idemctl-" + hex.EncodeToString(b[:])
}
