package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
)

// tokenCmd is `idemctl token`: create, revoke and list bearer tokens.
type tokenCmd struct {
	Create tokenCreateCmd `cmd:"" usage:"--tenant T --user U --scopes a,b [--expires-in 720h]" help:"Create a bearer token and print its secret"`
	Revoke tokenRevokeCmd `cmd:"" usage:"ID" help:"Revoke a bearer token and print it as JSON"`
	List   tokenListCmd   `cmd:"" usage:"--tenant T" help:"List a tenant's bearer tokens as JSON lines"`
}

// tokenCreateCmd is `idemctl token create`: mint a token, store its hash,
// and print the secret alone on stdout (it is shown this once); the token's
// id goes to stderr.
type tokenCreateCmd struct {
	Tenant    string        `help:"tenant the token acts for (required unless --operator)"`
	Operator  bool          `help:"a token of the operator tenant (${operator_tenant_env}, default ${default_operator_tenant}), for River UI with scope ${scope_ops_admin}"`
	User      string        `help:"user or bot the token is issued to (required)"`
	Scopes    []string      `help:"comma-separated scopes (required): ${scopes}"`
	ExpiresIn time.Duration `help:"lifetime, such as 720h (default: the token does not expire)"`
}

func (*tokenCreateCmd) Help() string {
	return "Create a bearer token for a tenant and user with the given scopes, and print its secret alone on\n" +
		"stdout: it is stored only as a hash and shown this once. The token's id goes to stderr.\n" +
		"Known scopes: " + strings.Join(tools.Scopes(), ", ") + "."
}

func (c *tokenCreateCmd) Run(ctx context.Context, a *app) error {
	if err := c.tenant(a.cfg.OperatorTenant); err != nil {
		return err
	}
	if err := validateTokenFlags(c.Tenant, c.User, c.Scopes, c.ExpiresIn); err != nil {
		return err
	}
	d, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer d.Close()

	secret, id, err := tenancy.NewToken()
	if err != nil {
		return err
	}
	p := &store.TokenInsertParams{ID: id, TenantID: c.Tenant, UserID: c.User, Scopes: c.Scopes, Hash: tenancy.HashToken(secret)}
	if c.ExpiresIn > 0 {
		at := time.Now().Add(c.ExpiresIn).UTC()
		p.ExpiresAt = &at
	}
	tok, err := d.data().TokenInsert(ctx, p)
	if err != nil {
		return fmt.Errorf("token create: %w", err)
	}
	a.logger.Info("token created", "id", tok.ID, "tenant", tok.TenantID, "user", tok.UserID,
		"scopes", strings.Join(tok.Scopes, ","), "expires_at", formatOptTime(tok.ExpiresAt))
	_, err = fmt.Fprintln(a.stdout, secret)
	return err
}

// tenant sets c.Tenant to the operator tenant for --operator, and refuses
// the operator tenant given as an ordinary one.
func (c *tokenCreateCmd) tenant(opsTenant string) error {
	switch {
	case c.Operator && c.Tenant != "":
		return &usageError{errors.New("--operator and --tenant exclude each other: an operator token belongs to the operator tenant")}
	case c.Operator:
		c.Tenant = opsTenant
	case c.Tenant == opsTenant:
		return &usageError{fmt.Errorf("--tenant: %q is the operator tenant (%s), whose tokens open River UI over every tenant; "+
			"create one with --operator", c.Tenant, config.EnvOperatorTenant)}
	}
	return nil
}

func validateTokenFlags(tenant, user string, scopes []string, expiresIn time.Duration) error {
	switch {
	case tenant == "":
		return &usageError{errors.New("--tenant is required")}
	case domain.CheckID(tenant) != nil:
		return &usageError{fmt.Errorf("--tenant: %q %v (must be %s)", tenant, domain.CheckID(tenant), vocab.IdentityRule)}
	case user == "":
		return &usageError{errors.New("--user is required")}
	case domain.CheckID(user) != nil:
		return &usageError{fmt.Errorf("--user: %q %v (must be %s)", user, domain.CheckID(user), vocab.IdentityRule)}
	case expiresIn < 0:
		return &usageError{fmt.Errorf("--expires-in: must be positive, got %s", expiresIn)}
	}
	if err := tenancy.ValidateScopes(scopes, tools.Scopes()); err != nil {
		return &usageError{fmt.Errorf("--scopes: %w", err)}
	}
	return nil
}

// tokenRevokeCmd is `idemctl token revoke ID`: revoke a token and print it
// as JSON. Revoking a revoked token prints it unchanged.
type tokenRevokeCmd struct {
	ID     string `arg:"" name:"id" help:"the token's id"`
	Tenant string `help:"only revoke the token if it belongs to this tenant"`
}

func (*tokenRevokeCmd) Help() string {
	return "Revoke a bearer token and print it as one JSON line. Running servers stop accepting it within\n" +
		"their token cache TTL (5s by default). Revoking a revoked token prints it unchanged."
}

func (c *tokenRevokeCmd) Run(ctx context.Context, a *app) error {
	d, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer d.Close()

	tok, err := d.data().TokenRevoke(ctx, &store.TokenRevokeParams{ID: c.ID, TenantID: c.Tenant})
	if errors.Is(err, vocab.ErrNotFound) {
		if c.Tenant != "" {
			return fmt.Errorf("token revoke: no token %q in tenant %q", c.ID, c.Tenant)
		}
		return fmt.Errorf("token revoke: no token %q", c.ID)
	}
	if err != nil {
		return fmt.Errorf("token revoke: %w", err)
	}
	return json.NewEncoder(a.stdout).Encode(viewToken(tok))
}

// tokenListCmd is `idemctl token list --tenant T`: one JSON line per
// token, oldest first, revoked and expired ones included.
type tokenListCmd struct {
	Tenant string `help:"tenant whose tokens to list (required)"`
}

func (*tokenListCmd) Help() string {
	return "List a tenant's bearer tokens, oldest first, one JSON object per line:\n" +
		"id, tenant, user, scopes, created_at, expires_at, revoked_at. Secrets and hashes are never shown."
}

func (c *tokenListCmd) Run(ctx context.Context, a *app) error {
	if c.Tenant == "" {
		return &usageError{errors.New("--tenant is required")}
	}
	d, err := a.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer d.Close()

	toks, err := d.data().TokenList(ctx, &store.TokenListParams{TenantID: c.Tenant})
	if err != nil {
		return fmt.Errorf("token list: %w", err)
	}
	enc := json.NewEncoder(a.stdout)
	for _, tok := range toks {
		if err := enc.Encode(viewToken(tok)); err != nil {
			return err
		}
	}
	return nil
}

// tokenView is how idemctl prints a token: never its hash or secret.
type tokenView struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	User      string     `json:"user"`
	Scopes    []string   `json:"scopes"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func viewToken(t *store.Token) tokenView {
	return tokenView{
		ID: t.ID, Tenant: t.TenantID, User: t.UserID, Scopes: t.Scopes,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt,
	}
}

func formatOptTime(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format(time.RFC3339)
}
