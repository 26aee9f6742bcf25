package jobs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/gate"
)

// Metrics are the worker's Prometheus series.
type Metrics struct {
	downstream  *prometheus.CounterVec
	jobDuration *prometheus.HistogramVec
	reaper      *prometheus.CounterVec
	redrives    prometheus.Counter
}

// NewMetrics registers the worker's series with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		downstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_downstream_calls_total",
			Help: "Downstream calls by provider (stripe, smtp, ledger) and result (ok, definitive, transient).",
		}, []string{"provider", "result"}),
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idemgate_job_duration_seconds",
			Help:    "Claim job run time by tool and result (succeeded, failed, retry, no_effect, snoozed).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"tool", "result"}),
		reaper: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_reaper_claims_total",
			Help: "Claims handled by the reaper, by action (reclaimed, requeued, gave_up, orphaned).",
		}, []string{"action"}),
		redrives: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_redrives_total",
			Help: "Failed operations re-driven from River UI (a retried job).",
		}),
	}
	for _, c := range []prometheus.Collector{m.downstream, m.jobDuration, m.reaper, m.redrives} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// call counts one effect by its provider (the tool declaration's
// Provider) and result.
func (m *Metrics) call(provider, result string) {
	if m != nil {
		m.downstream.WithLabelValues(provider, result).Inc()
	}
}

func (m *Metrics) job(tool, result string, d time.Duration) {
	if m != nil {
		m.jobDuration.WithLabelValues(tool, result).Observe(d.Seconds())
	}
}

func (m *Metrics) redrive() {
	if m != nil {
		m.redrives.Inc()
	}
}

// Reaped records one reaper pass.
func (m *Metrics) Reaped(r *gate.ReapResult) {
	if m == nil || r == nil {
		return
	}
	m.reaper.WithLabelValues("reclaimed").Add(float64(r.Reclaimed))
	m.reaper.WithLabelValues("gave_up").Add(float64(r.GaveUp))
	m.reaper.WithLabelValues("orphaned").Add(float64(r.Orphaned))
	m.reaper.WithLabelValues("requeued").Add(float64(r.Requeued))
}
