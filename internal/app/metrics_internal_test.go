package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The claim gauges are counted at most every ClaimsRefresh, however many
// scrapes arrive, concurrent ones included: /metrics is unauthenticated.
func TestClaimGaugesAreCountedAtMostEveryRefresh(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		queries int
		now     = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	)
	c := newClaimsCollector(func(context.Context) (map[string]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		queries++
		return map[string]int64{"succeeded": int64(queries)}, nil
	})
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := reg.Gather()
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, queries, "50 scrapes inside the window: one count")
	require.Equal(t, 1.0, testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		got, _ := c.snapshot()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(got["succeeded"]), "succeeded")
	})))

	mu.Lock()
	now = now.Add(ClaimsRefresh)
	mu.Unlock()
	_, err := reg.Gather()
	require.NoError(t, err)
	require.Equal(t, 2, queries, "a scrape after the window counts again")
}
