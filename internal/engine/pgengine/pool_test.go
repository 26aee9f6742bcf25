package pgengine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/engine/drivers"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
)

// The pool's size follows DATABASE_URL's pool_max_conns, which no default
// overrides; one connection of the bound stays outside the pool for River's
// LISTEN or the migration lock, except through a transaction pooler, where
// neither is used.
func TestPoolConfigHonoursPoolMaxConns(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		url      string
		pooler   string
		def      int32
		wantPool int32
		timeout  time.Duration
	}{
		{"URLWins", "postgres://h/db?pool_max_conns=5", "", 20, 4, 2 * time.Second},
		{"URLWinsOverSmallerDefault", "postgres://h/db?pool_max_conns=30", "", 3, 29, 2 * time.Second},
		{"Default", "postgres://h/db", "", 0, config.DefaultPoolMaxConns - 1, 2 * time.Second},
		{"CallerDefault", "postgres://h/db", "", 3, 2, 2 * time.Second},
		{"One", "postgres://h/db?pool_max_conns=1", "", 20, 1, 2 * time.Second},
		{"TransactionPooler", "postgres://h/db?pool_max_conns=5", config.PoolerTransaction, 20, 5, 2 * time.Second},
		{"URLConnectTimeoutWins", "postgres://h/db?connect_timeout=7", "", 20, 19, 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Defaults()
			cfg.DatabaseURL = tt.url
			if tt.pooler != "" {
				cfg.DBPooler = tt.pooler
			}
			require.NoError(t, cfg.Validate())
			pc, err := pgengine.PoolConfig(drivers.PostgresSettings(cfg, tt.def), nil)
			require.NoError(t, err)
			require.Equal(t, tt.wantPool, pc.MaxConns)
			require.Equal(t, tt.timeout, pc.ConnConfig.ConnectTimeout)
		})
	}
}

// Postgres refusing a connection for too many clients (53300) is said in
// those words, naming the setting, in errors and in the log.
func TestTooManyClientsNamesTheSetting(t *testing.T) {
	t.Parallel()
	refused := &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}
	err := pgengine.ExplainConnError(fmt.Errorf("connect: %w", refused))
	require.ErrorIs(t, err, refused)
	require.Contains(t, err.Error(), "too many clients")
	require.Contains(t, err.Error(), "pool_max_conns in DATABASE_URL")
	other := errors.New("connection refused")
	require.Equal(t, other, pgengine.ExplainConnError(other))

	// A server that refuses every connection: a stand-in that answers the
	// startup message with 53300, as Postgres does at max_connections.
	addr := refusingServer(t)
	var logs bytes.Buffer
	pool, err := pgengine.OpenPostgres(t.Context(), "postgres://u@"+addr+"/db?sslmode=disable&pool_max_conns=3",
		0, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = pool.Ping(ctx)
	require.True(t, pgengine.TooManyClients(err), "%v", err)
	require.Contains(t, logs.String(), "too many clients")
	require.Contains(t, logs.String(), "pool_max_conns")
}

// refusingServer listens on a loopback port and answers every startup
// message as Postgres does at max_connections: FATAL 53300.
func refusingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				be := pgproto3.NewBackend(conn, conn)
				if _, err := be.ReceiveStartupMessage(); err != nil {
					return
				}
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "53300", Message: "sorry, too many clients already"})
				_ = be.Flush()
			}()
		}
	}()
	return ln.Addr().String()
}
