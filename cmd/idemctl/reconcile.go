package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/internal/builtins/stripehook"
)

// reconcileCmd is `idemctl reconcile`: the refunds Stripe reported that no
// operation explains, or one order's refunds from both sides.
type reconcileCmd struct {
	Tenant string `help:"only this tenant's drift records; required with --order"`
	Order  string `placeholder:"ORDER_ID" help:"answer for this order: its refund_order operations and Stripe's refunds, matched"`
	Limit  int    `default:"${default_list_limit}" placeholder:"N" help:"at most this many drift records or operations (1 to ${max_list_limit})"`
}

func (*reconcileCmd) Help() string {
	return "Without --order, list the drift records, newest first, one JSON object per line: refunds Stripe\n" +
		"reported that no operation explains (kind unexplained: made in the dashboard or by another system;\n" +
		"second_for_operation; operation_failed), with id, tenant_id, order_id, charge_id, refund_id,\n" +
		"operation_id, amount_cents, currency, refund_created, detail and detected_at.\n" +
		"\n" +
		"With --tenant T --order ORDER_ID, print one JSON object answering \"did we refund it twice?\" from both\n" +
		"sides: operations (every refund_order operation whose order_id is ORDER_ID, whatever its key, newest\n" +
		"first, with its key, status, amount_cents, the refund_id of its result and the Stripe refunds reported\n" +
		"under its operation id), stripe_refunds (what Stripe reported for the order's charge), the order's drift,\n" +
		"refunds (distinct refunds that moved money), refunded_twice and a summary sentence.\n" +
		"A tenant with no operation, token or settings is an error; so is an order neither the orders table nor\n" +
		"an operation names. Stripe's side is what its webhooks and the periodic list of refunds reported."
}

func (c *reconcileCmd) Run(ctx context.Context, a *app) error {
	if c.Order != "" && c.Tenant == "" {
		return &usageError{errors.New("--tenant is required with --order")}
	}
	if c.Tenant != "" {
		if err := validTenant(c.Tenant); err != nil {
			return err
		}
	}
	if c.Limit < 1 || c.Limit > maxListLimit {
		return &usageError{fmt.Errorf("--limit: must be within 1 and %d, got %d", maxListLimit, c.Limit)}
	}
	db, err := a.openExistingDatabase(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if c.Tenant != "" {
		known, err := db.tenantKnown(ctx, c.Tenant)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if !known {
			return fmt.Errorf("reconcile: no tenant %q here: it has no operation, token or settings (a typo?)", c.Tenant)
		}
	}
	enc := json.NewEncoder(a.stdout)
	if c.Order != "" {
		rep, err := stripehook.ReconcileOrder(ctx, db.data(), c.Tenant, c.Order, c.Limit)
		if errors.Is(err, stripehook.ErrNoOrder) {
			return fmt.Errorf("reconcile: --order: no order %q in tenant %q (neither an order nor an operation names it)", c.Order, c.Tenant)
		}
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		a.logger.Info("reconcile", "summary", rep.Summary)
		return enc.Encode(rep)
	}
	drift, err := stripehook.ListDrift(ctx, db.data(), c.Tenant, c.Limit)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, d := range drift {
		if err := enc.Encode(d); err != nil {
			return err
		}
	}
	return nil
}
