// Command api serves idemgate's MCP endpoint (/mcp, Streamable HTTP,
// stateless), the REST twin (/v1/...), /healthz, /readyz and /metrics.
// Configuration: see package config. Wiring only; the parts live in app and
// api.
package main

import (
	"context"
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
	"github.com/idemgate/idemgate/gate/gatesqlite"
	"github.com/idemgate/idemgate/migrations"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
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

	var (
		handler    http.Handler
		background func(ctx context.Context) error
	)
	switch cfg.Driver() {
	case config.DriverSQLite:
		// One process, one writer: the api runs the worker itself.
		db, err := gatesqlite.Open(cfg.SQLitePath())
		if err != nil {
			return fmt.Errorf("DATABASE_URL: %w", err)
		}
		defer db.Close()
		if _, err := migrations.MigrateSQLite(ctx, db, logger); err != nil {
			return fmt.Errorf("migrate %s: %w", cfg.SQLitePath(), err)
		}
		e, err := app.NewEmbedded(cfg, db, logger, nil, nil)
		if err != nil {
			return err
		}
		handler = e.Handler
		background = func(ctx context.Context) error { return e.Run(ctx, 30*time.Second) }
		logger.Info("embedded mode: SQLite with the worker in this process", "path", cfg.SQLitePath())
	default:
		pool, err := app.OpenPostgres(ctx, cfg.DatabaseURL, app.DefaultMaxConns)
		if err != nil {
			return err
		}
		defer pool.Close()
		a, err := app.NewAPI(cfg, pool, logger)
		if err != nil {
			return err
		}
		handler = a.Handler
		background = func(ctx context.Context) error { a.Run(ctx); return nil }
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	backgroundDone := make(chan error, 1)
	go func() { backgroundDone <- background(runCtx) }()
	defer func() {
		cancelRun()
		if err := <-backgroundDone; err != nil {
			logger.Error("background work stopped with an error", "error", err)
		}
	}()

	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("IDEMGATE_API_ADDR: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.Wait + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	logger.Info("api listening", "addr", ln.Addr().String(), "mcp", "http://"+ln.Addr().String()+"/mcp", "config", cfg)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("api shutting down: draining requests")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
