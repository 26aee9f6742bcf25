package app

import (
	"errors"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine"
)

// TeamJobs are a deployment's River workers and periodic jobs for a River
// client of a team's own on the same database (the public jobs.Configure):
// the claim jobs' runner, the reaper's, the pruner and the approval notices,
// and a gate whose River client of idemgate's own only inserts (the
// reaper's fresh jobs) and cancels. Nothing of idemgate's worker process
// runs: the team's client fetches, and its leader runs the periodic jobs.
type TeamJobs struct {
	parts *workerParts
}

// NewTeamJobs assembles the workers on drv (Postgres: not
// drv.EmbeddedWorker). The driver is the caller's.
func NewTeamJobs(cfg *config.Config, drv engine.Driver, logger *slog.Logger, opts *WorkerOptions) (*TeamJobs, error) {
	if drv.EmbeddedWorker() {
		return nil, errors.New("DATABASE_URL: on " + string(drv.Engine()) + " idemgate's jobs run inside the api process, not in a River client of one's own")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if opts == nil {
		opts = &WorkerOptions{}
	}
	p, err := newWorkerParts(cfg, drv, logger, opts)
	if err != nil {
		return nil, err
	}
	if err := p.client.Open(&river.Config{Logger: p.logger, FetchCooldown: DefaultFetchCooldown}); err != nil {
		return nil, err
	}
	return &TeamJobs{parts: p}, nil
}

// AddWorkers registers a worker for every kind of idemgate's jobs in
// workers. A kind workers already has is an error.
func (t *TeamJobs) AddWorkers(workers *river.Workers) error { return t.parts.addWorkers(workers) }
