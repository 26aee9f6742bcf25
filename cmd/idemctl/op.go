package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/ops"
)

// exitRefused is the exit code of a re-drive the gate refused (the
// operation succeeded, or is still queued or running).
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

// newOpCmd builds `idemctl op`: get, list and re-drive operations.
func newOpCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "op",
		Short: "Show, list and re-drive operations",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newOpGetCmd(a), newOpListCmd(a), newOpRedriveCmd(a))
	return cmd
}

// openOps opens the database and assembles the operators' parts on it. The
// caller closes the database.
func (a *app) openOps(cmd *cobra.Command) (*database, *idemgateapp.Ops, error) {
	d, err := a.openExistingDatabase(cmd.Context())
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

// newOpGetCmd builds `idemctl op get`: one operation with its audit trail.
func newOpGetCmd(a *app) *cobra.Command {
	var tenant, tool, key string
	cmd := &cobra.Command{
		Use:   "get --tenant T --tool X --key K",
		Short: "Print an operation with its audit trail as JSON",
		Long: "Print the operation of (tenant, tool, idempotency key) as one JSON object: the client's view\n" +
			"(operation_id, status, attempts, job_id, result or error, times) plus tenant_id, user_id, args_hash,\n" +
			"generation, downstream_key, epoch, lease_expires_at and last_error, with its whole audit trail\n" +
			"under \"audit\", oldest first. Exits 1 when there is no such operation.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(map[string]string{"--tenant": tenant, "--tool": tool, "--key": key}); err != nil {
				return err
			}
			if err := validTenant(tenant); err != nil {
				return err
			}
			ctx := cmd.Context()
			db, err := a.openExistingDatabase(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			d, err := ops.GetOperation(ctx, db.data(), tenant, tool, key)
			if errors.Is(err, domain.ErrNotFound) {
				return fmt.Errorf("op get: no operation %s/%s in tenant %q", tool, key, tenant)
			}
			if err != nil {
				return fmt.Errorf("op get: %w", err)
			}
			return json.NewEncoder(a.stdout).Encode(d)
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant (required)")
	f.StringVar(&tool, "tool", "", "tool, such as refund_order (required)")
	f.StringVar(&key, "key", "", "the client's idempotency key (required)")
	return cmd
}

// newOpListCmd builds `idemctl op list`: a tenant's operations as JSON lines.
func newOpListCmd(a *app) *cobra.Command {
	var (
		tenant, tool, status, since string
		limit                       int
	)
	cmd := &cobra.Command{
		Use:   "list --tenant T [--status failed] [--tool X] [--since 1h] [--limit N]",
		Short: "List a tenant's operations as JSON lines",
		Long: "List a tenant's operations, most recently updated first, one JSON object per line (the fields\n" +
			"of op get, without the audit trail).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return &usageError{errors.New("--tenant is required")}
			}
			if err := validTenant(tenant); err != nil {
				return err
			}
			st, err := parseStatus(status)
			if err != nil {
				return err
			}
			sinceAt, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			if limit < 1 || limit > maxListLimit {
				return &usageError{fmt.Errorf("--limit: must be within 1 and %d, got %d", maxListLimit, limit)}
			}
			ctx := cmd.Context()
			db, err := a.openExistingDatabase(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			p := &gate.ClaimListParams{TenantID: tenant, Tool: tool, Status: st, Limit: limit}
			if !sinceAt.IsZero() {
				p.Since = &sinceAt
			}
			claims, err := db.data().ClaimList(ctx, p)
			if err != nil {
				return fmt.Errorf("op list: %w", err)
			}
			enc := json.NewEncoder(a.stdout)
			for _, c := range claims {
				if err := enc.Encode(ops.ViewOperation(c)); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant (required)")
	f.StringVar(&tool, "tool", "", "only this tool's operations")
	f.StringVar(&status, "status", "", "only operations in this status: queued, running, succeeded or failed")
	f.StringVar(&since, "since", "", "only operations updated since then: a duration ago (1h, 30m) or an RFC 3339 time")
	f.IntVar(&limit, "limit", defaultListLimit, fmt.Sprintf("at most this many operations (1 to %d)", maxListLimit))
	return cmd
}

// newOpRedriveCmd builds `idemctl op redrive`.
func newOpRedriveCmd(a *app) *cobra.Command {
	var (
		tenant, tool, key, status, since, reason, operator string
		limit                                              int
		dryRun                                             bool
	)
	cmd := &cobra.Command{
		Use:   "redrive --tenant T --tool X (--key K | --status failed --since 1h) --reason R [--operator NAME] [--dry-run]",
		Short: "Re-drive failed operations through the gate",
		Long: "Re-drive a failed operation through the gate: it goes back to queued, its job runs again (or a\n" +
			"fresh one when River has cleaned it), and a redriven audit row names the operator and the reason.\n" +
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
			"refused), status, next_generation, fresh_job, job_id, downstream_key and reason.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(map[string]string{"--tenant": tenant, "--tool": tool, "--reason": reason}); err != nil {
				return err
			}
			if err := validTenant(tenant); err != nil {
				return err
			}
			if err := ops.ValidateReason(reason); err != nil {
				return &usageError{fmt.Errorf("--reason: %w", err)}
			}
			if !cmd.Flags().Changed("operator") {
				operator = defaultOperator()
			}
			if err := ops.ValidateOperator(operator); err != nil {
				return &usageError{fmt.Errorf("--operator: %w", err)}
			}
			setMode := status != "" || since != ""
			switch {
			case key != "" && setMode:
				return &usageError{errors.New("give either --key or --status failed --since D, not both")}
			case key == "" && !setMode:
				return &usageError{errors.New("give --key K for one operation, or --status failed --since D for a set")}
			case setMode && status != string(domain.StatusFailed):
				return &usageError{errors.New("--status: only failed operations are re-driven; give --status failed")}
			case setMode && since == "":
				return &usageError{errors.New("--since is required with --status failed (a set re-drive is bounded in time)")}
			case !setMode && cmd.Flags().Changed("limit"):
				return &usageError{errors.New("--limit applies to a set re-drive (--status failed --since D)")}
			case limit < 1 || limit > ops.MaxRedriveLimit:
				return &usageError{fmt.Errorf("--limit: must be within 1 and %d, got %d", ops.MaxRedriveLimit, limit)}
			}
			var sinceAt time.Time
			if setMode {
				var err error
				if sinceAt, err = parseSince(since, time.Now()); err != nil {
					return err
				}
			}

			db, o, err := a.openOps(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			ctx := cmd.Context()
			enc := json.NewEncoder(a.stdout)

			if !setMode {
				line, err := o.Redriver.Redrive(ctx, &ops.RedriveParams{
					TenantID: tenant, Tool: tool, Key: key, Operator: operator, Reason: reason, DryRun: dryRun,
				})
				switch {
				case ops.Refused(err):
					if encErr := enc.Encode(line); encErr != nil {
						return encErr
					}
					return &exitError{code: exitRefused, err: fmt.Errorf("op redrive: %s/%s is %s: %w", tool, key, line.Status, err)}
				case errors.Is(err, domain.ErrNotFound):
					return fmt.Errorf("op redrive: no operation %s/%s in tenant %q", tool, key, tenant)
				case err != nil:
					return fmt.Errorf("op redrive: %w", err)
				}
				a.logger.Info("op redrive", "operation_id", line.OperationID, "action", line.Action,
					"next_generation", line.NextGeneration, "fresh_job", line.FreshJob, "operator", operator)
				return enc.Encode(line)
			}

			res, err := o.Redriver.RedriveSet(ctx, &ops.RedriveSetParams{
				TenantID: tenant, Tool: tool, Since: sinceAt, Limit: limit,
				Operator: operator, Reason: reason, DryRun: dryRun,
			}, func(line *ops.RedriveLine) error { return enc.Encode(line) })
			if res != nil {
				a.logger.Info("op redrive", "matched", res.Matched, "redriven", res.Redriven, "refused", res.Refused,
					"dry_run", dryRun, "operator", operator)
				if res.LimitReached {
					a.logger.Warn("op redrive: --limit reached; more failed operations may be left: run it again", "limit", limit)
				}
			}
			if err != nil {
				return fmt.Errorf("op redrive: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant (required)")
	f.StringVar(&tool, "tool", "", "tool, such as refund_order (required)")
	f.StringVar(&key, "key", "", "the idempotency key of the one operation to re-drive")
	f.StringVar(&status, "status", "", "with --since: re-drive a set; only failed is accepted")
	f.StringVar(&since, "since", "", "with --status failed: operations that failed since then: a duration ago (1h) or an RFC 3339 time")
	f.IntVar(&limit, "limit", ops.DefaultRedriveLimit, fmt.Sprintf("at most this many operations in a set (1 to %d)", ops.MaxRedriveLimit))
	f.StringVar(&reason, "reason", "", fmt.Sprintf("why, for the audit trail (required, at most %d characters)", ops.MaxReasonLen))
	f.StringVar(&operator, "operator", "", "who, for the audit trail (default $USER, or idemctl)")
	f.BoolVar(&dryRun, "dry-run", false, "list what would be re-driven and change nothing")
	return cmd
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

func parseStatus(s string) (domain.Status, error) {
	switch st := domain.Status(s); st {
	case "", domain.StatusQueued, domain.StatusRunning, domain.StatusSucceeded, domain.StatusFailed:
		return st, nil
	}
	return "", &usageError{fmt.Errorf("--status: %q is not queued, running, succeeded or failed", s)}
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
	if !domain.ValidID(t) {
		return &usageError{fmt.Errorf("--tenant: %q must be %s", t, domain.IDRule)}
	}
	return nil
}
