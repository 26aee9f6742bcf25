// Command api serves idemgate's MCP endpoint (/mcp, Streamable HTTP,
// stateless), the REST twin (/v1/...), /healthz, /readyz and /metrics.
// Configuration: see package config. Wiring only; the parts live in app and
// api.
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

	if cfg.Driver() != "postgres" {
		return errors.New("DATABASE_URL: set a postgres:// URL; the embedded SQLite default is not built yet")
	}
	pool, err := app.OpenPostgres(ctx, cfg.DatabaseURL, app.DefaultMaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	a, err := app.NewAPI(cfg, pool, logger)
	if err != nil {
		return err
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	go a.Run(runCtx)

	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("IDEMGATE_API_ADDR: %w", err)
	}
	srv := &http.Server{
		Handler:           a.Handler,
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
