package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

// seedCmd is `idemctl seed --file F`: load a seed file (the format of
// docs/design.md) in one transaction and print a JSON summary. Idempotent:
// rows that exist are left unchanged; tokens without a fixed value are
// minted on every run, and only their secrets are printed.
type seedCmd struct {
	File string `help:"seed file to load, or - for standard input (required)"`
}

func (*seedCmd) Help() string {
	return "Load a seed file (see docs/design.md, \"Operators and the edge\") in one transaction and print one JSON line:\n" +
		`{"orders":{"created":N,"existing":M},…,"tokens":{…},"tenants":{…},"created_tokens":[{"index":I,"id":…,"token":…}]}.` + "\n" +
		"Idempotent: existing rows are left as they are, even where the file differs. Entries of \"tokens\"\n" +
		"with a fixed \"token\" value are created once; those without one are minted on every run, and their\n" +
		"secrets (shown this once) are listed in created_tokens. --file - reads standard input."
}

func (c *seedCmd) Run(ctx context.Context, a *app) error {
	if c.File == "" {
		return &usageError{errors.New("--file is required")}
	}
	f, err := readSeed(a.stdin, c.File, a.cfg.OperatorTenant)
	if err != nil {
		return err
	}
	d, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer d.Close()

	res, err := d.data().Seed(ctx, f)
	if err != nil {
		return fmt.Errorf("seed %s: %w", c.File, err)
	}
	return json.NewEncoder(a.stdout).Encode(res)
}

// readSeed parses the seed file named by name ("-" is stdin). A file that
// cannot be read or does not validate is a usage error.
func readSeed(stdin io.Reader, name, operatorTenant string) (*store.SeedFile, error) {
	r := stdin
	if name != "-" {
		fh, err := os.Open(name)
		if err != nil {
			return nil, &usageError{fmt.Errorf("--file: %w", err)}
		}
		defer fh.Close()
		r = fh
	}
	// Orders, customers, seats and users are the built-in tools' rows.
	f, err := store.ParseSeed(r, &tools.Seed{})
	if err == nil {
		// Tokens may grant the built-in tools' scopes, and never belong to the
		// operator tenant: its tokens are made one by one, with --operator.
		f.KnownScopes = tools.Scopes()
		err = f.Validate()
		for i, tok := range f.Tokens {
			if err == nil && tok.Tenant == operatorTenant {
				err = fmt.Errorf("tokens[%d].tenant: %q is the operator tenant (%s); create its tokens with idemctl token create --operator",
					i, tok.Tenant, config.EnvOperatorTenant)
			}
		}
	}
	if err != nil {
		return nil, &usageError{fmt.Errorf("--file %s: %w", name, err)}
	}
	return f, nil
}
