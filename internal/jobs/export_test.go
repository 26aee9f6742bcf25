package jobs

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/core"
)

// Run runs one job as River's worker does, for the external tests (which
// use pgengine, itself importing this package).
func (r *Runner) Run(ctx context.Context, id, attempt, maxAttempts int, ref ClaimRef, hooks core.JobHooks) error {
	return r.run(ctx, jobInfo{id: id, attempt: attempt, maxAttempts: maxAttempts, ref: ref}, hooks)
}

// JobDuration and Downstream are the series the external tests check.
func (m *Metrics) JobDuration() *prometheus.HistogramVec { return m.jobDuration }
func (m *Metrics) Downstream() *prometheus.CounterVec    { return m.downstream }

// MaxDeleteMany is maxDeleteMany, for enqueuer_test.go.
const MaxDeleteMany = maxDeleteMany

// HoldGroups makes r run one group at a time and tells formed the size of
// each group it takes, for tests that queue jobs behind a group.
func (r *Runner) HoldGroups(formed func(n int)) {
	r.txGroups.Runners = 1
	r.txGroups.Formed = formed
}

// QueuedForGroup returns how many jobs wait for the next group.
func (r *Runner) QueuedForGroup() int { return r.txGroups.Queued() }

// GroupSize is the worker's group size histogram.
func (m *Metrics) GroupSize() prometheus.Histogram { return m.groupSize }
