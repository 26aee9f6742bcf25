package app

import (
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/drivers"
)

// MigratesAtStart reports whether the api process (cmd/api) migrates the
// database when it starts: where the engine runs the worker inside the api
// (SQLite: one process, one writer) no other process would. The driver
// says so (drivers.EmbeddedWorker); nothing is opened.
func MigratesAtStart(cfg *config.Config) bool { return drivers.EmbeddedWorker(cfg) }

// WorkerProcesses reports whether the engine runs workers as processes of
// their own (cmd/worker), rather than inside the api. Nothing is opened.
func WorkerProcesses(cfg *config.Config) bool { return !drivers.EmbeddedWorker(cfg) }
