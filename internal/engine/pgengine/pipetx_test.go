package pgengine_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/pgtest"
	"github.com/idemgate/idemgate/internal/vocab"
)

// TestPipelinedTxIsATransaction: the transaction BeginLock begins (BEGIN
// sent with the lock) is a pgx.Tx like pgx's own, for River and effects:
// its nested transactions are savepoints, Commit stores, Rollback undoes,
// and either gives the connection back to the pool.
func TestPipelinedTxIsATransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, pool := pgtest.NewDB(t)
	s := pgengine.New(pool)
	_, err := pool.Exec(ctx, `CREATE TABLE pipe_rows (v int)`)
	require.NoError(t, err)
	rows := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pipe_rows`).Scan(&n))
		return n
	}
	lock := &core.ClaimLeaseParams{TenantID: "acme", OperationID: uuid.NewString(), JobID: 1}

	for _, commit := range []bool{true, false} {
		tx, locked, err := s.BeginLock(ctx, lock)
		require.ErrorIs(t, err, vocab.ErrNotFound, "no claim: the lock tells why, in the open transaction")
		require.Nil(t, locked)
		ptx := tx.(*pgengine.Tx).DriverTx()
		var status string
		require.NoError(t, ptx.QueryRow(ctx, `SELECT CASE WHEN now() = statement_timestamp() THEN 'same' ELSE 'in a transaction' END`).Scan(&status))
		require.Equal(t, "in a transaction", status, "BEGIN was sent with the lock")

		_, err = ptx.Exec(ctx, `INSERT INTO pipe_rows VALUES (1)`)
		require.NoError(t, err)
		nested, err := ptx.Begin(ctx)
		require.NoError(t, err)
		_, err = nested.Exec(ctx, `INSERT INTO pipe_rows VALUES (2)`)
		require.NoError(t, err)
		require.NoError(t, nested.Rollback(ctx), "a nested transaction rolls back to its savepoint")
		require.ErrorIs(t, nested.Commit(ctx), pgx.ErrTxClosed)
		kept, err := ptx.Begin(ctx)
		require.NoError(t, err)
		_, err = kept.Exec(ctx, `INSERT INTO pipe_rows VALUES (3)`)
		require.NoError(t, err)
		require.NoError(t, kept.Commit(ctx), "and releases it on commit")
		require.PanicsWithValue(t, "pgengine: a worker group's transaction has no large objects", func() { ptx.LargeObjects() })

		before := rows()
		if commit {
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, before+2, rows(), "rows 1 and 3")
		} else {
			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, before, rows())
		}
		require.NoError(t, tx.Rollback(ctx), "a rollback after the end does nothing")
		require.ErrorIs(t, ptx.Commit(ctx), pgx.ErrTxClosed)
	}
	require.Zero(t, pool.Stat().AcquiredConns(), "every connection went back to the pool")
}
