package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/vocab"
)

// Why a RedriveSelectionParams selects nothing it can re-drive. Callers
// compare with errors.Is and say it in their own terms (idemctl names its
// flags).
var (
	// ErrSelectionKeyAndSet: a key and a set's status or start time both.
	ErrSelectionKeyAndSet = errors.New("give either a key or a set (status failed since a time), not both")
	// ErrSelectionEmpty: neither a key nor a set.
	ErrSelectionEmpty = errors.New("give a key for one operation, or a set (status failed since a time)")
	// ErrSelectionNotFailed: a set of another status than failed.
	ErrSelectionNotFailed = errors.New("only failed operations are re-driven")
	// ErrSelectionNoSince: a set without a start time.
	ErrSelectionNoSince = errors.New("a set re-drive needs a start time (since)")
	// ErrSelectionLimitWithKey: a limit with a key.
	ErrSelectionLimitWithKey = errors.New("a limit applies to a set re-drive")
)

// ParamError is an invalid parameter of a re-drive: Param names it
// (tenant, tool, operator, reason or limit) and Err says what is wrong.
type ParamError struct {
	Param string
	Err   error
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Err.Error() }
func (e *ParamError) Unwrap() error { return e.Err }

// RedriveSelectionParams are the parameters of Redriver.RedriveSelection:
// one operation by its key, or a set of failed ones since a time.
type RedriveSelectionParams struct {
	TenantID string
	Tool     string
	// Key selects the one operation with this idempotency key.
	Key string
	// Status and Since select a set instead: Status must be
	// domain.StatusFailed, and Since (required) keeps the operations that
	// failed at or after it.
	Status vocab.Status
	Since  time.Time
	// Limit bounds a set, newest first: nil is DefaultRedriveLimit, else 1
	// to MaxRedriveLimit. Only for a set.
	Limit *int
	// Operator and Reason go to the audit rows. Required. Via is the
	// channel, named with the operator.
	Operator string
	Via      string
	Reason   string
	// DryRun reports what would happen and changes nothing.
	DryRun bool
}

// set reports whether p selects a set rather than one operation.
func (p *RedriveSelectionParams) set() bool { return p.Status != "" || !p.Since.IsZero() }

// Validate checks p without touching the database: a *ParamError for the
// tenant, the tool, the operator, the reason or the limit, or one of the ErrSelection errors.
func (p *RedriveSelectionParams) Validate() error {
	switch {
	case p.TenantID == "":
		return &ParamError{Param: "tenant", Err: errors.New("is required")}
	case p.Tool == "":
		return &ParamError{Param: "tool", Err: errors.New("is required")}
	}
	if err := ValidateReason(p.Reason); err != nil {
		return &ParamError{Param: "reason", Err: err}
	}
	if err := ValidateOperator(p.Operator); err != nil {
		return &ParamError{Param: "operator", Err: err}
	}
	set := p.set()
	switch {
	case p.Key != "" && set:
		return ErrSelectionKeyAndSet
	case p.Key == "" && !set:
		return ErrSelectionEmpty
	case set && p.Status != vocab.StatusFailed:
		return ErrSelectionNotFailed
	case set && p.Since.IsZero():
		return ErrSelectionNoSince
	case !set && p.Limit != nil:
		return ErrSelectionLimitWithKey
	case p.Limit != nil && (*p.Limit < 1 || *p.Limit > MaxRedriveLimit):
		return &ParamError{Param: "limit", Err: fmt.Errorf("must be within 1 and %d, got %d", MaxRedriveLimit, *p.Limit)}
	}
	return nil
}

// RedriveSelectionResult is what Redriver.RedriveSelection did.
type RedriveSelectionResult struct {
	// Line is the one operation's line (a re-drive by key).
	Line *RedriveLine
	// Set counts a set re-drive's lines.
	Set *RedriveSetResult
}

// RedriveSelection validates p (see Validate), then re-drives the
// operation of p.Key, or the set of p.Status and p.Since with RedriveSet,
// and calls emit with each line as it goes; with p.DryRun nothing changes.
//
// One operation that is refused (succeeded, queued, running or cancelled)
// is emitted, and its error, for which Refused is true, names it with its
// status; an unknown one returns vocab.ErrNotFound and emits nothing. In a
// set, refused operations are emitted and counted, and the set goes on. The
// result is returned with any error once re-driving began (a set's counts
// so far).
func (r *Redriver) RedriveSelection(ctx context.Context, p *RedriveSelectionParams, emit func(*RedriveLine) error) (*RedriveSelectionResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.set() {
		limit := DefaultRedriveLimit
		if p.Limit != nil {
			limit = *p.Limit
		}
		set, err := r.RedriveSet(ctx, &RedriveSetParams{
			TenantID: p.TenantID, Tool: p.Tool, Since: p.Since, Limit: limit,
			Operator: p.Operator, Via: p.Via, Reason: p.Reason, DryRun: p.DryRun,
		}, emit)
		return &RedriveSelectionResult{Set: set}, err
	}
	line, err := r.Redrive(ctx, &RedriveParams{
		TenantID: p.TenantID, Tool: p.Tool, Key: p.Key, Operator: p.Operator, Via: p.Via, Reason: p.Reason, DryRun: p.DryRun,
	})
	res := &RedriveSelectionResult{Line: line}
	if line != nil {
		if emitErr := emit(line); emitErr != nil {
			return res, emitErr
		}
	}
	if Refused(err) {
		var status vocab.Status
		if line != nil {
			status = line.Status
		}
		return res, fmt.Errorf("%s/%s is %s: %w", p.Tool, p.Key, status, err)
	}
	return res, err
}
