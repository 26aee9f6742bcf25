package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// setupRateEnv runs the api with default options on a configuration
// loaded from env, as cmd/api loads it: IDEMGATE_RATE_LIMIT and
// IDEMGATE_RATE_BURST reach the api through config, not APIOptions.
func setupRateEnv(t *testing.T, env map[string]string) *testBundle {
	t.Helper()
	ctx := context.Background()
	dbURL, pool := pgtest.NewDB(t)
	_, err := pgengine.New(pool).Seed(ctx, seedFile())
	require.NoError(t, err)
	env[config.EnvDatabaseURL] = dbURL
	env[config.EnvWait] = "0"
	env[config.EnvDuplicateWindow] = "0" // the same refund under many keys, on purpose
	cfg, err := config.Load(nil, func(k string) string { return env[k] })
	require.NoError(t, err)
	a, err := app.NewAPIWithOptions(cfg, pgengine.NewDriver(pool, cfg.Pooled()), nil, nil)
	require.NoError(t, err)
	return &testBundle{url: serveAPI(ctx, t, a), pool: pool, api: a}
}

// TestRateLimitSettingZeroTurnsItOff: with IDEMGATE_RATE_LIMIT=0 a burst
// of 1, which would refuse the second call if the limit were on, refuses
// none.
func TestRateLimitSettingZeroTurnsItOff(t *testing.T) {
	t.Parallel()
	b := setupRateEnv(t, map[string]string{config.EnvRateLimit: "0", config.EnvRateBurst: "1"})
	acme := connect(t, b.url, tokenAcme)
	for i := range 5 {
		res, isErr := callTool(t, acme, "refund_order", refund(fmt.Sprintf("rate-off-%06d", i), 100))
		require.False(t, isErr, "call %d: %+v", i, res.Error)
		require.Equal(t, vocab.OutcomeAccepted, res.Outcome)
	}
	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, []byte(`{"order_id":"ord_9f2","amount_cents":100}`), false,
		"Idempotency-Key", "rate-off-000005")
	require.Equal(t, http.StatusAccepted, r.status, r.raw)
	require.Zero(t, metricValue(t, b.url, `idemgate_rate_limited_total{tool="refund_order"}`))
}

// TestRateLimitSettingRefuses: IDEMGATE_RATE_LIMIT=0.01 (one call per
// 100 s: nothing refills during the test) with IDEMGATE_RATE_BURST=2 lets
// two calls through and refuses the third with rate_limited, over MCP and
// REST alike.
func TestRateLimitSettingRefuses(t *testing.T) {
	t.Parallel()
	b := setupRateEnv(t, map[string]string{config.EnvRateLimit: "0.01", config.EnvRateBurst: "2"})
	acme := connect(t, b.url, tokenAcme)
	for i := range 2 {
		res, isErr := callTool(t, acme, "refund_order", refund(fmt.Sprintf("rate-on-%06d", i), 100))
		require.False(t, isErr, "call %d: %+v", i, res.Error)
	}
	res, isErr := callTool(t, acme, "refund_order", refund("rate-on-000002", 100))
	require.True(t, isErr)
	require.Equal(t, vocab.CodeRateLimited, res.Error.Code)
	require.Positive(t, res.RetryAfterMS)

	r := doHTTP(t, http.MethodPost, b.url+"/v1/tools/refund_order", tokenAcme, []byte(`{"order_id":"ord_9f2","amount_cents":100}`), false,
		"Idempotency-Key", "rate-on-000003")
	require.Equal(t, http.StatusTooManyRequests, r.status, r.raw)
	require.Equal(t, "rate_limited", r.code())
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	require.Positive(t, retry)
	require.Equal(t, 2.0, metricValue(t, b.url, `idemgate_rate_limited_total{tool="refund_order"}`))
}
