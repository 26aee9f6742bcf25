package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/pgtest"
)

func TestHelpExitsZeroAndListsConfiguration(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"token", "create", "-h"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(t.Context(), args, &stdout, &stderr), stderr.String())
		require.Contains(t, stdout.String(), "--database-url")
	}
	var stdout bytes.Buffer
	require.Equal(t, exitOK, run(t.Context(), []string{"--help"}, &stdout, &bytes.Buffer{}))
	for _, env := range idemctlSettings {
		require.Contains(t, stdout.String(), "$"+env)
	}
}

// Not parallel: it sets the process's environment, which idemctl reads
// with package config like the api and the worker.
func TestConfigurationFromEnvironment(t *testing.T) {
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "idemgate.db")
	res := idemctl(t.Context(), t, dbURL, "migrate")
	require.Equal(t, exitOK, res.code, res.stderr)

	t.Setenv(config.EnvOperatorTenant, "a b")
	res = idemctl(t.Context(), t, dbURL, "token", "list", "--tenant", "acme")
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, `IDEMGATE_OPERATOR_TENANT: "a b"`)
	require.NotContains(t, res.stderr, "--operator-tenant", "idemctl has no such flag")

	t.Setenv(config.EnvOperatorTenant, "root")
	res = idemctl(t.Context(), t, dbURL, "token", "create", "--tenant", "root", "--user", "u", "--scopes", "ops:admin")
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, `"root" is the operator tenant`)
	res = idemctl(t.Context(), t, dbURL, "token", "create", "--tenant", config.DefaultOperatorTenant, "--user", "u", "--scopes", "ops:admin")
	require.Equal(t, exitOK, res.code, res.stderr)

	// --database-url overrides DATABASE_URL, which is checked like the api's.
	t.Setenv(config.EnvDatabaseURL, "mysql://db/x")
	res = idemctl(t.Context(), t, dbURL, "token", "list", "--tenant", "acme")
	require.Equal(t, exitOK, res.code, res.stderr)
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, run(t.Context(), []string{"token", "list", "--tenant", "acme"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `DATABASE_URL (--database-url): "mysql://db/x"`)
}

// Not parallel: it sets the process's environment. Migrations take a
// session-level advisory lock, which a transaction pooler cannot hold:
// idemctl refuses to migrate through one, and says what to do instead.
func TestMigrateRefusesATransactionPooler(t *testing.T) {
	dbURL, _ := pgtest.NewDB(t)
	t.Setenv(config.EnvDBPooler, "transaction")
	res := idemctl(t.Context(), t, dbURL, "migrate")
	require.NotEqual(t, exitOK, res.code)
	require.Contains(t, res.stderr, config.EnvDBPooler+"=transaction: migrations hold a session-level advisory lock")

	t.Setenv(config.EnvDBPooler, "none")
	res = idemctl(t.Context(), t, dbURL, "migrate")
	require.Equal(t, exitOK, res.code, "the same database, directly: %s", res.stderr)
}
