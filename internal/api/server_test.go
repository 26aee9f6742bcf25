package api_test

import (
	"context"
	"testing"

	"github.com/idemgate/idemgate/internal/builtins"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/internal/api"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/domain"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/gate"
	"github.com/idemgate/idemgate/internal/gate/gatetest"
	"github.com/idemgate/idemgate/internal/jobs"
)

type noAuth struct{}

func (noAuth) Authenticate(context.Context, string) (domain.Actor, error) {
	return domain.Actor{}, domain.ErrNotFound
}

type noEnqueue struct{}

func (noEnqueue) JobInsert(context.Context, gate.Tx, *gate.Claim) (int64, error) { return 0, nil }

func TestMutatingToolWithoutPolicyStopsStart(t *testing.T) {
	t.Parallel()
	policies := gatetest.Policies()
	for i, p := range policies {
		if p.Tool == "reset_seat" {
			policies = append(policies[:i], policies[i+1:]...)
			break
		}
	}
	st := unusedStore(t)
	g, err := gate.New(&gate.Config{Store: st, Enqueuer: noEnqueue{}, Policies: policies})
	require.NoError(t, err)
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: builtinTools(t, st), Jobs: &jobs.Control[pgx.Tx]{}})
	require.ErrorContains(t, err, `mutating tool "reset_seat" has no gate policy`)

	g, err = gate.New(&gate.Config{Store: st, Enqueuer: noEnqueue{}, Policies: gatetest.Policies()})
	require.NoError(t, err)
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: builtinTools(t, st), Jobs: &jobs.Control[pgx.Tx]{}})
	require.NoError(t, err)
}

// unusedStore is a store on a pool that never connects: nothing is called.
func unusedStore(t *testing.T) *pgengine.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pgengine.New(pool)
}

// builtinTools is the built-in tools' registry on st.
func builtinTools(t *testing.T, st *pgengine.Store) *toolspec.Registry {
	t.Helper()
	reg, err := builtins.Declarations(config.Defaults(), st)
	require.NoError(t, err)
	return reg
}
