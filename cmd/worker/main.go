// Command worker runs idemgate's River workers: every job re-enters the gate
// before Stripe, the ledger, seats or the mailer. Configuration: see package
// config. Wiring only; the parts live in app and jobs.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/app"
	"github.com/idemgate/idemgate/config"
)

// stopTimeout bounds how long running jobs may take to finish on SIGTERM.
const stopTimeout = 30 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := config.Load(os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cfg.Driver() != config.DriverPostgres {
		return errors.New("DATABASE_URL: set a postgres:// URL; the embedded SQLite default is not built yet")
	}
	pool, err := app.OpenPostgres(ctx, cfg.DatabaseURL, int32(app.DefaultMaxWorkers+10))
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := app.NewWorker(cfg, pool, logger, nil)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.WorkerAddr)
	if err != nil {
		return fmt.Errorf("IDEMGATE_WORKER_ADDR: %w", err)
	}
	srv := &http.Server{Handler: w.Handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	logger.Info("worker starting", "metrics", "http://"+ln.Addr().String()+"/metrics", "config", cfg)
	return w.Run(ctx, stopTimeout)
}
