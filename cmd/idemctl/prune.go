package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

// defaultPruneBatches bounds one prune run, gate.PruneBatch claims each.
const defaultPruneBatches = 100

// newPruneCmd builds `idemctl prune`: delete expired terminal claims now,
// as the worker's pruner does every minute.
func newPruneCmd(a *app) *cobra.Command {
	var maxBatches int
	cmd := &cobra.Command{
		Use:   "prune [--max-batches N]",
		Short: "Archive expired terminal claims into their keys' history now",
		Long: "Move succeeded and failed claims past their expiry (their tool's TTL after they ended) into their\n" +
			"keys' history, in bounded batches, never a queued or running one, and print {\"deleted\": N}\n" +
			"(claims archived). The history keeps each fingerprint for its tool's retention: a retry with the\n" +
			"same key and arguments is refused with idempotency_key_expired naming the operation, never run\n" +
			"again; other arguments under the key are a new intent. History rows past their retention are\n" +
			"forgotten. Each archived claim and forgotten row gets an audit row; the audit trail is kept.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if maxBatches < 1 {
				return &usageError{fmt.Errorf("--max-batches: must be positive, got %d", maxBatches)}
			}
			db, o, err := a.openOps(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			n, err := o.Gate.Prune(cmd.Context(), maxBatches)
			if err != nil {
				return fmt.Errorf("prune: deleted %d before: %w", n, err)
			}
			a.logger.Info("prune", "deleted", n)
			return json.NewEncoder(a.stdout).Encode(map[string]int{"deleted": n})
		},
	}
	cmd.Flags().IntVar(&maxBatches, "max-batches", defaultPruneBatches, "at most this many batches of 1000 claims")
	return cmd
}
