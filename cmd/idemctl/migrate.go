package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

// newMigrateCmd builds `idemctl migrate`: apply River's, idemgate's and
// the built-in tools' pending migrations, then print what was applied as one
// JSON line, {"river_applied":N,"idemgate_applied":M,"builtins_applied":B}.
// Safe to run twice and from several replicas at once.
func newMigrateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply River's and idemgate's database migrations",
		Long: "Apply River's, idemgate's and the built-in tools' pending database migrations, then print\n" +
			`{"river_applied":N,"idemgate_applied":M,"builtins_applied":B}. Safe to run twice and from several replicas at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			d, err := a.openDatabase(ctx)
			if err != nil {
				return err
			}
			defer d.Close()

			res, err := d.migrate(ctx, a)
			if err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			return json.NewEncoder(a.stdout).Encode(res)
		},
	}
}
