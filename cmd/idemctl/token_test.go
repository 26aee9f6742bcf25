package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tenancy"
)

// cliResult is what one in-process idemctl run produced.
type cliResult struct {
	code   int
	stdout string
	stderr string
}

// idemctl runs the command tree in-process against dbURL (through run) and
// returns its exit code and output.
func idemctl(ctx context.Context, t *testing.T, dbURL string, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, append([]string{"--database-url", dbURL}, args...), &stdout, &stderr)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// jsonLines decodes each line of s into a map.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	out := []map[string]any{}
	for line := range strings.Lines(s) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q", line)
		out = append(out, m)
	}
	return out
}

var tokenViewKeys = []string{"id", "tenant", "user", "scopes", "created_at", "expires_at", "revoked_at"}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTokenCommands(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL, pool := pgtest.NewDB(t)
	tokens := pgengine.New(pool)

	// create: the secret alone on stdout, the id on stderr.
	res := idemctl(ctx, t, dbURL, "token", "create", "--tenant", "acme", "--user", "support-bot",
		"--scopes", "billing:refund,operations:read", "--expires-in", "720h")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^idg_[A-Za-z0-9_-]{43}\n$`, res.stdout)
	secret := strings.TrimSpace(res.stdout)
	id := regexp.MustCompile(`tok_[0-9a-f]{16}`).FindString(res.stderr)
	require.NotEmpty(t, id, "stderr names the token id: %s", res.stderr)
	require.NotContains(t, res.stderr, secret)

	tok, err := tokens.TokenGetByHash(ctx, tenancy.HashToken(secret))
	require.NoError(t, err)
	require.Equal(t, id, tok.ID)
	require.Equal(t, "acme", tok.TenantID)
	require.Equal(t, "support-bot", tok.UserID)
	require.Equal(t, []string{"billing:refund", "operations:read"}, tok.Scopes)
	require.WithinDuration(t, time.Now().Add(720*time.Hour), *tok.ExpiresAt, time.Minute)

	// The token authenticates.
	actor, err := tenancy.NewAuthenticator(tokens, 0, nil).Authenticate(ctx, secret)
	require.NoError(t, err)
	require.Equal(t, id, actor.TokenID)

	// A second token without expiry, and one of another tenant.
	res = idemctl(ctx, t, dbURL, "token", "create", "--tenant", "acme", "--user", "ops", "--scopes", "ops:admin")
	require.Equal(t, 0, res.code, res.stderr)
	second := strings.TrimSpace(res.stdout)
	res = idemctl(ctx, t, dbURL, "token", "create", "--tenant", "beta", "--user", "ops", "--scopes", "ops:admin")
	require.Equal(t, 0, res.code, res.stderr)

	// list: JSON lines of the tenant's tokens, without hash or secret.
	res = idemctl(ctx, t, dbURL, "token", "list", "--tenant", "acme")
	require.Equal(t, 0, res.code, res.stderr)
	require.NotContains(t, res.stdout, secret)
	require.NotContains(t, res.stdout, second)
	lines := jsonLines(t, res.stdout)
	require.Len(t, lines, 2)
	for _, l := range lines {
		require.ElementsMatch(t, tokenViewKeys, keys(l))
		require.Equal(t, "acme", l["tenant"])
		require.Nil(t, l["revoked_at"])
	}
	require.Equal(t, id, lines[0]["id"])
	require.Equal(t, []any{"billing:refund", "operations:read"}, lines[0]["scopes"])
	require.NotNil(t, lines[0]["expires_at"])
	require.Nil(t, lines[1]["expires_at"])

	// revoke: prints the revoked token.
	res = idemctl(ctx, t, dbURL, "token", "revoke", id)
	require.Equal(t, 0, res.code, res.stderr)
	revoked := jsonLines(t, res.stdout)
	require.Len(t, revoked, 1)
	require.ElementsMatch(t, tokenViewKeys, keys(revoked[0]))
	require.Equal(t, id, revoked[0]["id"])
	require.NotNil(t, revoked[0]["revoked_at"])

	res = idemctl(ctx, t, dbURL, "token", "list", "--tenant", "acme")
	require.Equal(t, 0, res.code, res.stderr)
	lines = jsonLines(t, res.stdout)
	require.Equal(t, revoked[0]["revoked_at"], lines[0]["revoked_at"])
	require.Nil(t, lines[1]["revoked_at"])

	_, err = tenancy.NewAuthenticator(tokens, -1, nil).Authenticate(ctx, secret)
	require.ErrorIs(t, err, tenancy.ErrUnauthenticated)

	// revoke, tenant-scoped: another tenant's token is not found.
	beta := jsonLines(t, idemctl(ctx, t, dbURL, "token", "list", "--tenant", "beta").stdout)
	require.Len(t, beta, 1)
	res = idemctl(ctx, t, dbURL, "token", "revoke", "--tenant", "acme", beta[0]["id"].(string))
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, "no token")

	res = idemctl(ctx, t, dbURL, "token", "revoke", "tok_0000000000000000")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `no token "tok_0000000000000000"`)
	require.Empty(t, res.stdout)

	// An empty listing prints nothing.
	res = idemctl(ctx, t, dbURL, "token", "list", "--tenant", "gamma")
	require.Equal(t, 0, res.code, res.stderr)
	require.Empty(t, res.stdout)
}

func TestTokenCommandsUsage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL, pool := pgtest.NewDB(t)

	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"UnknownScope", []string{"token", "create", "--tenant", "acme", "--user", "u", "--scopes", "billing:refund,root"}, `--scopes: unknown scope "root"`},
		{"NoScopes", []string{"token", "create", "--tenant", "acme", "--user", "u"}, "--scopes: must list at least one scope"},
		{"RepeatedScope", []string{"token", "create", "--tenant", "acme", "--user", "u", "--scopes", "ops:admin,ops:admin"}, "--scopes: scope \"ops:admin\" is listed twice"},
		{"NoTenant", []string{"token", "create", "--user", "u", "--scopes", "ops:admin"}, "--tenant is required"},
		{"BadTenant", []string{"token", "create", "--tenant", " a", "--user", "u", "--scopes", "ops:admin"}, "--tenant:"},
		{"NoUser", []string{"token", "create", "--tenant", "acme", "--scopes", "ops:admin"}, "--user is required"},
		{"NegativeExpiry", []string{"token", "create", "--tenant", "acme", "--user", "u", "--scopes", "ops:admin", "--expires-in", "-1h"}, "--expires-in: must be positive"},
		{"BadExpiry", []string{"token", "create", "--tenant", "acme", "--user", "u", "--scopes", "ops:admin", "--expires-in", "a month"}, "expires-in"},
		{"ListNoTenant", []string{"token", "list"}, "--tenant is required"},
		// The operator tenant opens River UI over every tenant: it is not an
		// ordinary tenant to create tokens for.
		{"OperatorTenantAsOrdinary", []string{"token", "create", "--tenant", "ops", "--user", "u", "--scopes", "ops:admin"}, "is the operator tenant"},
		{"OperatorAndTenant", []string{"token", "create", "--operator", "--tenant", "acme", "--user", "u", "--scopes", "ops:admin"}, "exclude each other"},
		{"RevokeNoID", []string{"token", "revoke"}, `expected "<id>"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := idemctl(ctx, t, dbURL, tt.args...)
			require.NotEqual(t, exitOK, res.code)
			require.Contains(t, res.stderr, tt.wantErr)
			require.Empty(t, res.stdout)
		})
	}
	t.Cleanup(func() {
		for _, tenant := range []string{"acme", "ops"} {
			n, err := pgengine.New(pool).TokenList(context.Background(), &store.TokenListParams{TenantID: tenant})
			require.NoError(t, err)
			require.Empty(t, n, "no rejected command created a token")
		}
	})
}

// Operator tokens are made only with --operator, and seed files cannot
// carry them.
func TestOperatorTokens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dbURL, pool := pgtest.NewDB(t)
	res := idemctl(ctx, t, dbURL, "token", "create", "--operator", "--user", "sre", "--scopes", "ops:admin")
	require.Equal(t, exitOK, res.code, res.stderr)
	toks, err := pgengine.New(pool).TokenList(ctx, &store.TokenListParams{TenantID: config.DefaultOperatorTenant})
	require.NoError(t, err)
	require.Len(t, toks, 1)
	require.Equal(t, "sre", toks[0].UserID)

	seed := filepath.Join(t.TempDir(), "seed.json")
	require.NoError(t, os.WriteFile(seed, []byte(`{"tokens":[{"tenant":"ops","user":"x","scopes":["ops:admin"]}]}`), 0o600))
	res = idemctl(ctx, t, dbURL, "seed", "--file", seed)
	require.NotEqual(t, exitOK, res.code)
	require.Contains(t, res.stderr, "is the operator tenant")
	toks, err = pgengine.New(pool).TokenList(ctx, &store.TokenListParams{TenantID: config.DefaultOperatorTenant})
	require.NoError(t, err)
	require.Len(t, toks, 1, "the seed wrote nothing")
}
