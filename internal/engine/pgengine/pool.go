package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/internal/config"
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
	"is reached by all its clients together); lower pool_max_conns in " + config.EnvDatabaseURL +
	" of this or the other processes, put a pooler in front (" + config.EnvDBPooler + "), or raise max_connections on the server"

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
		"pool_max_conns", t.total, "setting", config.EnvDatabaseURL+" pool_max_conns", "error", data.Err)
}
