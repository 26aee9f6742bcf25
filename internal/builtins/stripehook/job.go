package stripehook

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/jobs"
)

// PollArgs is the periodic list's River job, on idemgate's maintenance
// queue, one at a time.
type PollArgs struct{}

// Kind implements river.JobArgs.
func (PollArgs) Kind() string { return jobs.Kind("stripe_refunds_poll") }

// InsertOpts keeps one list job at a time, on the maintenance queue.
func (PollArgs) InsertOpts() river.InsertOpts { return jobs.ReaperArgs{}.InsertOpts() }

// PollWorker runs a Poller's pass.
type PollWorker struct {
	river.WorkerDefaults[PollArgs]
	Poller *Poller
}

// Work implements river.Worker: one pass.
func (w *PollWorker) Work(ctx context.Context, _ *river.Job[PollArgs]) error {
	_, err := w.Poller.Pass(ctx)
	return err
}

// PeriodicJob is the list's periodic job, every interval (default
// DefaultPollInterval), first when the leader starts.
func PeriodicJob(interval time.Duration) *river.PeriodicJob {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	return river.NewPeriodicJob(river.PeriodicInterval(interval), func() (river.JobArgs, *river.InsertOpts) {
		return PollArgs{}, nil
	}, &river.PeriodicJobOpts{RunOnStart: true})
}

// Register adds the Ingester's metrics to reg (a worker's registry, for
// the list); registering them twice is not an error.
func (in *Ingester) Register(reg prometheus.Registerer) error { return in.register(reg) }
