package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
	"github.com/idemgate/idemgate/internal/tools"
)

// newTokenCmd builds `idemctl token`: create, revoke and list bearer tokens.
func newTokenCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, revoke and list bearer tokens",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd(a), newTokenRevokeCmd(a), newTokenListCmd(a))
	return cmd
}

// newTokenCreateCmd builds `idemctl token create`: mint a token, store its
// hash, and print the secret alone on stdout (it is shown this once); the
// token's id goes to stderr.
func newTokenCreateCmd(a *app) *cobra.Command {
	var (
		tenant, user string
		scopes       []string
		expiresIn    time.Duration
		operator     bool
	)
	cmd := &cobra.Command{
		Use:   "create --tenant T --user U --scopes a,b [--expires-in 720h]",
		Short: "Create a bearer token and print its secret",
		Long: "Create a bearer token for a tenant and user with the given scopes, and print its secret alone on\n" +
			"stdout: it is stored only as a hash and shown this once. The token's id goes to stderr.\n" +
			"Known scopes: " + strings.Join(tools.Scopes(), ", ") + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opsTenant := a.cfg.OperatorTenant
			switch {
			case operator && tenant != "":
				return &usageError{errors.New("--operator and --tenant exclude each other: an operator token belongs to the operator tenant")}
			case operator:
				tenant = opsTenant
			case tenant == opsTenant:
				return &usageError{fmt.Errorf("--tenant: %q is the operator tenant (%s), whose tokens open River UI over every tenant; "+
					"create one with --operator", tenant, config.EnvOperatorTenant)}
			}
			if err := validateTokenFlags(tenant, user, scopes, expiresIn); err != nil {
				return err
			}
			ctx := cmd.Context()
			d, err := a.openDatabase(ctx)
			if err != nil {
				return err
			}
			defer d.Close()

			secret, id, err := tenancy.NewToken()
			if err != nil {
				return err
			}
			p := &store.TokenInsertParams{ID: id, TenantID: tenant, UserID: user, Scopes: scopes, Hash: tenancy.HashToken(secret)}
			if expiresIn > 0 {
				at := time.Now().Add(expiresIn).UTC()
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
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant the token acts for (required unless --operator)")
	f.BoolVar(&operator, "operator", false, "a token of the operator tenant ($"+config.EnvOperatorTenant+", default "+config.DefaultOperatorTenant+"), for River UI with scope "+tenancy.ScopeOpsAdmin)
	f.StringVar(&user, "user", "", "user or bot the token is issued to (required)")
	f.StringSliceVar(&scopes, "scopes", nil, "comma-separated scopes (required): "+strings.Join(tools.Scopes(), ", "))
	f.DurationVar(&expiresIn, "expires-in", 0, "lifetime, such as 720h (default: the token does not expire)")
	return cmd
}

func validateTokenFlags(tenant, user string, scopes []string, expiresIn time.Duration) error {
	switch {
	case tenant == "":
		return &usageError{errors.New("--tenant is required")}
	case !domain.ValidID(tenant):
		return &usageError{fmt.Errorf("--tenant: %q must be %s", tenant, domain.IDRule)}
	case user == "":
		return &usageError{errors.New("--user is required")}
	case !domain.ValidID(user):
		return &usageError{fmt.Errorf("--user: %q must be %s", user, domain.IDRule)}
	case expiresIn < 0:
		return &usageError{fmt.Errorf("--expires-in: must be positive, got %s", expiresIn)}
	}
	if err := tenancy.ValidateScopes(scopes, tools.Scopes()); err != nil {
		return &usageError{fmt.Errorf("--scopes: %w", err)}
	}
	return nil
}

// newTokenRevokeCmd builds `idemctl token revoke ID`: revoke a token and
// print it as JSON. Revoking a revoked token prints it unchanged.
func newTokenRevokeCmd(a *app) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a bearer token and print it as JSON",
		Long: "Revoke a bearer token and print it as one JSON line. Running servers stop accepting it within\n" +
			"their token cache TTL (5s by default). Revoking a revoked token prints it unchanged.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			d, err := a.openDatabase(ctx)
			if err != nil {
				return err
			}
			defer d.Close()

			tok, err := d.data().TokenRevoke(ctx, &store.TokenRevokeParams{ID: args[0], TenantID: tenant})
			if errors.Is(err, domain.ErrNotFound) {
				if tenant != "" {
					return fmt.Errorf("token revoke: no token %q in tenant %q", args[0], tenant)
				}
				return fmt.Errorf("token revoke: no token %q", args[0])
			}
			if err != nil {
				return fmt.Errorf("token revoke: %w", err)
			}
			return json.NewEncoder(a.stdout).Encode(viewToken(tok))
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only revoke the token if it belongs to this tenant")
	return cmd
}

// newTokenListCmd builds `idemctl token list --tenant T`: one JSON line per
// token, oldest first, revoked and expired ones included.
func newTokenListCmd(a *app) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "list --tenant T",
		Short: "List a tenant's bearer tokens as JSON lines",
		Long: "List a tenant's bearer tokens, oldest first, one JSON object per line:\n" +
			"id, tenant, user, scopes, created_at, expires_at, revoked_at. Secrets and hashes are never shown.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return &usageError{errors.New("--tenant is required")}
			}
			ctx := cmd.Context()
			d, err := a.openDatabase(ctx)
			if err != nil {
				return err
			}
			defer d.Close()

			toks, err := d.data().TokenList(ctx, &store.TokenListParams{TenantID: tenant})
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
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant whose tokens to list (required)")
	return cmd
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
