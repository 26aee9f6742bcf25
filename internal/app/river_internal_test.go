package app

import (
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/jobs"
)

// TestRiverConfigShared: on a database whose River a team's client works
// too, idemgate's worker never leads and schedules no periodic job (its
// reaper and pruner run in process); on its own, it leads like any client.
// Either way it fetches idemgate's queues only.
func TestRiverConfigShared(t *testing.T) {
	cfg := config.Defaults()
	own := riverConfig(cfg, river.NewWorkers(), nil, &WorkerOptions{}, slog.New(slog.DiscardHandler))
	require.False(t, own.LeaderElectionDisabled)
	require.Len(t, own.PeriodicJobs, 2, "the reaper and the pruner")

	cfg.River = config.RiverShared
	shared := riverConfig(cfg, river.NewWorkers(), nil, &WorkerOptions{}, slog.New(slog.DiscardHandler))
	require.True(t, shared.LeaderElectionDisabled)
	require.Empty(t, shared.PeriodicJobs)
	for _, c := range []*river.Config{own, shared} {
		require.Len(t, c.Queues, 2)
		require.Contains(t, c.Queues, jobs.Queue)
		require.Contains(t, c.Queues, jobs.MaintenanceQueue)
	}
}
