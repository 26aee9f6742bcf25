package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
)

// UsageReportArgs is the team's own River job: a report of the licenses
// and seats granted, per tenant, on River's default queue.
type UsageReportArgs struct{}

// Kind is the job's River kind.
func (UsageReportArgs) Kind() string { return "usage_report" }

// UsageReportEvery is how often the team's River client enqueues the
// report (and once when it starts leading).
const UsageReportEvery = time.Minute

// UsageReportWorker works UsageReportArgs with the team's queries on the
// team's pool, logs the report and counts its runs.
type UsageReportWorker struct {
	river.WorkerDefaults[UsageReportArgs]
	Queries *Queries
	Logger  *slog.Logger
	// Runs is how many reports were made.
	Runs atomic.Int64
}

// Work makes one report.
func (w *UsageReportWorker) Work(ctx context.Context, _ *river.Job[UsageReportArgs]) error {
	rows, err := w.Queries.CountLicensesByTenant(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		w.Logger.InfoContext(ctx, "usage report", "tenant", r.TenantID, "licenses", r.Licenses, "seats", r.Seats)
	}
	w.Runs.Add(1)
	return nil
}

// usageReportJob is the periodic job that enqueues the report.
func usageReportJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(UsageReportEvery),
		func() (river.JobArgs, *river.InsertOpts) { return UsageReportArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
