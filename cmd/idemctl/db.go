package main

import (
	"context"
	"fmt"
	"time"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/store"
)

// database is DATABASE_URL's engine, open. Every command works on both
// engines.
type database struct {
	drv engine.Driver
}

// data is what the commands read and write besides River.
type data interface {
	core.Store
	store.Tokens
	store.Seeder
}

// openDatabase opens DATABASE_URL: unset or sqlite:PATH opens (creating)
// the SQLite file, as the embedded quickstart does.
func (a *app) openDatabase(ctx context.Context) (*database, error) {
	return a.open(ctx, false)
}

// openExistingDatabase is openDatabase for the commands that read and
// change operations (op, prune): a SQLite file that does not exist is an
// error, not created.
func (a *app) openExistingDatabase(ctx context.Context) (*database, error) {
	return a.open(ctx, true)
}

// open opens the driver, at most DefaultCLIPoolMaxConns connections in all
// (migrate's lock included) or DATABASE_URL's pool_max_conns, and checks
// that the database answers.
func (a *app) open(ctx context.Context, existing bool) (*database, error) {
	drv, err := drivers.Open(ctx, a.cfg, &drivers.Options{MaxConns: config.DefaultCLIPoolMaxConns, Existing: existing, Logger: a.logger})
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := drv.Ping(pingCtx); err != nil {
		drv.Close()
		return nil, fmt.Errorf("connect to %s (%s): %w", config.EnvDatabaseURL, config.RedactDatabaseURL(a.cfg.DatabaseURL), err)
	}
	return &database{drv: drv}, nil
}

func (d *database) Close() { d.drv.Close() }

func (d *database) data() data { return d.drv.Store() }

// ops assembles the gate with an insert-only River client, as the api
// does, for op redrive and prune.
func (d *database) ops(a *app) (*idemgateapp.Ops, error) {
	return idemgateapp.NewOps(a.cfg, d.drv, a.logger)
}

// migrated is what migrate applied: River's and idemgate's migrations,
// then the built-in tools' (in their own version table).
type migrated struct {
	*engine.Result
	BuiltinsApplied int `json:"builtins_applied"`
}

func (d *database) migrate(ctx context.Context, a *app) (*migrated, error) {
	var (
		res = &migrated{}
		err error
	)
	if res.Result, err = d.drv.Migrate(ctx, a.logger); err != nil {
		return nil, err
	}
	res.BuiltinsApplied, err = idemgateapp.MigrateBuiltins(ctx, d.drv, a.logger)
	return res, err
}

// tenantKnown reports whether tenant has an operation, a token or approval
// settings: a tenant with none of them is most likely a typo.
func (d *database) tenantKnown(ctx context.Context, tenant string) (bool, error) {
	claims, err := d.data().ClaimList(ctx, &core.ClaimListParams{TenantID: tenant, Limit: 1})
	if err != nil || len(claims) > 0 {
		return len(claims) > 0, err
	}
	tokens, err := d.data().TokenList(ctx, &store.TokenListParams{TenantID: tenant})
	if err != nil || len(tokens) > 0 {
		return len(tokens) > 0, err
	}
	mailTo, err := d.drv.Store().TenantApprovalMailTo(ctx, tenant)
	return len(mailTo) > 0, err
}
