// Package builtins assembles idemgate's built-in tools (refund_order,
// apply_credit, reset_seat, send_password_reset, get_order) on a
// deployment's store, with their Stripe and SMTP clients and their
// migrations, and hands them to the assembly (app.SetBuiltins) when Link
// is called: the public package github.com/idemgate/idemgate/builtins calls
// it, so that a service without the built-ins links neither stripe-go nor
// the mailer.
package builtins

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/builtins/resetroute"
	"github.com/idemgate/idemgate/internal/builtins/stripehook"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab/approvalmail"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
	"github.com/idemgate/idemgate/internal/vocab/resetmail"
	"github.com/idemgate/idemgate/migrations"
)

// toolData is the store the built-in tools run their reads on (StoreDB).
type toolData = core.Store

// StoreDB is the built-in tools' tools.DB on a gate store: each call a
// transaction of the store's (core.Store.Begin), committed when fn
// succeeds. Whatever the engine, the tools see a gate.Tx.
func StoreDB(st core.Store) tools.DB {
	return func(ctx context.Context, fn func(tx gate.Tx) error) error {
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

// Tools returns a registry of the built-in tools (refund_order,
// apply_credit, reset_seat, send_password_reset, get_order) on data, ready
// for a worker: it needs STRIPE_API_KEY and IDEMGATE_SECRET. Password-reset
// links point to cfg.ResetLinkBaseOrDefault() unless the tenant has a base
// of its own. Building it connects to nothing.
func Tools(cfg *config.Config, data toolData) (*toolspec.Registry, error) {
	if err := CheckWorker(cfg); err != nil {
		return nil, err
	}
	return traced(cfg, data, nil)
}

// Declarations is Tools for a process that only serves the
// api (publishes and claims, never runs an effect): a missing Stripe key or
// secret is not an error here.
func Declarations(cfg *config.Config, data toolData) (*toolspec.Registry, error) {
	return traced(cfg, data, nil)
}

// CheckWorker returns an error naming the setting that a worker of
// the built-in tools lacks (STRIPE_API_KEY, IDEMGATE_SECRET).
func CheckWorker(cfg *config.Config) error {
	// Password-reset tokens derive from the secret.
	if err := cfg.RequireSecret(); err != nil {
		return err
	}
	_, err := refunds.NewClient(&refunds.Config{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase})
	return err
}

// traced is Tools without the check, their Stripe and SMTP
// calls traced with tp (nil: not traced).
func traced(cfg *config.Config, data toolData, tp trace.TracerProvider) (*toolspec.Registry, error) {
	var stripeClient *refunds.Client
	if cfg.StripeAPIKey != "" {
		var err error
		if stripeClient, err = refunds.NewClient(&refunds.Config{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase, TracerProvider: tp}); err != nil {
			return nil, err
		}
	}
	sender, err := newSender(cfg, tp)
	if err != nil {
		return nil, err
	}
	deps := &tools.Deps{DB: StoreDB(data), Stripe: stripeClient, Mail: sender, Secret: []byte(cfg.Secret),
		DuplicateWindow: cfg.DuplicateWindow}
	if cfg.DuplicateWindow == 0 {
		deps.DuplicateWindow = -1 // IDEMGATE_DUPLICATE_WINDOW=0: off
	}
	if a, ok := data.(tools.Auditor); ok { // the engines' stores are
		deps.Audit = a
	}
	reg := gate.NewRegistry()
	if err := tools.Register(reg, deps); err != nil {
		return nil, err
	}
	return toolspec.Of(reg), nil
}

// newSender is the built-in tools' SMTP sender (SMTP_ADDR, MAIL_FROM), its
// calls traced with tp (nil: not traced).
func newSender(cfg *config.Config, tp trace.TracerProvider) (*resetmail.Sender, error) {
	sender, err := resetmail.NewSender(&resetmail.SenderConfig{Addr: cfg.SMTPAddr, From: cfg.MailFrom,
		LinkBase: cfg.ResetLinkBaseOrDefault(), Timeout: 10 * time.Second, TracerProvider: tp})
	if err != nil {
		return nil, fmt.Errorf("SMTP_ADDR/MAIL_FROM/%s: %w", config.EnvResetLinkBase, err)
	}
	return sender, nil
}

// ApprovalMailer mails approval notices (approvalmail) on the sender of
// the password-reset mails, traced with tp (nil: not traced).
func ApprovalMailer(cfg *config.Config, tp trace.TracerProvider) (jobs.ApprovalMailer, error) {
	sender, err := newSender(cfg, tp)
	if err != nil {
		return nil, err
	}
	return approvalMailer{&approvalmail.Mailer{Sender: sender}}, nil
}

// approvalMailer is approvalmail's Mailer as a jobs.ApprovalMailer.
type approvalMailer struct{ m *approvalmail.Mailer }

// MailApprovalNotice implements jobs.ApprovalMailer: resetmail's permanent
// errors are jobs.ErrNoticeRejected.
func (a approvalMailer) MailApprovalNotice(ctx context.Context, cs []*core.Claim, to []string, links []string) error {
	ns := make([]*approvalmail.Notice, len(cs))
	for i, c := range cs {
		n := &approvalmail.Notice{To: to, TenantID: c.TenantID, Tool: c.Tool, OperationID: c.OperationID,
			Args: c.Args, ArgsHash: c.ArgsHash, RequesterID: c.UserID, RequestedAt: c.CreatedAt, Link: links[i],
			Summary: c.ApprovalSummary, NotFingerprinted: tools.VolatileFields(c.Tool)}
		if c.ApprovalExpiresAt != nil {
			n.ExpiresAt = *c.ApprovalExpiresAt
		}
		ns[i] = n
	}
	_, err := a.m.SendAll(ctx, ns)
	if resetmail.Permanent(err) {
		return fmt.Errorf("%w: %w", jobs.ErrNoticeRejected, err)
	}
	return err
}

// Routes are the api routes of the built-in tools served in reg, on st
// (api.Config.Routes): when reg serves send_password_reset, the page its
// links open and the route that redeems them (resetroute); when it serves
// refund_order and IDEMGATE_STRIPE_WEBHOOK_SECRETS is set, Stripe's
// webhook endpoint (stripehook); nil for none.
func Routes(cfg *config.Config, reg *toolspec.Registry, st core.Store) api.Routes {
	var routes []api.Routes
	if _, ok := reg.Get("send_password_reset"); ok {
		routes = append(routes, resetroute.Routes(&resetroute.Config{Resets: &tools.ResetTokens{DB: StoreDB(st)}}))
	}
	if _, ok := reg.Get("refund_order"); ok && len(cfg.WebhookSecrets()) > 0 {
		routes = append(routes, stripehook.Routes(&stripehook.Config{Secrets: cfg.WebhookSecrets(),
			Ingest: stripehook.NewIngester(st, nil)}))
	}
	if len(routes) == 0 {
		return nil
	}
	return func(r chi.Router, kit *api.RouteKit) error {
		for _, add := range routes {
			if err := add(r, kit); err != nil {
				return err
			}
		}
		return nil
	}
}

// Migrate applies the built-in tools' migrations for drv's engine
// (migrations.Builtins) after idemgate's, in their own version table
// (migrations.BuiltinsTable), and reports how many it applied.
func Migrate(ctx context.Context, drv engine.Driver, logger *slog.Logger) (int, error) {
	return drv.MigrateLine(ctx, migrations.Builtins(migrations.Engine(drv.Engine())), migrations.BuiltinsTable, logger)
}

// MigratePostgres is Migrate on a Postgres pool, for
// those that hold a pool rather than a driver (tests, the bench).
func MigratePostgres(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (int, error) {
	return pgengine.MigrateLine(ctx, pool, migrations.Builtins(migrations.Postgres), migrations.BuiltinsTable, logger)
}

// MigrateSQLite is MigratePostgres on SQLite.
func MigrateSQLite(ctx context.Context, db *sql.DB, logger *slog.Logger) (int, error) {
	return sqliteengine.MigrateLine(ctx, db, migrations.Builtins(migrations.SQLite), migrations.BuiltinsTable, logger)
}

// linkOnce hands the assembly the built-ins once.
var linkOnce sync.Once

// Link hands the assembly the built-ins and makes the configuration read
// their settings. A program (or a test) that serves them calls it before
// it loads its configuration; calling it again does nothing.
func Link() {
	linkOnce.Do(func() {
		config.EnableBuiltinSettings()
		app.SetBuiltins(parts)
	})
}

// Linked returns the assembly's parts of the built-ins, linking them.
func Linked() *app.Builtins {
	Link()
	return parts
}

// parts are the built-ins' parts the assembly uses.
var parts = &app.Builtins{
	Declarations: Declarations,
	Tools:        traced,
	CheckWorker:  CheckWorker,
	Migrate:      Migrate,
	Routes:       Routes,

	ApprovalMailer: ApprovalMailer,
	Jobs:           Jobs,
}

// Jobs are the built-ins' River jobs for a worker of the tools in tools,
// on data: when it serves refund_order with STRIPE_API_KEY, the periodic
// list of Stripe's refunds (stripehook.Poller, every
// stripehook.DefaultPollInterval on the maintenance queue), which feeds
// each refund through the webhook's ingest to catch missed webhooks; its
// metrics in reg. None otherwise.
func Jobs(cfg *config.Config, tools *toolspec.Registry, data core.Store, logger *slog.Logger, reg prometheus.Registerer) (*app.BuiltinJobs, error) {
	if _, ok := tools.Get("refund_order"); !ok || cfg.StripeAPIKey == "" {
		return nil, nil
	}
	ingest := stripehook.NewIngester(data, logger)
	if err := ingest.Register(reg); err != nil {
		return nil, err
	}
	poller, err := stripehook.NewPoller(&stripehook.PollConfig{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase,
		Ingest: ingest, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &app.BuiltinJobs{
		Add: func(workers *river.Workers) error {
			return river.AddWorkerSafely(workers, &stripehook.PollWorker{Poller: poller})
		},
		Periodic: []*river.PeriodicJob{stripehook.PeriodicJob(stripehook.DefaultPollInterval)},
		Pass: func(ctx context.Context) error {
			_, err := poller.Pass(ctx)
			return err
		},
		Interval: stripehook.DefaultPollInterval,
	}, nil
}
