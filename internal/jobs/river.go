package jobs

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
	"riverqueue.com/riverui/uiendpoints"

	riverui "riverqueue.com/riverui"

	"github.com/idemgate/idemgate/internal/core"
)

// DriverTx is a gate transaction that River's driver, whose transactions
// are TTx, can join: each engine's Tx is one for its River driver.
type DriverTx[TTx any] interface {
	// DriverTx returns the engine's transaction.
	DriverTx() TTx
}

// driverTx returns the River driver's transaction of a gate transaction.
func driverTx[TTx any](tx core.Tx) (TTx, error) {
	dt, ok := tx.(DriverTx[TTx])
	if !ok {
		var zero TTx
		return zero, fmt.Errorf("jobs: store transaction %T is not one of the River driver's engine", tx)
	}
	return dt.DriverTx(), nil
}

// River is one River client on River driver TDriver with the gate's job
// operations in the engine's transactions (an Enqueuer and a Control): an
// jobs.Client. The engine drivers build theirs with NewRiver.
type River[TDriver riverdriver.Driver[TTx], TTx any] struct {
	Enqueuer[TTx]
	Control[TTx]
	driver TDriver
	client *river.Client[TTx]
}

// NewRiver returns a River on driver, not yet open (Open). unavailable
// tells a database outage from other insert errors (Enqueuer.Unavailable).
func NewRiver[TDriver riverdriver.Driver[TTx], TTx any](driver TDriver, unavailable func(error) bool) *River[TDriver, TTx] {
	return &River[TDriver, TTx]{driver: driver, Enqueuer: Enqueuer[TTx]{Unavailable: unavailable}}
}

// AddWorkers registers a River worker for every mutating tool of the
// runner's registry (see AddWorkers).
func (r *River[TDriver, TTx]) AddWorkers(workers *river.Workers, runner *Runner) error {
	return AddWorkers[TDriver](workers, runner)
}

// Open creates the River client with cfg. Call it once, after AddWorkers
// and before any other method.
func (r *River[TDriver, TTx]) Open(cfg *river.Config) error {
	client, err := river.NewClient(r.driver, cfg)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	r.client, r.Enqueuer.Client, r.Control.Client = client, client, client
	return nil
}

// Insert inserts a job outside any transaction.
func (r *River[TDriver, TTx]) Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	return r.client.Insert(ctx, args, opts)
}

// Start starts the client's queues, workers and maintenance.
func (r *River[TDriver, TTx]) Start(ctx context.Context) error { return r.client.Start(ctx) }

// Stop stops fetching and waits for running jobs until ctx ends.
func (r *River[TDriver, TTx]) Stop(ctx context.Context) error { return r.client.Stop(ctx) }

// UI returns River UI's endpoints on the client.
func (r *River[TDriver, TTx]) UI() uiendpoints.Bundle { return riverui.NewEndpoints(r.client, nil) }

// Client returns the River client itself (nil before Open), for tests
// that drive River directly.
func (r *River[TDriver, TTx]) Client() *river.Client[TTx] { return r.client }
