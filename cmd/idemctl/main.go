// Command idemctl is idemgate's operator CLI: migrate, seed, tokens,
// operation status, re-drive and prune.
//
// This file holds the root command, the configuration every subcommand
// shares and the wiring; each subcommand lives in a file of its own and is
// registered in newRootCmd. Output meant for programs goes to stdout as JSON;
// logs and errors go to stderr.
//
// Exit codes: 0 success, 1 failure, 2 invalid usage or configuration,
// 3 a re-drive refused (the operation succeeded, or is queued or running).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	idemgateapp "github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/config"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
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
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
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

// app is what every subcommand shares: the configuration, the output
// streams and the logger.
type app struct {
	cfg    *config.Config
	stdout io.Writer
	stderr io.Writer
	logger *slog.Logger
}

// newRootCmd builds the command tree. New subcommands are added here.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	a := &app{
		stdout: stdout,
		stderr: stderr,
		logger: slog.New(slog.NewTextHandler(stderr, nil)),
	}
	root := &cobra.Command{
		Use:           "idemctl",
		Short:         "Operate an idemgate deployment",
		Long:          "Operate an idemgate deployment.\n\n" + configHelp(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.loadConfig(cmd)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	// The default is resolved at run time rather than shown in --help, so
	// that a password in DATABASE_URL never reaches the help text.
	db, _ := config.LookupSetting(config.EnvDatabaseURL)
	root.PersistentFlags().String(db.Flag, "", db.Help+" (default $"+db.Env+")")

	root.AddCommand(
		newMigrateCmd(a),
		newSeedCmd(a),
		newTokenCmd(a),
		newOpCmd(a),
		newPruneCmd(a),
	)
	return root
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
func (a *app) loadConfig(cmd *cobra.Command) error {
	var args []string
	if f := cmd.Flags().Lookup("database-url"); f != nil && f.Changed {
		args = append(args, "--database-url="+f.Value.String())
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
		return nil, fmt.Errorf("connect to %s (%s): %w", config.EnvDatabaseURL, redactURL(raw), idemgateapp.ExplainConnError(err))
	}
	return pool, nil
}

// redactURL hides a password in raw for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
