// Command coupon is a team's own service built on idemgate: one tool,
// issue_coupon, whose effect inserts one row per intent into the service's
// own table, plus the built-in get_operation.
//
//	go run ./examples/coupon            # SQLite file idemgate.db
//	DATABASE_URL=postgres://… go run ./examples/coupon
//
// It migrates (idemgate's tables and its own), prints a demo token with
// scopes coupons:issue and operations:read, and serves the api and the
// worker in one process on IDEMGATE_API_ADDR (default 127.0.0.1:8080).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgate/idemgate"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "coupon:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := idemgate.LoadConfig(os.Args[1:])
	if errors.Is(err, idemgate.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	reg := gate.NewRegistry()
	if err := reg.Add(IssueCoupon); err != nil {
		return err
	}
	svc, err := idemgate.Open(ctx, cfg, reg, &idemgate.Options{Migrations: Migrations})
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	token, err := svc.CreateToken(ctx, "demo", "demo-agent", IssueCoupon.Scope, domain.ScopeOperationsRead)
	if err != nil {
		return err
	}
	fmt.Println("token:", token)
	return svc.RunAll(ctx)
}
