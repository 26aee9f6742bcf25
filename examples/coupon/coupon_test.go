package main

import (
	"path/filepath"

	"github.com/stretchr/testify/require"

	"testing"

	"github.com/idemgate/idemgate"

	"github.com/idemgate/idemgate/domain"
	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/gate/gatetest"
)

func couponCase() *gatetest.Case {
	return &gatetest.Case{
		Tool:        "issue_coupon",
		Args:        map[string]any{"customer_id": "cus_1", "percent_off": 10},
		Differ:      map[string]any{"customer_id": "cus_1", "percent_off": 20},
		DifferField: "percent_off",
		Effects: func(t testing.TB, h *gatetest.Harness, op *domain.Operation) int {
			return h.Count(t, `SELECT count(*) FROM coupons WHERE operation_id = $1`, op.OperationID)
		},
	}
}

func TestIssueCouponOnPostgres(t *testing.T) {
	t.Parallel()
	reg := gate.NewRegistry().MustAdd(IssueCoupon)
	h := gatetest.Postgres(t, reg, &gatetest.Options{Migrations: Migrations})
	gatetest.Check(t, h, couponCase())
}

func TestIssueCouponOnSQLite(t *testing.T) {
	t.Parallel()
	reg := gate.NewRegistry().MustAdd(IssueCoupon)
	h := gatetest.SQLite(t, reg, &gatetest.Options{Migrations: Migrations})
	gatetest.Check(t, h, couponCase())
}

// This program does not link the built-in tools: a Builtins value that is
// not idemgate's is a clear error rather than a silent empty set, and
// their settings are not read (a Stripe flag is unknown here).
func TestBuiltinsNeedTheirPackage(t *testing.T) {
	t.Parallel()
	cfg, err := idemgate.LoadConfig([]string{"--database-url=sqlite:" + filepath.Join(t.TempDir(), "x.db")})
	require.NoError(t, err)
	_, err = idemgate.Open(t.Context(), cfg, gate.NewRegistry(), &idemgate.Options{Builtins: notBuiltins{}})
	require.ErrorContains(t, err, "is not idemgate's built-in tools (builtins.Tools())")
	_, err = idemgate.LoadConfig([]string{"--stripe-api-key=sk_test_1"})
	require.ErrorContains(t, err, "stripe-api-key")
}

// notBuiltins is a Builtins of the program's own.
type notBuiltins struct{}

func (notBuiltins) Link() any { return nil }
