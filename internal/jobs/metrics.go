package jobs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/core"
)

// Metrics are the worker's Prometheus series.
type Metrics struct {
	downstream  *prometheus.CounterVec
	jobDuration *prometheus.HistogramVec
	transitions *prometheus.CounterVec
	notices     *prometheus.CounterVec
	groupSize   prometheus.Histogram
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
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_claim_transitions_total",
			Help: "Claim transitions committed by this process, by event (the gate's state machine: insert, take_over, lease, complete, apply, fail, release, reclaim, give_up, repoint, abandon, cancel, redrive, archive, forget).",
		}, []string{"event"}),
		notices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_approval_notices_total",
			Help: "Approval notice jobs by outcome (sent, no_recipients, not_awaiting, rejected, retry, gave_up).",
		}, []string{"outcome"}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idemgate_worker_group_operations",
			Help:    "In-transaction operations stored per committed group transaction (the worker's group commit): its count is the commits, its sum the operations.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
	}
	for _, o := range noticeOutcomes {
		m.notices.WithLabelValues(o)
	}
	for _, e := range core.Transitions {
		if e.Store != nil { // expire writes nothing: archive counts it
			m.transitions.WithLabelValues(string(e.Event)) // every series from the start
		}
	}
	for _, c := range []prometheus.Collector{m.downstream, m.jobDuration, m.transitions, m.notices, m.groupSize} {
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

// Transition counts a committed claim transition: the gate's
// Config.OnTransition.
func (m *Metrics) Transition(e core.Event) {
	if m != nil {
		m.transitions.WithLabelValues(string(e)).Inc()
	}
}

// notice counts an approval notice job's outcome.
func (m *Metrics) notice(outcome string) {
	if m != nil {
		m.notices.WithLabelValues(outcome).Inc()
	}
}

// group counts a committed group transaction of n operations.
func (m *Metrics) group(n int) {
	if m != nil {
		m.groupSize.Observe(float64(n))
	}
}
