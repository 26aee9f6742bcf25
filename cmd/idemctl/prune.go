package main

import (
	"context"
	"encoding/json"
	"fmt"
)

// defaultPruneBatches bounds one prune run, core.PruneBatch claims each.
const defaultPruneBatches = 100

// pruneCmd is `idemctl prune`: delete expired terminal claims now, as the
// worker's pruner does every minute.
type pruneCmd struct {
	MaxBatches int `default:"${default_prune_batches}" placeholder:"N" help:"at most this many batches of 1000 claims"`
}

func (*pruneCmd) Help() string {
	return "Move succeeded and failed claims past their expiry (their tool's TTL after they ended) into their\n" +
		"keys' history, in bounded batches, never a queued or running one, and print {\"deleted\": N}\n" +
		"(claims archived). The history keeps each fingerprint for its tool's retention: a retry with the\n" +
		"same key and arguments is refused with idempotency_key_expired naming the operation, never run\n" +
		"again; other arguments under the key are a new intent. History rows past their retention are\n" +
		"forgotten. Each archived claim and forgotten row gets an audit row; the audit trail is kept."
}

func (c *pruneCmd) Run(ctx context.Context, a *app) error {
	if c.MaxBatches < 1 {
		return &usageError{fmt.Errorf("--max-batches: must be positive, got %d", c.MaxBatches)}
	}
	db, o, err := a.openOps(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := o.Gate.Prune(ctx, c.MaxBatches)
	if err != nil {
		return fmt.Errorf("prune: deleted %d before: %w", n, err)
	}
	a.logger.Info("prune", "deleted", n)
	return json.NewEncoder(a.stdout).Encode(map[string]int{"deleted": n})
}
