package gate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
)

func TestToolScopes(t *testing.T) {
	t.Parallel()
	type args struct {
		ID string `json:"id" idem:"id"`
	}
	type result struct{}
	mutation := func(name, scope string) *gate.Mutation[args, result] {
		return &gate.Mutation[args, result]{
			Name: name, Title: name, Description: name, Scope: scope,
			InTx: func(context.Context, gate.Tx, *gate.Op[args]) (*result, error) { return &result{}, nil },
		}
	}
	reg := gate.NewRegistry().MustAdd(
		mutation("revoke_seat", "seats:write"),
		mutation("issue_coupon", "coupons:issue"),
		mutation("assign_seat", "seats:write"),
	)
	require.Equal(t, []string{"coupons:issue", "operations:read", "seats:write"}, reg.ToolScopes(),
		"the tools' scopes once each, and operations:read to poll; sorted")
	require.NotContains(t, reg.ToolScopes(), "ops:admin")
	require.Contains(t, gate.ScopesOf(reg), "ops:admin", "a scope a token may hold, but not one an agent needs")

	require.Equal(t, []string{domain.ScopeOperationsRead}, gate.NewRegistry().ToolScopes(), "no tools: only polling")
}
