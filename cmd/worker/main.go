// Command worker runs idemgate's River workers for the built-in tools:
// every job re-enters the gate before Stripe, the ledger, seats or the
// mailer; the reaper and the pruner run beside them. Postgres only.
// Configuration: see package config. It is the public assembly (package
// idemgate) with the built-in tools registered.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/builtins"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := idemgate.LoadConfig(os.Args[1:], builtins.Tools())
	if errors.Is(err, idemgate.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	settings, err := config.Load(os.Args[1:], os.Getenv) // read again: the log level, and whether workers are processes
	if err != nil {
		return err
	}
	if !app.WorkerProcesses(settings) {
		return errors.New("DATABASE_URL: set a postgres:// URL; on the embedded SQLite default the api runs the worker")
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: settings.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	svc, err := idemgate.Open(ctx, cfg, gate.NewRegistry(), &idemgate.Options{Builtins: builtins.Tools(), Logger: logger})
	if err != nil {
		return err
	}
	defer svc.Close()
	return svc.RunWorker(ctx)
}
