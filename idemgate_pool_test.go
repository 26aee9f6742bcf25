package idemgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/builtins"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/tools"
)

// With DATABASE_URL's pool_max_conns=4 the api, as cmd/api runs it
// (idemgate.Open and ServeAPI), holds at most 4 connections to Postgres
// while 64 calls come at once: counted by the server (pg_stat_activity of
// the test's database and the api's application_name), not by the pool.
func TestAPIHoldsAtMostPoolMaxConns(t *testing.T) {
	t.Parallel()
	const maxConns, calls = 4, 64
	ctx := t.Context()
	dbURL, seedPool := pgtest.NewDB(t)
	_, err := pgengine.New(seedPool).Seed(ctx, &store.SeedFile{
		Rows:   &tools.Seed{Orders: []tools.SeedOrder{{Tenant: "acme", OrderID: "ord_1", ChargeID: "ch_1", AmountCents: 1 << 30, Currency: "usd"}}},
		Tokens: []store.SeedToken{{Tenant: "acme", User: "bot", Scopes: []string{"billing:refund"}, Token: "idg_test_pool_bot"}},
	})
	require.NoError(t, err)

	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set(config.URLPoolMaxConns, fmt.Sprint(maxConns))
	q.Set("application_name", "idemgate-pool-test-api")
	u.RawQuery = q.Encode()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cfg := config.Defaults()
	cfg.DuplicateWindow = 0 // the same refund under many keys at once, on purpose
	cfg.DatabaseURL = u.String()
	cfg.APIAddr = addr
	cfg.Wait = 200 * time.Millisecond // waiting calls poll their claims too
	cfg.RateLimit = 0
	svc, err := idemgate.Open(ctx, idemgate.ConfigFrom(cfg), gate.NewRegistry(), &idemgate.Options{Builtins: builtins.Tools(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(svc.Close)
	runCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- svc.ServeAPI(runCtx) }()
	t.Cleanup(func() { stop(); <-served })
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, time.Minute, 20*time.Millisecond)

	// The server's count, sampled until the calls are done.
	admin := pgtest.Admin(t)
	var dbName = u.Path[1:]
	peak := 0
	sampled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var n int
			err := admin.QueryRow(context.Background(),
				"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'idemgate-pool-test-api'", dbName).Scan(&n)
			if err == nil {
				peak = max(peak, n)
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	statuses := make([]int, calls)
	for i := range calls {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"order_id": "ord_1", "amount_cents": 1})
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tools/refund_order", bytes.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer idg_test_pool_bot")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("pool-test-%04d", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	close(done)
	<-sampled
	for i, s := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, s, "call %d", i)
	}
	require.Positive(t, peak, "the sampler saw the api's connections")
	require.LessOrEqual(t, peak, maxConns, "connections of the api seen by Postgres")
	t.Logf("peak connections of the api: %d (pool_max_conns=%d, %d calls at once)", peak, maxConns, calls)
}
