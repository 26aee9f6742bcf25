package idemgate

import (
	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/jobs"
)

var _ jobs.Source = (*Service)(nil)

// AddWorkers registers in workers, a River client's of one's own on the
// Service's Postgres database, a worker for every kind of idemgate's jobs:
// the registry's tools, approval notices, the reaper and the pruner. With
// PeriodicJobs it makes the Service a jobs.Source (jobs.Configure). Not on
// SQLite, where the worker runs inside the api process.
func (s *Service) AddWorkers(workers *river.Workers) error {
	if err := s.checkWorker(); err != nil {
		return err
	}
	t, err := app.NewTeamJobs(s.cfg, s.drv, s.logger, &app.WorkerOptions{Tools: s.reg, TracerProvider: s.opts.TracerProvider})
	if err != nil {
		return err
	}
	return t.AddWorkers(workers)
}

// PeriodicJobs are idemgate's periodic jobs, the reaper's, the pruner's
// and, when the Service serves the built-in refund_order with a Stripe key,
// the periodic list of Stripe's refunds, for a River client of one's own
// (jobs.Configure).
func (s *Service) PeriodicJobs() []*river.PeriodicJob {
	periodic, err := app.TeamPeriodicJobs(s.cfg, s.reg, s.drv.Store(), s.logger)
	if err != nil {
		s.logger.Error("idemgate: the built-ins' periodic jobs", "error", err)
		return app.PeriodicJobs(s.cfg)
	}
	return periodic
}
