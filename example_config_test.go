package idemgate_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/gate"
)

// Write the configuration in code, from the defaults, without flags or
// environment variables; Open checks it and names each bad field.
func ExampleDefaultConfig() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemgate-config-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	cfg := idemgate.DefaultConfig()
	cfg.DatabaseURL = "sqlite:" + filepath.Join(dir, "example.db")
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Wait = 5 * time.Second
	cfg.RateLimit = 0 // off
	cfg.LogLevel = slog.LevelWarn
	fmt.Println(cfg.InflightTimeout, cfg.OperatorTenant)

	cfg.ReaperInterval = time.Hour // longer than the 2m lease
	_, err = idemgate.Open(ctx, cfg, gate.NewRegistry(), nil)
	fmt.Println(err != nil)

	cfg.ReaperInterval = 30 * time.Second
	svc, err := idemgate.Open(ctx, cfg, gate.NewRegistry(), nil)
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	fmt.Println(svc.Migrate(ctx))
	// Output:
	// 2m0s ops
	// true
	// <nil>
}

// Run idemgate on the team's own Postgres pool (it opens none of its
// own, and Close leaves the pool open), and serve the health routes on an
// internal listener apart from the api.
func ExampleOptions_pool() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	cfg := idemgate.DefaultConfig()
	cfg.Secret = os.Getenv("IDEMGATE_SECRET")
	svc, err := idemgate.Open(ctx, cfg, gate.NewRegistry(), &idemgate.Options{Pool: pool, HealthApart: true})
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		panic(err)
	}
	go func() { _ = http.ListenAndServe("127.0.0.1:9090", svc.HealthHandler()) }()
	go func() { _ = svc.Run(ctx) }()
	_ = http.ListenAndServe("127.0.0.1:8080", svc) // /mcp, /v1, /ops
}
