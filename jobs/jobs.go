package jobs

import (
	"errors"
	"fmt"

	"github.com/riverqueue/river"
)

// Queue is the River queue of idemgate's tool jobs and approval notices.
const Queue = "idemgate"

// MaintenanceQueue is the River queue of idemgate's reaper and pruner,
// apart from Queue so that a backlog of tool jobs never delays the reaper.
const MaintenanceQueue = "idemgate_maintenance"

// KindPrefix starts the kind of every idemgate job.
const KindPrefix = "idemgate."

// Kind is the River kind of idemgate's job name: a tool's name, or one of
// "reaper", "pruner", "approval_notice", "stripe_refunds_poll".
func Kind(name string) string { return KindPrefix + name }

// Source provides idemgate's workers and periodic jobs: the root
// package's *idemgate.Service is one.
type Source interface {
	// AddWorkers registers a worker for every idemgate job kind.
	AddWorkers(workers *river.Workers) error
	// PeriodicJobs are idemgate's periodic jobs (the reaper, the pruner;
	// with the built-in refund_order, the list of Stripe's refunds).
	PeriodicJobs() []*river.PeriodicJob
}

// The queues' workers when the team's configuration does not set them:
// those of idemgate's own worker.
const (
	queueMaxWorkers       = 50
	maintenanceMaxWorkers = 2
)

// Configure adds idemgate's queues, workers and periodic jobs to cfg, a
// team's River configuration, so that the client built from it works
// idemgate's jobs too. Queues cfg already names keep their settings;
// cfg.Workers is created when nil. Call it before river.NewClient, on a
// client whose database is the Service's (Postgres).
func Configure(cfg *river.Config, src Source) error {
	if cfg == nil || src == nil {
		return errors.New("jobs: Configure needs a river.Config and a Source")
	}
	if cfg.Workers == nil {
		cfg.Workers = river.NewWorkers()
	}
	if err := src.AddWorkers(cfg.Workers); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	if cfg.Queues == nil {
		cfg.Queues = map[string]river.QueueConfig{}
	}
	for name, max := range map[string]int{Queue: queueMaxWorkers, MaintenanceQueue: maintenanceMaxWorkers} {
		if _, ok := cfg.Queues[name]; !ok {
			cfg.Queues[name] = river.QueueConfig{MaxWorkers: max}
		}
	}
	cfg.PeriodicJobs = append(cfg.PeriodicJobs, src.PeriodicJobs()...)
	return nil
}
