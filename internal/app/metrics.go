package app

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// claimCountsSQL is the same on both engines.
const claimCountsSQL = `SELECT status, count(*) FROM idempotency_claims GROUP BY status`

// ClaimsRefresh is how often at most the claim gauges are counted: scrapes
// in between, however many, are served from memory, so an unauthenticated
// /metrics cannot make the database count the claims table at will.
const ClaimsRefresh = 5 * time.Second

// claimsCollector reports idemgate_claims{status}: one GROUP BY over the
// claims table, bounded by a timeout, at most every ClaimsRefresh.
type claimsCollector struct {
	count func(ctx context.Context) (map[string]int64, error)
	desc  *prometheus.Desc
	now   func() time.Time

	mu      sync.Mutex
	counted time.Time
	counts  map[string]int64
	err     error
}

func newClaimsCollector(count func(ctx context.Context) (map[string]int64, error)) *claimsCollector {
	return &claimsCollector{count: count, now: time.Now, desc: prometheus.NewDesc("idemgate_claims",
		"Idempotency claims by status, counted in the database at most every 5s.", []string{"status"}, nil)}
}

// snapshot returns the counts, counting again when the last count is older
// than ClaimsRefresh. Concurrent scrapes wait for one count.
func (c *claimsCollector) snapshot() (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.counted.IsZero() || now.Sub(c.counted) >= ClaimsRefresh {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c.counts, c.err = c.count(ctx)
		cancel()
		c.counted = now
	}
	return c.counts, c.err
}

// countRows is what pgx.Rows and *sql.Rows have in common here.
type countRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanCounts reads (status, count) rows.
func scanCounts(rows countRows) (map[string]int64, error) {
	out := map[string]int64{}
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			return nil, err
		}
		out[status] = n
	}
	return out, rows.Err()
}

// pgClaimCounts counts claims by status on Postgres.
func pgClaimCounts(pool *pgxpool.Pool) func(ctx context.Context) (map[string]int64, error) {
	return func(ctx context.Context) (map[string]int64, error) {
		rows, err := pool.Query(ctx, claimCountsSQL)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanCounts(rows)
	}
}

// sqlClaimCounts counts claims by status on a database/sql database.
func sqlClaimCounts(db *sql.DB) func(ctx context.Context) (map[string]int64, error) {
	return func(ctx context.Context) (map[string]int64, error) {
		rows, err := db.QueryContext(ctx, claimCountsSQL)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scanCounts(rows)
	}
}

// Describe implements prometheus.Collector.
func (c *claimsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *claimsCollector) Collect(ch chan<- prometheus.Metric) {
	got, err := c.snapshot()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, status := range []string{"queued", "running", "succeeded", "failed"} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(got[status]), status)
	}
}
