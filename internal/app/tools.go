package app

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/idemgate/idemgate/internal/toolspec"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/domain/refunds"
	"github.com/idemgate/idemgate/internal/domain/resetmail"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/tool"
	"github.com/jackc/pgx/v5/pgxpool"
)

// toolData is the store the built-in tools run their reads on (StoreDB).
type toolData = gate.Store

// StoreDB is the built-in tools' tools.DB on a gate store: each call a
// transaction of the store's (gate.Store.Begin), committed when fn
// succeeds. Whatever the engine, the tools see a tool.Tx.
func StoreDB(st gate.Store) tools.DB {
	return func(ctx context.Context, fn func(tx tool.Tx) error) error {
		gtx, err := st.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = gtx.Rollback(ctx) }()
		tx, err := toolspec.WrapTx(gtx)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		return gtx.Commit(ctx)
	}
}

// BuiltinTools returns a registry of the built-in tools (refund_order,
// apply_credit, reset_seat, send_password_reset, get_order) on data, ready
// for a worker: it needs STRIPE_API_KEY and IDEMGATE_SECRET. Password-reset
// links point to cfg.ResetLinkBaseOrDefault() unless the tenant has a base
// of its own. Building it connects to nothing.
func BuiltinTools(cfg *config.Config, data toolData) (*toolspec.Registry, error) {
	if err := CheckBuiltinWorker(cfg); err != nil {
		return nil, err
	}
	return builtinTools(cfg, data, nil)
}

// BuiltinDeclarations is BuiltinTools for a process that only serves the
// api (publishes and claims, never runs an effect): a missing Stripe key or
// secret is not an error here.
func BuiltinDeclarations(cfg *config.Config, data toolData) (*toolspec.Registry, error) {
	return builtinTools(cfg, data, nil)
}

// CheckBuiltinWorker returns an error naming the setting that a worker of
// the built-in tools lacks (STRIPE_API_KEY, IDEMGATE_SECRET).
func CheckBuiltinWorker(cfg *config.Config) error {
	// Password-reset tokens derive from the secret.
	if err := cfg.RequireSecret(); err != nil {
		return err
	}
	_, err := refunds.NewClient(&refunds.Config{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase})
	return err
}

// builtinTools is BuiltinTools without the check, their Stripe and SMTP
// calls traced with tp (nil: not traced).
func builtinTools(cfg *config.Config, data toolData, tp trace.TracerProvider) (*toolspec.Registry, error) {
	var stripeClient *refunds.Client
	if cfg.StripeAPIKey != "" {
		var err error
		if stripeClient, err = refunds.NewClient(&refunds.Config{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase, TracerProvider: tp}); err != nil {
			return nil, err
		}
	}
	sender, err := resetmail.NewSender(&resetmail.SenderConfig{Addr: cfg.SMTPAddr, From: cfg.MailFrom,
		LinkBase: cfg.ResetLinkBaseOrDefault(), Timeout: 10 * time.Second, TracerProvider: tp})
	if err != nil {
		return nil, fmt.Errorf("SMTP_ADDR/MAIL_FROM/%s: %w", config.EnvResetLinkBase, err)
	}
	deps := &tools.Deps{DB: StoreDB(data), Stripe: stripeClient, Mail: sender, Secret: []byte(cfg.Secret)}
	if a, ok := data.(tools.Auditor); ok { // the engines' stores are
		deps.Audit = a
	}
	reg := tool.NewRegistry()
	if err := tools.Register(reg, deps); err != nil {
		return nil, err
	}
	return toolspec.Of(reg), nil
}

// resetTokens redeems the reset links of the built-in send_password_reset
// on st.
func resetTokens(st gate.Store) *tools.ResetTokens {
	return &tools.ResetTokens{DB: StoreDB(st)}
}

// MigrateBuiltins applies the built-in tools' migrations for drv's engine
// (tools.Migrations) after idemgate's, in their own version table
// (tools.VersionTable), and reports how many it applied.
func MigrateBuiltins(ctx context.Context, drv engine.Driver, logger *slog.Logger) (int, error) {
	return drv.MigrateLine(ctx, tools.Migrations(drv.Engine()), tools.VersionTable, logger)
}

// MigrateBuiltinsPostgres is MigrateBuiltins on a Postgres pool, for
// those that hold a pool rather than a driver (tests, the bench).
func MigrateBuiltinsPostgres(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (int, error) {
	return pgengine.MigrateLine(ctx, pool, tools.Migrations(tool.Postgres), tools.VersionTable, logger)
}

// MigrateBuiltinsSQLite is MigrateBuiltinsPostgres on SQLite.
func MigrateBuiltinsSQLite(ctx context.Context, db *sql.DB, logger *slog.Logger) (int, error) {
	return sqliteengine.MigrateLine(ctx, db, tools.Migrations(tool.SQLite), tools.VersionTable, logger)
}
