package pgengine_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
)

// TestEffectTxQueryAndEngineTx: an effect's gate.Tx reads many rows
// (Query), and gate.EngineTx gives the pgx.Tx it runs in, on a plain
// transaction and on a worker group's pipelined one inside its savepoint:
// what the pgx code writes commits or rolls back with the transaction,
// and the effect may not end it.
func TestEffectTxQueryAndEngineTx(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, pool := pgtest.NewDB(t)
	s := pgengine.New(pool)
	_, err := pool.Exec(ctx, `CREATE TABLE notes (n int)`)
	require.NoError(t, err)
	rows := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&n))
		return n
	}

	plain := func(ctx context.Context) core.Tx {
		tx, err := s.Begin(ctx)
		require.NoError(t, err)
		return tx
	}
	pipelined := func(ctx context.Context) core.Tx {
		tx, _, _ := s.BeginLock(ctx, &core.ClaimLeaseParams{TenantID: "acme", OperationID: uuid.NewString(), JobID: 1})
		require.NotNil(t, tx)
		require.NoError(t, tx.(core.Savepointer).Savepoint(ctx), "a later operation of the group")
		return tx
	}
	for name, begin := range map[string]func(context.Context) core.Tx{"plain": plain, "pipelined": pipelined} {
		for _, commit := range []bool{true, false} {
			before := rows()
			ctx := t.Context()
			ctx, cancel := context.WithCancel(ctx)
			tx := begin(ctx)
			var effect gate.Tx = tx.(*pgengine.Tx)

			// Query: three rows, in order, then the end.
			rs, err := effect.Query(ctx, `SELECT g FROM generate_series(1, 3) g ORDER BY g`)
			require.NoError(t, err)
			var got []int
			for rs.Next() {
				var v int
				require.NoError(t, rs.Scan(&v))
				got = append(got, v)
			}
			require.NoError(t, rs.Err())
			require.NoError(t, rs.Close())
			require.Equal(t, []int{1, 2, 3}, got, name)
			_, err = effect.Query(ctx, `SELECT nope FROM notes`)
			require.Error(t, err)
			if name == "plain" { // a failed statement aborts the transaction
				require.NoError(t, tx.Rollback(ctx))
				tx = begin(ctx)
				effect = tx.(*pgengine.Tx)
			} else {
				require.NoError(t, tx.(core.Savepointer).RollbackToSavepoint(ctx))
			}

			// EngineTx: the pgx.Tx of this transaction, as sqlc's DBTX.
			ptx, ok := gate.EngineTx[pgx.Tx](effect)
			require.True(t, ok, name)
			_, ok = gate.EngineTx[*struct{}](effect)
			require.False(t, ok, "not the engine's type")
			_, err = ptx.Exec(ctx, `INSERT INTO notes VALUES (1), (2)`)
			require.NoError(t, err)
			var n int
			require.NoError(t, effect.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&n))
			require.Equal(t, before+2, n, "the gate.Tx sees the pgx.Tx's writes: one transaction")
			require.Error(t, ptx.Commit(ctx), "the gate ends the transaction")
			require.Error(t, ptx.Rollback(ctx))
			nested, err := ptx.Begin(ctx)
			require.NoError(t, err, "savepoints are the effect's own")
			require.NoError(t, nested.Rollback(ctx))

			if commit {
				require.NoError(t, tx.Commit(ctx))
				require.Equal(t, before+2, rows(), name)
			} else {
				require.NoError(t, tx.Rollback(ctx))
				require.Equal(t, before, rows(), name)
			}
			cancel()
		}
	}
	require.Zero(t, pool.Stat().AcquiredConns(), "every connection went back to the pool")
}
