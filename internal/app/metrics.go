package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/core"
)

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

// Describe implements prometheus.Collector.
func (c *claimsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *claimsCollector) Collect(ch chan<- prometheus.Metric) {
	got, err := c.snapshot()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, status := range []string{"awaiting_approval", "queued", "running", "succeeded", "failed"} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(got[status]), status)
	}
}

// approvalEvents name the gate's approval transitions in
// idemgate_approvals_total.
var approvalEvents = map[core.Event]string{
	core.EventAwait:          "requested",
	core.EventAwaitTakeOver:  "requested",
	core.EventApprove:        "approved",
	core.EventDeny:           "denied",
	core.EventApprovalExpire: "expired",
}

// newApprovalCounter registers idemgate_approvals_total{event} (requested,
// approved, denied, expired: the approval transitions this process
// committed) and returns the gate's OnTransition that counts them, then
// calls next (when set).
func newApprovalCounter(reg prometheus.Registerer, next func(core.Event)) (func(core.Event), error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgate_approvals_total",
		Help: "Approvals committed by this process: requested (a call awaits a person), approved, denied, expired (the window ended).",
	}, []string{"event"})
	for _, name := range []string{"requested", "approved", "denied", "expired"} {
		c.WithLabelValues(name) // every series from the start
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return func(e core.Event) {
		if name, ok := approvalEvents[e]; ok {
			c.WithLabelValues(name).Inc()
		}
		if next != nil {
			next(e)
		}
	}, nil
}
