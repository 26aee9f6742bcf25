// Command api serves idemgate's MCP endpoint (/mcp, Streamable HTTP,
// stateless), the REST twin (/v1/...), the operator routes (/ops),
// /healthz, /readyz and /metrics, with the built-in tools. On the embedded
// SQLite default it migrates the database and runs the worker in process.
// Configuration: see package config. It is the public assembly
// (package idemgate) with the built-in tools registered.
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
		fmt.Fprintln(os.Stderr, "api:", err)
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
	settings, err := config.Load(os.Args[1:], os.Getenv) // read again: the log level, and whether this process migrates
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: settings.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	svc, err := idemgate.Open(ctx, cfg, gate.NewRegistry(), &idemgate.Options{Builtins: builtins.Tools(), Logger: logger})
	if err != nil {
		return err
	}
	defer svc.Close()
	if app.MigratesAtStart(settings) {
		// One process, one writer: the api migrates and runs the worker.
		if err := svc.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	return svc.ServeAPI(ctx)
}
