package jobs_test

import (
	"fmt"

	"github.com/riverqueue/river"

	"github.com/idemgate/idemgate/jobs"
)

// source stands for the *idemgate.Service, which is a jobs.Source.
type source struct{}

func (source) AddWorkers(*river.Workers) error    { return nil }
func (source) PeriodicJobs() []*river.PeriodicJob { return nil }

func Example() {
	fmt.Println(jobs.Queue, jobs.MaintenanceQueue, jobs.Kind("refund_order"))

	// A team's River configuration, on River's default queue; Configure
	// adds idemgate's queues, workers and periodic jobs.
	cfg := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}}
	if err := jobs.Configure(cfg, source{}); err != nil {
		panic(err)
	}
	fmt.Println(len(cfg.Queues), cfg.Queues[jobs.Queue].MaxWorkers, cfg.Queues[jobs.MaintenanceQueue].MaxWorkers)
	// Output:
	// idemgate idemgate_maintenance idemgate.refund_order
	// 3 50 2
}
