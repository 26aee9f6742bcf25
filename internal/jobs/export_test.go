package jobs

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/gate"
)

// Run runs one job as River's worker does, for the external tests (which
// use pgengine, itself importing this package).
func (r *Runner) Run(ctx context.Context, id, attempt, maxAttempts int, ref ClaimRef, hooks gate.JobHooks) error {
	return r.run(ctx, jobInfo{id: id, attempt: attempt, maxAttempts: maxAttempts, ref: ref}, hooks)
}

// JobDuration and Downstream are the series the external tests check.
func (m *Metrics) JobDuration() *prometheus.HistogramVec { return m.jobDuration }
func (m *Metrics) Downstream() *prometheus.CounterVec    { return m.downstream }

// MaxDeleteMany is maxDeleteMany, for enqueuer_test.go.
const MaxDeleteMany = maxDeleteMany
