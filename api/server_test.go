package api_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/api"
	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatepg"
)

type noAuth struct{}

func (noAuth) Authenticate(context.Context, string) (domain.Actor, error) {
	return domain.Actor{}, domain.ErrNotFound
}

type noOrders struct{}

func (noOrders) OrderGet(context.Context, string, string) (any, error) {
	return nil, domain.ErrNotFound
}

type noEnqueue struct{}

func (noEnqueue) JobInsert(context.Context, gate.Tx, *gate.Claim) (int64, error) { return 0, nil }

func TestMutatingToolWithoutPolicyStopsStart(t *testing.T) {
	t.Parallel()
	policies := gate.DefaultPolicies()
	for i, p := range policies {
		if p.Tool == "reset_seat" {
			policies = append(policies[:i], policies[i+1:]...)
			break
		}
	}
	g, err := gate.New(&gate.Config{Store: gatepg.New(nil), Enqueuer: noEnqueue{}, Policies: policies})
	require.NoError(t, err)
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Orders: noOrders{}})
	require.ErrorContains(t, err, `mutating tool "reset_seat" has no gate policy`)

	g, err = gate.New(&gate.Config{Store: gatepg.New(nil), Enqueuer: noEnqueue{}, Policies: gate.DefaultPolicies()})
	require.NoError(t, err)
	_, err = api.New(&api.Config{Gate: g, Auth: noAuth{}, Orders: noOrders{}})
	require.NoError(t, err)
}
