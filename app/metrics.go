package app

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// claimsCollector reports idemgate_claims{status} from the database at
// scrape time: one GROUP BY over the claims table, bounded by a timeout.
type claimsCollector struct {
	pool *pgxpool.Pool
	desc *prometheus.Desc
}

func newClaimsCollector(pool *pgxpool.Pool) *claimsCollector {
	return &claimsCollector{pool: pool, desc: prometheus.NewDesc("idemgate_claims",
		"Idempotency claims by status, read from the database at scrape time.", []string{"status"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *claimsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *claimsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts := map[string]float64{"queued": 0, "running": 0, "succeeded": 0, "failed": 0}
	rows, err := c.pool.Query(ctx, `SELECT status, count(*) FROM idempotency_claims GROUP BY status`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int64
		)
		if err := rows.Scan(&status, &n); err != nil {
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		counts[status] = float64(n)
	}
	if err := rows.Err(); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, status)
	}
}
