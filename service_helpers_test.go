package idemgate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/pgtest"
)

// postgresDB is a fresh test database: its URL with pool_max_conns=n,
// and the test's own small pool on it.
func postgresDB(t *testing.T, n int) (string, *pgxpool.Pool) {
	t.Helper()
	u, pool := pgtest.NewDB(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "pool_max_conns=" + strconv.Itoa(n), pool
}

// runService opens a Service on dbURL with reg (args are more settings),
// migrates it and runs its background work (Service.Run) until the test
// ends; the test serves it as it likes.
func runService(t *testing.T, dbURL string, reg *gate.Registry, opts *idemgate.Options, args ...string) *idemgate.Service {
	t.Helper()
	cfg, err := idemgate.LoadConfig(append([]string{"--database-url=" + dbURL, "--log-level=warn", "--wait=10s"}, args...))
	require.NoError(t, err)
	return runConfig(t, cfg, reg, opts)
}

// runConfig is runService with a Config of the test's own.
func runConfig(t *testing.T, cfg *idemgate.Config, reg *gate.Registry, opts *idemgate.Options) *idemgate.Service {
	t.Helper()
	svc, err := idemgate.Open(t.Context(), cfg, reg, opts)
	require.NoError(t, err)
	require.NoError(t, svc.Migrate(t.Context()))
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		svc.Close()
	})
	return svc
}

// callJSON sends a JSON request with a bearer token (and an
// Idempotency-Key when key is set) and decodes the JSON answer.
func callJSON(t *testing.T, method, url, token, key, body string) (int, map[string]any) {
	t.Helper()
	// An "unavailable" answer (503: SQLite's one writer busy past the api's
	// bound on a loaded machine) is sent again, with the same key, as it
	// asks a client to; for at most a minute.
	for deadline := time.Now().Add(time.Minute); ; {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		require.NoError(t, err)
		if e, _ := m["error"].(map[string]any); resp.StatusCode != http.StatusServiceUnavailable || e["code"] != "unavailable" || time.Now().After(deadline) {
			return resp.StatusCode, m
		}
		time.Sleep(100 * time.Millisecond) // the retry's pace
	}
}
