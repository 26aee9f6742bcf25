package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/idemgate/idemgate/domain"
	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/ops"
	"github.com/idemgate/idemgate/internal/vocab"
)

// exitRefused is the exit code of a re-drive the gate refused (the
// operation succeeded, or is still queued or running), and of a refused
// approval decision.
const exitRefused = 3

// exitError makes run exit with code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Limits of op list.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// opCmd is `idemctl op`: get, list and re-drive operations.
type opCmd struct {
	Get     opGetCmd     `cmd:"" usage:"--tenant T --tool X --key K" help:"Print an operation with its audit trail as JSON"`
	List    opListCmd    `cmd:"" usage:"--tenant T [--status failed] [--tool X] [--since 1h] [--limit N]" help:"List a tenant's operations as JSON lines"`
	Redrive opRedriveCmd `cmd:"" usage:"--tenant T --tool X (--key K | --status failed --since 1h) --reason R [--operator NAME] [--dry-run]" help:"Re-drive failed operations through the gate"`
}

// openOps opens the database and assembles the operators' parts on it. The
// caller closes the database.
func (a *app) openOps(ctx context.Context) (*database, *idemgateapp.Ops, error) {
	d, err := a.openExistingDatabase(ctx)
	if err != nil {
		return nil, nil, err
	}
	o, err := d.ops(a)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, o, nil
}

// opGetCmd is `idemctl op get`: one operation with its audit trail.
type opGetCmd struct {
	Tenant string `help:"tenant (required)"`
	Tool   string `help:"tool, such as refund_order (required)"`
	Key    string `help:"the client's idempotency key (required)"`
}

func (*opGetCmd) Help() string {
	return "Print the operation of (tenant, tool, idempotency key) as one JSON object: the client's view\n" +
		"(operation_id, status, attempts, job_id, result or error, times) plus tenant_id, user_id, args_hash,\n" +
		"generation, downstream_key, epoch, lease_expires_at and last_error, with its whole audit trail\n" +
		"under \"audit\", oldest first. An operation that awaited a person's approval also has \"approval\":\n" +
		"requested_by, requested_at, approval_expires_at while it waits, then decision (approved, denied,\n" +
		"expired or cancelled), decided_by, decided_at and reason, and the refused decisions under \"refused\".\n" +
		"Exits 1 when there is no such operation."
}

func (c *opGetCmd) Run(ctx context.Context, a *app) error {
	if err := requireFlags(map[string]string{"--tenant": c.Tenant, "--tool": c.Tool, "--key": c.Key}); err != nil {
		return err
	}
	if err := validTenant(c.Tenant); err != nil {
		return err
	}
	db, err := a.openExistingDatabase(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := ops.GetOperation(ctx, db.data(), c.Tenant, c.Tool, c.Key)
	if errors.Is(err, vocab.ErrNotFound) {
		return fmt.Errorf("op get: no operation %s/%s in tenant %q", c.Tool, c.Key, c.Tenant)
	}
	if err != nil {
		return fmt.Errorf("op get: %w", err)
	}
	return json.NewEncoder(a.stdout).Encode(d)
}

// opListCmd is `idemctl op list`: a tenant's operations as JSON lines.
type opListCmd struct {
	Tenant string `help:"tenant (required)"`
	Tool   string `help:"only this tool's operations"`
	Status string `help:"only operations in this status: queued, running, succeeded or failed"`
	Since  string `help:"only operations updated since then: a duration ago (1h, 30m) or an RFC 3339 time"`
	Arg    string `placeholder:"NAME=VALUE" help:"only operations whose argument NAME has this VALUE (order_id=ord_9f2): did we refund that order twice?"`
	Limit  int    `default:"${default_list_limit}" placeholder:"N" help:"at most this many operations (1 to ${max_list_limit})"`
}

func (*opListCmd) Help() string {
	return "List a tenant's operations, most recently updated first, one JSON object per line (the fields\n" +
		"of op get with the canonical arguments, without the audit trail). --arg order_id=ord_9f2 finds every\n" +
		"operation on that order, whatever its key: two refunds under two keys are two lines. A tenant that\n" +
		"has no operation, token or settings is an error."
}

func (c *opListCmd) Run(ctx context.Context, a *app) error {
	p, err := c.params()
	if err != nil {
		return err
	}
	db, err := a.openExistingDatabase(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	claims, err := db.data().ClaimList(ctx, p)
	if err != nil {
		return fmt.Errorf("op list: %w", err)
	}
	if len(claims) == 0 {
		known, err := db.tenantKnown(ctx, c.Tenant)
		if err != nil {
			return fmt.Errorf("op list: %w", err)
		}
		if !known {
			return fmt.Errorf("op list: no tenant %q here: it has no operation, token or settings (a typo?)", c.Tenant)
		}
	}
	enc := json.NewEncoder(a.stdout)
	for _, c := range claims {
		if err := enc.Encode(ops.ViewOperation(c)); err != nil {
			return err
		}
	}
	return nil
}

// params checks the flags of op list.
func (c *opListCmd) params() (*core.ClaimListParams, error) {
	if c.Tenant == "" {
		return nil, &usageError{errors.New("--tenant is required")}
	}
	if err := validTenant(c.Tenant); err != nil {
		return nil, err
	}
	st, err := parseStatus(c.Status)
	if err != nil {
		return nil, err
	}
	since, err := parseSince(c.Since, time.Now())
	if err != nil {
		return nil, err
	}
	if c.Limit < 1 || c.Limit > maxListLimit {
		return nil, &usageError{fmt.Errorf("--limit: must be within 1 and %d, got %d", maxListLimit, c.Limit)}
	}
	p := &core.ClaimListParams{TenantID: c.Tenant, Tool: c.Tool, Status: st, Limit: c.Limit}
	if c.Arg != "" {
		name, value, ok := strings.Cut(c.Arg, "=")
		if !ok || !core.ValidArgName(name) {
			return nil, &usageError{fmt.Errorf("--arg: want NAME=VALUE with NAME an argument name ([a-z0-9_]), got %q", c.Arg)}
		}
		p.ArgName, p.ArgValue = name, value
	}
	if !since.IsZero() {
		p.Since = &since
	}
	return p, nil
}

// opRedriveCmd is `idemctl op redrive`: flags for
// ops.Redriver.RedriveSelection, whose lines it prints.
type opRedriveCmd struct {
	Tenant   string  `help:"tenant (required)"`
	Tool     string  `help:"tool, such as refund_order (required)"`
	Key      string  `help:"the idempotency key of the one operation to re-drive"`
	Status   string  `help:"with --since: re-drive a set; only failed is accepted"`
	Since    string  `help:"with --status failed: operations that failed since then: a duration ago (1h) or an RFC 3339 time"`
	Limit    int     `default:"${default_redrive_limit}" placeholder:"N" help:"at most this many operations in a set (1 to ${max_redrive_limit})"`
	Reason   string  `help:"why, for the audit trail (required, at most ${max_reason_len} characters)"`
	Operator *string `placeholder:"NAME" help:"who, for the audit trail (default $USER, or idemctl)"`
	DryRun   bool    `help:"list what would be re-driven and change nothing"`
}

func (*opRedriveCmd) Help() string {
	return "Re-drive a failed operation through the gate: it goes back to queued, its job runs again (or a\n" +
		"fresh one when River has cleaned it), and a redriven audit row names the operator, idemctl and the reason.\n" +
		"The downstream key is kept when the earlier outcome is unknown, so the provider deduplicates, and\n" +
		"moves to the next generation only after a definitive \"nothing happened\" (card declined, say).\n" +
		"\n" +
		"With --key, one operation; a succeeded (or still queued or running) one is refused with exit code 3,\n" +
		"and so is one its agent or tenant cancelled: a cancellation is final (the agent starts a new intent\n" +
		"with a new key). A refusal writes a denied audit row naming the operator.\n" +
		"With --status failed --since D instead, every failed operation of the tenant and tool updated since\n" +
		"then, newest first, up to --limit; refused ones are reported and the rest go on.\n" +
		"--dry-run lists what would happen and changes nothing.\n" +
		"\n" +
		"Prints one JSON object per operation: operation_id, tool, key, action (redriven, would_redrive or\n" +
		"refused), status, next_generation, fresh_job, job_id, downstream_key and reason."
}

func (c *opRedriveCmd) Run(ctx context.Context, kctx *kong.Context, a *app) error {
	p, err := c.params(kctx)
	if err != nil {
		return err
	}
	db, o, err := a.openOps(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	enc := json.NewEncoder(a.stdout)
	res, err := o.Redriver.RedriveSelection(ctx, p, func(line *ops.RedriveLine) error { return enc.Encode(line) })
	a.logRedrive(p, res, err)
	switch {
	case ops.Refused(err):
		return &exitError{code: exitRefused, err: fmt.Errorf("op redrive: %w", err)}
	case errors.Is(err, vocab.ErrNotFound):
		return fmt.Errorf("op redrive: no operation %s/%s in tenant %q", p.Tool, p.Key, p.TenantID)
	case err != nil:
		return fmt.Errorf("op redrive: %w", err)
	}
	return nil
}

// params turns the flags into the re-drive's parameters, checked before
// the database is opened.
func (c *opRedriveCmd) params(kctx *kong.Context) (*ops.RedriveSelectionParams, error) {
	if err := requireFlags(map[string]string{"--tenant": c.Tenant, "--tool": c.Tool, "--reason": c.Reason}); err != nil {
		return nil, err
	}
	if err := validTenant(c.Tenant); err != nil {
		return nil, err
	}
	p := &ops.RedriveSelectionParams{TenantID: c.Tenant, Tool: c.Tool, Key: c.Key, Status: vocab.Status(c.Status),
		Operator: defaultOperator(), Via: ops.ChannelIdemctl, Reason: c.Reason, DryRun: c.DryRun}
	if c.Operator != nil {
		p.Operator = *c.Operator
	}
	if flagGiven(kctx, "limit") {
		p.Limit = &c.Limit
	}
	if c.Since != "" {
		since, err := parseSince(c.Since, time.Now())
		if err != nil {
			return nil, err
		}
		p.Since = since
	}
	if err := p.Validate(); err != nil {
		return nil, redriveUsage(err)
	}
	return p, nil
}

// redriveUsage says a re-drive's invalid parameters in terms of the flags.
func redriveUsage(err error) error {
	var pe *ops.ParamError
	switch {
	case errors.Is(err, ops.ErrSelectionKeyAndSet):
		err = errors.New("give either --key or --status failed --since D, not both")
	case errors.Is(err, ops.ErrSelectionEmpty):
		err = errors.New("give --key K for one operation, or --status failed --since D for a set")
	case errors.Is(err, ops.ErrSelectionNotFailed):
		err = errors.New("--status: only failed operations are re-driven; give --status failed")
	case errors.Is(err, ops.ErrSelectionNoSince):
		err = errors.New("--since is required with --status failed (a set re-drive is bounded in time)")
	case errors.Is(err, ops.ErrSelectionLimitWithKey):
		err = errors.New("--limit applies to a set re-drive (--status failed --since D)")
	case errors.As(err, &pe):
		err = fmt.Errorf("--%s: %w", pe.Param, pe.Err)
	}
	return &usageError{err}
}

// logRedrive logs what a re-drive did: the one operation re-driven, or a
// set's counts (and a warning when it reached its limit).
func (a *app) logRedrive(p *ops.RedriveSelectionParams, res *ops.RedriveSelectionResult, err error) {
	switch {
	case res == nil:
	case res.Set != nil:
		a.logger.Info("op redrive", "matched", res.Set.Matched, "redriven", res.Set.Redriven, "refused", res.Set.Refused,
			"dry_run", p.DryRun, "operator", p.Operator)
		if res.Set.LimitReached {
			limit := ops.DefaultRedriveLimit
			if p.Limit != nil {
				limit = *p.Limit
			}
			a.logger.Warn("op redrive: --limit reached; more failed operations may be left: run it again", "limit", limit)
		}
	case err == nil && res.Line != nil:
		a.logger.Info("op redrive", "operation_id", res.Line.OperationID, "action", res.Line.Action,
			"next_generation", res.Line.NextGeneration, "fresh_job", res.Line.FreshJob, "operator", p.Operator)
	}
}

// defaultOperator is $USER when it is a valid operator name, else idemctl.
func defaultOperator() string {
	if u := os.Getenv("USER"); ops.ValidateOperator(u) == nil {
		return u
	}
	return "idemctl"
}

// requireFlags returns a usage error naming the first empty flag, in the
// order of the usage line.
func requireFlags(flags map[string]string) error {
	for _, name := range []string{"--tenant", "--tool", "--key", "--reason"} {
		if v, ok := flags[name]; ok && v == "" {
			return &usageError{fmt.Errorf("%s is required", name)}
		}
	}
	return nil
}

func parseStatus(s string) (vocab.Status, error) {
	switch st := vocab.Status(s); st {
	case "", vocab.StatusAwaitingApproval, vocab.StatusQueued, vocab.StatusRunning, vocab.StatusSucceeded, vocab.StatusFailed:
		return st, nil
	}
	return "", &usageError{fmt.Errorf("--status: %q is not awaiting_approval, queued, running, succeeded or failed", s)}
}

// parseSince reads a duration ago (1h, 90m) or an RFC 3339 time; "" is the
// zero time.
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, &usageError{fmt.Errorf("--since: %s must be positive", s)}
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, &usageError{fmt.Errorf("--since: %q is neither a duration (1h, 30m) nor an RFC 3339 time", s)}
}

// validTenant checks a tenant id like the seed file and tokens do.
func validTenant(t string) error {
	if err := domain.CheckID(t); err != nil {
		return &usageError{fmt.Errorf("--tenant: %q %v (must be %s)", t, err, vocab.IdentityRule)}
	}
	return nil
}
