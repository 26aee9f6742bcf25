// Command idemctl is idemgate's operator CLI: migrate, seed, tokens,
// operation status, re-drive, approvals, prune and the reconciliation of
// refunds with Stripe's reports.
//
// This file holds the root command, the configuration every subcommand
// shares and the wiring (github.com/alecthomas/kong, like the api's and the
// worker's configuration); help.go formats --help; each subcommand lives in
// a file of its own and is registered in cli. Output meant for programs goes to stdout as JSON;
// logs and errors go to stderr.
//
// Exit codes: 0 success, 1 failure, 2 invalid usage or configuration,
// 3 a re-drive refused (the operation succeeded, or is queued or running)
// or an approval decision refused.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/builtins"
	"github.com/idemgate/idemgate/internal/config"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes idemctl with args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

// runIO is run reading standard input from stdin.
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	builtins.Link() // the built-in tools: their settings, migrations and seeds
	err := execute(ctx, args, stdin, stdout, stderr)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "idemctl:", err)
	var usage *usageError
	if errors.As(err, &usage) {
		return exitUsage
	}
	var coded *exitError
	if errors.As(err, &coded) {
		return coded.code
	}
	return exitFailure
}

// app is what every subcommand shares: the configuration, the streams and
// the logger. Commands' Run methods receive it, and the context, from kong.
type app struct {
	cfg    *config.Config
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	logger *slog.Logger
}

// cli is the command tree. New subcommands are added here, in alphabetical
// order (help lists them in this order).
type cli struct {
	// The default is resolved at run time rather than shown in --help, so
	// that a password in DATABASE_URL never reaches the help text. Nil when
	// not given.
	DatabaseURL *string `name:"database-url" placeholder:"URL" help:"${database_url_help}"`

	Approval  approvalCmd  `cmd:"" help:"List, approve and deny operations awaiting a person's approval"`
	Help      helpCmd      `cmd:"" usage:"[command...]" help:"Help about any command"`
	Migrate   migrateCmd   `cmd:"" help:"Apply River's, idemgate's and the built-in tools' database migrations"`
	Op        opCmd        `cmd:"" help:"Show, list and re-drive operations"`
	Prune     pruneCmd     `cmd:"" usage:"[--max-batches N]" help:"Archive expired terminal claims into their keys' history now"`
	Reconcile reconcileCmd `cmd:"" usage:"[--tenant T] [--order ORDER_ID] [--limit N]" help:"List refund drift, or one order's refunds from both sides (idemgate's operations, Stripe's reports)"`
	Seed      seedCmd      `cmd:"" usage:"--file F" help:"Load tenants' tokens, orders, customers, seats, users and settings from a seed file"`
	Token     tokenCmd     `cmd:"" help:"Create, revoke and list bearer tokens"`
}

// execute parses args, loads the configuration and runs the command. A
// command that has subcommands, given none, prints its help.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, logger: slog.New(slog.NewTextHandler(stderr, nil))}
	var c cli
	helped := false
	k, err := kong.New(&c,
		kong.Name("idemctl"),
		kong.Description("Operate an idemgate deployment.\n\n"+configHelp()),
		kong.Writers(stdout, stderr),
		// --since -1h reaches parseSince, which says why it is wrong.
		kong.WithHyphenPrefixedParameters(true),
		kong.Exit(func(int) { helped = true }),
		kong.Vars(helpVars()),
		kong.ValueFormatter(helpValue),
		kong.Help(printHelp),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, NoExpandSubcommands: true}),
		kong.Bind(a),
		kong.BindTo(ctx, (*context.Context)(nil)),
	)
	if err != nil {
		return err
	}
	kctx, err := k.Parse(args)
	switch {
	case helped:
		return nil
	case err != nil:
		return parseError(err)
	}
	if _, ok := kctx.Selected().Target.Addr().Interface().(*helpCmd); !ok {
		if err := a.loadConfig(c.DatabaseURL); err != nil {
			return err
		}
	}
	return kctx.Run()
}

// parseError prints the help of a command given without its subcommand
// (and run exits 0); any other parse error is a usage error.
func parseError(err error) error {
	var perr *kong.ParseError
	if errors.As(err, &perr) && perr.Context != nil && perr.Context.Error == nil {
		node := perr.Context.Selected()
		if node == nil {
			node = perr.Context.Model.Node
		}
		if len(node.Children) > 0 {
			return perr.Context.PrintUsage(false)
		}
	}
	return &usageError{err}
}

// idemctlSettings are the settings idemctl's commands use.
var idemctlSettings = []string{config.EnvDatabaseURL, config.EnvOperatorTenant, config.EnvLogLevel}

// configHelp describes idemctl's configuration for --help.
func configHelp() string {
	var b strings.Builder
	b.WriteString("Configuration: the api's and the worker's (package config; api -h lists every setting),\n" +
		"read from --database-url, else the environment, else the defaults, and checked as they check it.\n" +
		"idemctl uses:\n")
	for _, env := range idemctlSettings {
		s, _ := config.LookupSetting(env)
		fmt.Fprintf(&b, "  $%-26s %s", s.Env, s.Help)
		if s.Default != "" {
			fmt.Fprintf(&b, " (default %s)", s.Default)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// loadConfig reads the shared configuration with package config:
// --database-url when given, else the environment, else the defaults.
// Invalid settings are a usage error naming the setting.
func (a *app) loadConfig(databaseURL *string) error {
	var args []string
	if databaseURL != nil {
		args = append(args, "--database-url="+*databaseURL)
	}
	cfg, err := config.Load(args, os.Getenv)
	if err != nil {
		return &usageError{withoutOtherFlags(err)}
	}
	a.cfg = cfg
	a.logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	return nil
}

// withoutOtherFlags names the settings in err by their environment
// variables alone, but for --database-url: idemctl has none of the api's
// other flags.
func withoutOtherFlags(err error) error {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var msgs []string
	for _, e := range errs {
		var se *config.SettingError
		if errors.As(e, &se) && se.Setting != config.EnvDatabaseURL {
			msgs = append(msgs, se.Setting+": "+se.Msg)
		} else {
			msgs = append(msgs, e.Error())
		}
	}
	return errors.New(strings.Join(msgs, "\n"))
}

// usageError marks an error caused by invalid flags or configuration; run
// exits with exitUsage for it.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// openPostgres returns a pool on DATABASE_URL, a postgres:// URL, that has
// answered a ping. The caller closes it.
func (a *app) openPostgres(ctx context.Context) (*pgxpool.Pool, error) {
	raw := a.cfg.DatabaseURL
	// At most DefaultCLIPoolMaxConns connections in all (migrate's lock
	// included), or DATABASE_URL's pool_max_conns.
	cfg, err := idemgateapp.PoolConfig(a.cfg, config.DefaultCLIPoolMaxConns, a.logger)
	if err != nil {
		return nil, &usageError{fmt.Errorf("invalid %w", err)}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: open pool: %w", config.EnvDatabaseURL, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s (%s): %w", config.EnvDatabaseURL, config.RedactDatabaseURL(raw), idemgateapp.ExplainConnError(err))
	}
	return pool, nil
}
