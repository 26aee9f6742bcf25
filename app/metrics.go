package app

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// claimCountsSQL is the same on both engines.
const claimCountsSQL = `SELECT status, count(*) FROM idempotency_claims GROUP BY status`

// claimsCollector reports idemgate_claims{status} from the database at
// scrape time: one GROUP BY over the claims table, bounded by a timeout.
type claimsCollector struct {
	count func(ctx context.Context) (map[string]int64, error)
	desc  *prometheus.Desc
}

func newClaimsCollector(count func(ctx context.Context) (map[string]int64, error)) *claimsCollector {
	return &claimsCollector{count: count, desc: prometheus.NewDesc("idemgate_claims",
		"Idempotency claims by status, read from the database at scrape time.", []string{"status"}, nil)}
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, status := range []string{"queued", "running", "succeeded", "failed"} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(got[status]), status)
	}
}
