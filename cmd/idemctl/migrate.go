package main

import (
	"context"
	"encoding/json"
	"fmt"
)

// migrateCmd is `idemctl migrate`: apply River's, idemgate's and the
// built-in tools' pending migrations, then print what was applied as one
// JSON line, {"river_applied":N,"idemgate_applied":M,"builtins_applied":B}.
// Safe to run twice and from several replicas at once.
type migrateCmd struct{}

func (*migrateCmd) Help() string {
	return "Apply River's, idemgate's and the built-in tools' pending database migrations, then print\n" +
		`{"river_applied":N,"idemgate_applied":M,"builtins_applied":B}. Safe to run twice and from several replicas at once.`
}

func (*migrateCmd) Run(ctx context.Context, a *app) error {
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
}
