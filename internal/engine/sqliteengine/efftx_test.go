package sqliteengine_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/engine/sqliteengine"
)

// TestEffectTxQueryAndEngineTx: an effect's gate.Tx reads many rows
// (Query), and gate.EngineTx gives the *sql.Tx it runs in, also inside a
// worker group's savepoint: what database/sql code writes through it
// commits or rolls back with the transaction.
func TestEffectTxQueryAndEngineTx(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	s := b.Store.(*sqliteengine.Store)
	_, err := b.db.ExecContext(ctx, `CREATE TABLE notes (n INTEGER)`)
	require.NoError(t, err)
	rows := func() (n int) {
		require.NoError(t, b.db.QueryRowContext(ctx, `SELECT count(*) FROM notes`).Scan(&n))
		return n
	}

	for _, savepoint := range []bool{false, true} {
		for _, commit := range []bool{true, false} {
			before := rows()
			tx, err := s.Begin(ctx)
			require.NoError(t, err)
			if savepoint {
				require.NoError(t, tx.(core.Savepointer).Savepoint(ctx), "a later operation of the group")
			}
			var effect gate.Tx = tx.(*sqliteengine.Tx)

			rs, err := effect.Query(ctx, `WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM g WHERE v < 3) SELECT v FROM g ORDER BY v`)
			require.NoError(t, err)
			var got []int
			for rs.Next() {
				var v int
				require.NoError(t, rs.Scan(&v))
				got = append(got, v)
			}
			require.NoError(t, rs.Err())
			require.NoError(t, rs.Close())
			require.Equal(t, []int{1, 2, 3}, got)
			_, err = effect.Query(ctx, `SELECT nope FROM notes`)
			require.Error(t, err)

			stx, ok := gate.EngineTx[*sql.Tx](effect)
			require.True(t, ok)
			_, ok = gate.EngineTx[*struct{}](effect)
			require.False(t, ok, "not the engine's type")
			_, err = stx.ExecContext(ctx, `INSERT INTO notes VALUES (1), (2)`)
			require.NoError(t, err)
			var n int
			require.NoError(t, effect.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&n))
			require.Equal(t, before+2, n, "the gate.Tx sees the *sql.Tx's writes: one transaction")

			if savepoint {
				require.NoError(t, tx.(core.Savepointer).RollbackToSavepoint(ctx))
				require.NoError(t, effect.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&n))
				require.Equal(t, before, n, "undone with the operation's savepoint")
				_, err = stx.ExecContext(ctx, `INSERT INTO notes VALUES (3), (4)`)
				require.NoError(t, err)
			}
			if commit {
				require.NoError(t, tx.Commit(ctx))
				require.Equal(t, before+2, rows())
			} else {
				require.NoError(t, tx.Rollback(ctx))
				require.Equal(t, before, rows())
			}
		}
	}
}
