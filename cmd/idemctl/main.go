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

	"github.com/idemgate/idemgate/config"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// envDatabaseURL is the environment variable behind --database-url.
const envDatabaseURL = "DATABASE_URL"

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

// app is the configuration shared by every subcommand, filled from the
// persistent flags and the environment.
type app struct {
	databaseURL string
	stdout      io.Writer
	stderr      io.Writer
	logger      *slog.Logger
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
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if !cmd.Flags().Changed("database-url") {
				a.databaseURL = os.Getenv(envDatabaseURL)
			}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	// The default is resolved at run time rather than shown in --help, so
	// that a password in DATABASE_URL never reaches the help text.
	root.PersistentFlags().StringVar(&a.databaseURL, "database-url", "",
		"database URL: postgres://… or sqlite:PATH (default $"+envDatabaseURL+"; unset means SQLite at "+config.DefaultSQLitePath+")")

	root.AddCommand(
		newMigrateCmd(a),
		newSeedCmd(a),
		newTokenCmd(a),
		newOpCmd(a),
		newPruneCmd(a),
	)
	return root
}

// usageError marks an error caused by invalid flags or configuration; run
// exits with exitUsage for it.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// openPostgres validates the database URL and returns a pool that has
// answered a ping. The caller closes it.
func (a *app) openPostgres(ctx context.Context) (*pgxpool.Pool, error) {
	raw := strings.TrimSpace(a.databaseURL)
	switch {
	case raw == "" || strings.HasPrefix(raw, "sqlite:"):
		return nil, &usageError{fmt.Errorf("%s is unset or names SQLite: this command needs Postgres "+
			"(on SQLite, idemctl has migrate, seed and token; set %s or --database-url to a postgres:// URL)", envDatabaseURL, envDatabaseURL)}
	case !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://"):
		return nil, &usageError{fmt.Errorf("invalid %s: want postgres://… or sqlite:PATH, got %q",
			envDatabaseURL, redactURL(raw))}
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, &usageError{fmt.Errorf("invalid %s: %w", envDatabaseURL, err)}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: open pool: %w", envDatabaseURL, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s (%s): %w", envDatabaseURL, redactURL(raw), err)
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
