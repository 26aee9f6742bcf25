// Package ops is what operators use: the views of an operation and its
// audit trail that idemctl prints, the re-drive of failed operations through
// the gate (shared by idemctl and the HTTP route), and the operator routes of
// the api: River UI under /ops/riverui and POST /ops/redrive, behind operator
// authentication (a bearer token with scope ops:admin, or HTTP Basic
// credentials from IDEMGATE_OPS_USER and IDEMGATE_OPS_PASSWORD).
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/vocab"
)

// OperationView is an operation as operators see it: the client-visible
// view plus the gate's own fields.
type OperationView struct {
	vocab.Operation
	TenantID string `json:"tenant_id"`
	UserID   string `json:"user_id"`
	ArgsHash string `json:"args_hash"`
	// Args are the operation's canonical arguments, as fingerprinted.
	Args          json.RawMessage `json:"args"`
	DownstreamKey string          `json:"downstream_key"`
	Epoch         int64           `json:"epoch"`
	// LeaseExpiresAt and LastError are kept whatever the status, for
	// operators (the client view shows them while they matter).
	LeaseExpiresAt *time.Time       `json:"lease_expires_at"`
	LastError      *vocab.ErrorInfo `json:"last_error"`
}

// ViewOperation returns the operator's view of c.
func ViewOperation(c *core.Claim) OperationView {
	return OperationView{
		Operation:      *c.Operation(),
		TenantID:       c.TenantID,
		UserID:         c.UserID,
		ArgsHash:       c.ArgsHash,
		Args:           c.Args,
		DownstreamKey:  c.DownstreamKey,
		Epoch:          c.Epoch,
		LeaseExpiresAt: c.LeaseExpiresAt,
		LastError:      c.LastError,
	}
}

// AuditView is one audit row as operators see it. Args and Result are
// already redacted when written.
type AuditView struct {
	ID          int64           `json:"id"`
	CreatedAt   time.Time       `json:"created_at"`
	Decision    vocab.Decision  `json:"decision"`
	UserID      string          `json:"user_id"`
	TokenID     string          `json:"token_id,omitempty"`
	RequestID   string          `json:"request_id,omitempty"`
	OperationID string          `json:"operation_id,omitempty"`
	JobID       int64           `json:"job_id,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	ArgsHash    string          `json:"args_hash,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	DurationMS  float64         `json:"duration_ms"`
}

// ViewAudit returns the operator's view of e.
func ViewAudit(e *core.AuditEvent) AuditView {
	return AuditView{
		ID:          e.ID,
		CreatedAt:   e.CreatedAt,
		Decision:    e.Decision,
		UserID:      e.UserID,
		TokenID:     e.TokenID,
		RequestID:   e.RequestID,
		OperationID: e.OperationID,
		JobID:       e.JobID,
		Reason:      e.Reason,
		ArgsHash:    e.ArgsHash,
		Args:        e.Args,
		Result:      e.Result,
		DurationMS:  float64(e.Duration.Microseconds()) / 1000,
	}
}

// OperationDetail is an operation with its whole audit trail, oldest first
// (every row of its tenant, tool and key, earlier intents' included), and
// the summary of its approval when it awaited one.
type OperationDetail struct {
	OperationView
	Audit    []AuditView    `json:"audit"`
	Approval *ApprovalTrail `json:"approval,omitempty"`
}

// GetOperation returns the operation of (tenant, tool, key) with its audit
// trail and approval summary, or vocab.ErrNotFound.
func GetOperation(ctx context.Context, s core.Executor, tenantID, tool, key string) (*OperationDetail, error) {
	c, err := s.ClaimGetByKey(ctx, &core.ClaimGetByKeyParams{TenantID: tenantID, Tool: tool, IdempotencyKey: key})
	if err != nil {
		return nil, err
	}
	events, err := s.AuditListByKey(ctx, &core.AuditListByKeyParams{TenantID: tenantID, Tool: tool, IdempotencyKey: key})
	if err != nil {
		return nil, err
	}
	d := &OperationDetail{OperationView: ViewOperation(c), Audit: make([]AuditView, 0, len(events)), Approval: ApprovalTrailOf(c, events)}
	for _, e := range events {
		d.Audit = append(d.Audit, ViewAudit(e))
	}
	return d, nil
}

// Action is what a re-drive did to one operation.
type Action string

// The re-drive actions.
const (
	ActionRedriven     Action = "redriven"
	ActionWouldRedrive Action = "would_redrive"
	ActionRefused      Action = "refused"
)

// RedriveLine reports the re-drive of one operation; idemctl prints one per
// line and POST /ops/redrive answers with one.
type RedriveLine struct {
	OperationID string `json:"operation_id"`
	Tool        string `json:"tool"`
	Key         string `json:"key"`
	Action      Action `json:"action"`
	// Status is the operation's status after the action (before it, for
	// would_redrive and refused).
	Status vocab.Status `json:"status"`
	// NextGeneration is true when the re-drive moves to a new downstream
	// key: the provider answered definitively that nothing happened.
	NextGeneration bool `json:"next_generation"`
	// FreshJob is true when a new job replaces the operation's job: River no
	// longer has it, or its cancellation was requested (a failing worker
	// cancels its own job).
	FreshJob bool `json:"fresh_job"`
	// JobID is the job that runs the operation (will run, for a dry run).
	JobID int64 `json:"job_id,omitempty"`
	// DownstreamKey is the key the next attempt uses; set for redriven.
	DownstreamKey string `json:"downstream_key,omitempty"`
	// Reason is the operator's reason, or why the re-drive was refused.
	Reason string `json:"reason"`
}

// Jobs is what a re-drive needs of River: core.JobControl in the gate's
// transactions, and whether the re-drive would retry a job itself (for a dry
// run's fresh_job). jobs.Control implements it.
type Jobs interface {
	core.JobControl
	JobRetryable(ctx context.Context, jobID int64) (bool, error)
}

// Redriver re-drives failed operations through core.Gate.Redrive. idemctl
// and POST /ops/redrive both use it.
type Redriver struct {
	Gate *core.Gate
	Jobs Jobs
}

// RedriveParams are the parameters of Redriver.Redrive.
type RedriveParams struct {
	TenantID string
	Tool     string
	Key      string
	// Operator and Reason go to the redriven audit row. Required.
	// Operator is the person; Via the channel ("idemctl", ChannelRedrive
	// or ChannelRiverUI and how the operator authenticated).
	Operator string
	Via      string
	Reason   string
	// DryRun reports what would happen and changes nothing.
	DryRun bool
}

// Refused reports whether err is a refused re-drive: the operation
// succeeded, is queued, running or awaiting approval, or was cancelled by
// its owner, denied by an approver or not approved in time (final).
func Refused(err error) bool {
	return errors.Is(err, core.ErrRedriveSucceeded) || errors.Is(err, core.ErrRedriveNotFailed) ||
		errors.Is(err, core.ErrRedriveCancelled) || errors.Is(err, core.ErrRedriveApproval)
}

// Redrive re-drives one failed operation. A refused re-drive returns its
// line (action refused) together with an error for which Refused is true;
// an unknown operation returns vocab.ErrNotFound.
func (r *Redriver) Redrive(ctx context.Context, p *RedriveParams) (*RedriveLine, error) {
	if err := ValidateOperator(p.Operator); err != nil {
		return nil, err
	}
	if err := ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	res, err := r.Gate.Redrive(ctx, &core.RedriveParams{
		TenantID: p.TenantID, Tool: p.Tool, IdempotencyKey: p.Key,
		Operator: p.Operator, Via: p.Via, Reason: p.Reason, DryRun: p.DryRun,
	}, r.Jobs)
	if Refused(err) && res != nil && res.Claim != nil {
		c := res.Claim
		return &RedriveLine{
			OperationID: c.OperationID, Tool: c.Tool, Key: c.IdempotencyKey, Action: ActionRefused,
			Status: c.Status, JobID: c.JobID, Reason: err.Error(),
		}, err
	}
	if err != nil {
		return nil, err
	}
	c := res.Claim
	line := &RedriveLine{
		OperationID: c.OperationID, Tool: c.Tool, Key: c.IdempotencyKey, Action: ActionRedriven,
		Status: c.Status, NextGeneration: res.NextGeneration, FreshJob: res.FreshJob, JobID: c.JobID,
		DownstreamKey: c.DownstreamKey, Reason: p.Reason,
	}
	if p.DryRun {
		line.Action = ActionWouldRedrive
		line.DownstreamKey = ""
		retryable, err := r.Jobs.JobRetryable(ctx, c.JobID)
		if err != nil {
			return nil, fmt.Errorf("ops: look up job %d: %w", c.JobID, err)
		}
		line.FreshJob = !retryable
		if line.FreshJob {
			line.JobID = 0 // a new job would replace it
		}
	}
	return line, nil
}

// RedriveSetParams are the parameters of Redriver.RedriveSet.
type RedriveSetParams struct {
	TenantID string
	// Tool, when set, keeps that tool's operations only.
	Tool string
	// Since keeps operations that failed (were last updated) at or after it.
	// Required: a set re-drive is always bounded in time.
	Since time.Time
	// Limit bounds how many operations one call re-drives, newest first.
	// Default DefaultRedriveLimit, at most MaxRedriveLimit.
	Limit    int
	Operator string
	Via      string
	Reason   string
	DryRun   bool
}

// Limits of a set re-drive.
const (
	DefaultRedriveLimit = 100
	MaxRedriveLimit     = 1000
)

// RedriveSetResult counts what a set re-drive did.
type RedriveSetResult struct {
	Matched  int
	Redriven int
	Refused  int
	// LimitReached is true when as many operations matched as the limit:
	// more may be left (run it again).
	LimitReached bool
}

// RedriveSet re-drives a tenant's failed operations updated since p.Since,
// newest first, and calls emit with each line as it goes. A refused one
// (re-driven or finished by someone else meanwhile) is reported and the
// set goes on; any other error stops it.
func (r *Redriver) RedriveSet(ctx context.Context, p *RedriveSetParams, emit func(*RedriveLine) error) (*RedriveSetResult, error) {
	if err := ValidateOperator(p.Operator); err != nil {
		return nil, err
	}
	if err := ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	if p.Since.IsZero() {
		return nil, errors.New("a set re-drive needs a start time (since)")
	}
	limit := p.Limit
	switch {
	case limit == 0:
		limit = DefaultRedriveLimit
	case limit < 0 || limit > MaxRedriveLimit:
		return nil, fmt.Errorf("limit must be within 1 and %d, got %d", MaxRedriveLimit, limit)
	}
	since := p.Since
	claims, err := r.Gate.Store().ClaimList(ctx, &core.ClaimListParams{
		TenantID: p.TenantID, Tool: p.Tool, Status: vocab.StatusFailed, Since: &since, Limit: limit,
	})
	if err != nil {
		return nil, err
	}
	res := &RedriveSetResult{Matched: len(claims), LimitReached: len(claims) == limit}
	for _, c := range claims {
		line, err := r.Redrive(ctx, &RedriveParams{
			TenantID: c.TenantID, Tool: c.Tool, Key: c.IdempotencyKey,
			Operator: p.Operator, Via: p.Via, Reason: p.Reason, DryRun: p.DryRun,
		})
		switch {
		case Refused(err):
			res.Refused++
		case errors.Is(err, vocab.ErrNotFound):
			// Pruned or taken over meanwhile: nothing to re-drive.
			res.Refused++
			line = &RedriveLine{OperationID: c.OperationID, Tool: c.Tool, Key: c.IdempotencyKey, Action: ActionRefused,
				Status: c.Status, Reason: "the operation no longer exists"}
		case err != nil:
			return res, fmt.Errorf("%s/%s: %w", c.Tool, c.IdempotencyKey, err)
		default:
			res.Redriven++
		}
		if err := emit(line); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Limits on the operator and reason of a re-drive. MaxOperatorLen bounds
// the Basic user and idemctl's operator names; a token's user (an id the
// identity provider issued, domain.CheckID's rule) may be longer.
const (
	MaxOperatorLen = 64
	MaxReasonLen   = 500
)

// ValidateOperator checks the person a re-drive names: an id by
// domain.CheckID's rule (what identity providers issue: 1 to 255 bytes of
// printable UTF-8, no space at either end).
func ValidateOperator(s string) error {
	if s == "" {
		return errors.New("operator is required")
	}
	if err := domain.CheckID(s); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// validOperatorName reports whether s is a name people type for
// themselves (the Basic user, idemctl's default from $USER): 1 to
// MaxOperatorLen characters of [A-Za-z0-9_.:@+-].
func validOperatorName(s string) bool {
	if s == "" || len(s) > MaxOperatorLen {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		switch r {
		case '_', '.', ':', '@', '+', '-':
			ok = true
		}
		if !ok {
			return false
		}
	}
	return true
}

// The channels operators act through, as audit rows name them (with how
// the operator authenticated: Operator.Channel).
const (
	// ChannelIdemctl is idemctl's re-drives.
	ChannelIdemctl = "idemctl"
	// ChannelRedrive is POST /ops/redrive.
	ChannelRedrive = RedrivePath
	// ChannelRiverUI is River UI's Retry under /ops/riverui.
	ChannelRiverUI = "riverui"
)

// ValidateReason checks a re-drive reason: 1 to MaxReasonLen characters,
// printable.
func ValidateReason(s string) error {
	if s == "" {
		return errors.New("reason is required")
	}
	n := 0
	for _, r := range s {
		n++
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return errors.New("reason must be printable text on one line")
		}
	}
	if n > MaxReasonLen {
		return fmt.Errorf("reason is longer than %d characters", MaxReasonLen)
	}
	return nil
}
