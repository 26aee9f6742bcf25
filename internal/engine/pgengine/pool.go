package pgengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TooManyClients reports whether err is Postgres refusing a connection
// because it serves max_connections already (SQLSTATE 53300).
func TooManyClients(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.TooManyConnections
}

// TooManyClientsHint is what to do when Postgres refuses connections for too
// many clients: it names the setting that bounds a process's connections.
const TooManyClientsHint = "Postgres refuses connections: too many clients (SQLSTATE 53300, its max_connections " +
	"is reached by all its clients together); lower pool_max_conns in " + envDatabaseURL +
	" of this or the other processes, put a pooler in front (" + envDBPooler + "), or raise max_connections on the server"

// ExplainConnError wraps err with TooManyClientsHint when Postgres refused
// the connection for too many clients, and returns err as it is otherwise.
func ExplainConnError(err error) error {
	if err == nil || !TooManyClients(err) {
		return err
	}
	return fmt.Errorf("%s: %w", TooManyClientsHint, err)
}

// refusedLogEvery bounds how often refusedTracer logs: a pool that cannot
// connect retries on every acquire.
const refusedLogEvery = 10 * time.Second

// refusedTracer logs, at most once per refusedLogEvery, that Postgres
// refused a connection of the pool for too many clients, with the
// process's bound and the setting that sets it. It traces nothing else.
type refusedTracer struct {
	logger *slog.Logger
	total  int32
	last   atomic.Int64 // unix nanoseconds of the last line
}

var (
	_ pgx.QueryTracer   = (*refusedTracer)(nil)
	_ pgx.ConnectTracer = (*refusedTracer)(nil)
)

func (t *refusedTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (t *refusedTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *refusedTracer) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return ctx
}

func (t *refusedTracer) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	if !TooManyClients(data.Err) {
		return
	}
	now := time.Now().UnixNano()
	last := t.last.Load()
	if last != 0 && now-last < int64(refusedLogEvery) || !t.last.CompareAndSwap(last, now) {
		return
	}
	t.logger.ErrorContext(ctx, TooManyClientsHint,
		"pool_max_conns", t.total, "setting", envDatabaseURL+" pool_max_conns", "error", data.Err)
}

// OpenPostgres opens a pool on url with timeouts that make an unreachable
// database an error within seconds, not a hang. The process holds at most
// maxConns connections to Postgres in all (see PoolConfig), or url's
// pool_max_conns when it has one: the URL always wins. logger (nil: none)
// says so when Postgres refuses connections for too many clients.
func OpenPostgres(ctx context.Context, dbURL string, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	return OpenPostgresConfig(ctx, Settings{URL: dbURL, MaxConns: maxConns}, logger)
}

// OpenPostgresConfig is OpenPostgres with the process's settings, in the
// query execution mode s.ExecMode names (under a transaction pooler, one
// without named prepared statements).
func OpenPostgresConfig(ctx context.Context, s Settings, logger *slog.Logger) (*pgxpool.Pool, error) {
	pc, err := PoolConfig(s, logger)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, pc)
}

// ExecMode returns pgx's query execution mode named as in a URL's
// default_query_exec_mode (Settings.ExecMode).
func ExecMode(name string) (pgx.QueryExecMode, error) {
	switch name {
	case "cache_statement":
		return pgx.QueryExecModeCacheStatement, nil
	case "cache_describe":
		return pgx.QueryExecModeCacheDescribe, nil
	case "describe_exec":
		return pgx.QueryExecModeDescribeExec, nil
	case "exec":
		return pgx.QueryExecModeExec, nil
	case "simple_protocol":
		return pgx.QueryExecModeSimpleProtocol, nil
	}
	return 0, fmt.Errorf("%s: unknown default_query_exec_mode %q", envDatabaseURL, name)
}

// ErrMigrateThroughPooler refuses migrations through a transaction pooler:
// they hold a session-level advisory lock (pgengine.MigrateLockKey),
// which such a pooler may leave on a server connection for good.
var ErrMigrateThroughPooler = errors.New(envDBPooler + "=transaction: migrations hold a session-level advisory lock, " +
	"which a transaction pooler cannot keep; run them with " + envDatabaseURL + " pointing at Postgres itself and " +
	envDBPooler + " unset")

// PoolConfig is the pool configuration of s.URL for a process that may
// hold total connections to Postgres in all: the URL's pool_max_conns, else
// s.MaxConns, else DefaultMaxConns. Unless the URL goes through a transaction
// pooler, the pool itself holds one fewer: a worker's River client takes
// one connection out of its pool for good to LISTEN (pgx's Hijack, after
// which the pool may open another), and migrations hold their advisory
// lock on a connection of their own. The URL's connect_timeout and
// pool_health_check_period win over this package's 2s and 5s.
func PoolConfig(s Settings, logger *slog.Logger) (*pgxpool.Config, error) {
	total := s.MaxConns
	if total <= 0 {
		total = DefaultMaxConns
	}
	pc, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envDatabaseURL, err)
	}
	params := urlParams(s.URL)
	if params.Has("pool_max_conns") {
		total = pc.MaxConns
	}
	if mode := s.ExecMode; mode != "" {
		if pc.ConnConfig.DefaultQueryExecMode, err = ExecMode(mode); err != nil {
			return nil, err
		}
	}
	if !params.Has("connect_timeout") {
		pc.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	if !params.Has("pool_health_check_period") {
		pc.HealthCheckPeriod = 5 * time.Second
	}
	pc.MaxConns = total
	if !s.Pooled && total > 1 {
		pc.MaxConns = total - 1
	}
	if pc.MinConns > pc.MaxConns {
		pc.MinConns = pc.MaxConns
	}
	if logger != nil {
		pc.ConnConfig.Tracer = &refusedTracer{logger: logger, total: total}
	}
	return pc, nil
}

// urlParams returns a URL's query parameters (none for a key=value string).
func urlParams(s string) url.Values {
	u, err := url.Parse(s)
	if err != nil {
		return url.Values{}
	}
	return u.Query()
}
