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
	"github.com/idemgate/idemgate/internal/core"
	"github.com/idemgate/idemgate/internal/core/coretest"
	"github.com/idemgate/idemgate/internal/engine/pgengine"
	"github.com/idemgate/idemgate/internal/jobs"
	"github.com/idemgate/idemgate/internal/vocab"
)

type noAuth struct{}

func (noAuth) Authenticate(context.Context, string) (vocab.Actor, error) {
	return vocab.Actor{}, vocab.ErrNotFound
}

type noEnqueue struct{}

func (noEnqueue) JobInsert(context.Context, core.Tx, *core.Claim) (int64, error) { return 0, nil }

func TestMutatingToolWithoutPolicyStopsStart(t *testing.T) {
	t.Parallel()
	policies := coretest.Policies()
	for i, p := range policies {
		if p.Tool == "reset_seat" {
			policies = append(policies[:i], policies[i+1:]...)
			break
		}
	}
	st := unusedStore(t)
	g, err := core.New(&core.Config{Store: st, Enqueuer: noEnqueue{}, Policies: policies})
	require.NoError(t, err)
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Tools: builtinTools(t, st), Jobs: &jobs.Control[pgx.Tx]{}})
	require.ErrorContains(t, err, `mutating tool "reset_seat" has no gate policy`)

	g, err = core.New(&core.Config{Store: st, Enqueuer: noEnqueue{}, Policies: coretest.Policies()})
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
