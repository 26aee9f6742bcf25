package tools_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/internal/builtins"
	"github.com/idemgate/idemgate/internal/toolspec"

	"github.com/stretchr/testify/require"

	"github.com/idemgate/idemgate/gate"
	"github.com/idemgate/idemgate/internal/config"
	"github.com/idemgate/idemgate/internal/store"
	"github.com/idemgate/idemgate/internal/stripetest"
	"github.com/idemgate/idemgate/internal/toolkit"
	"github.com/idemgate/idemgate/internal/tools"
	"github.com/idemgate/idemgate/internal/vocab"
	"github.com/idemgate/idemgate/internal/vocab/refunds"
)

// The built-in tools checked with the same kit a team uses for its own.

func seedFile() *store.SeedFile {
	return &store.SeedFile{
		Rows: &tools.Seed{Orders: []tools.SeedOrder{
			{Tenant: toolkit.Tenant, OrderID: "ord_1", ChargeID: "ch_1", AmountCents: 1_000_000, Currency: "usd"},
			{Tenant: toolkit.Tenant, OrderID: "ord_declined", ChargeID: "ch_declined", AmountCents: 5000, Currency: "usd"},
		}, Customers: []tools.SeedCustomer{{Tenant: toolkit.Tenant, CustomerID: "cus_1", Currency: "usd"}}, Seats: []tools.SeedSeat{{Tenant: toolkit.Tenant, SeatID: "seat_1", UserID: "usr_1"},
			{Tenant: toolkit.Tenant, SeatID: "seat_2", UserID: "usr_2"},
			{Tenant: toolkit.Tenant, SeatID: "seat_busy", UserID: "usr_3"}, {Tenant: toolkit.Tenant, SeatID: "seat_free"}}},
	}
}

func build(stripe *refunds.Client) func(toolkit.Data) *toolspec.Registry {
	return func(data toolkit.Data) *toolspec.Registry {
		reg := gate.NewRegistry()
		d := &tools.Deps{DB: builtins.StoreDB(data), Stripe: stripe}
		reg.MustAdd(tools.ApplyCredit(d), tools.ResetSeat(d))
		if stripe != nil {
			reg.MustAdd(tools.RefundOrder(d))
		}
		return toolspec.Of(reg)
	}
}

func inTxCases() []*toolkit.Case {
	return []*toolkit.Case{
		{
			Tool:        "apply_credit",
			Args:        map[string]any{"customer_id": "cus_1", "amount_cents": 250, "currency": "usd"},
			Differ:      map[string]any{"customer_id": "cus_1", "amount_cents": 300, "currency": "usd"},
			DifferField: "amount_cents",
			Failing:     map[string]any{"customer_id": "cus_1", "amount_cents": 250, "currency": "eur"},
			FailCode:    vocab.CodeInvalidArgument,
			Effects: func(t testing.TB, h *toolkit.Harness, op *vocab.Operation) int {
				return h.Count(t, `SELECT count(*) FROM ledger_entries WHERE operation_id = $1`, op.OperationID)
			},
		},
		{
			Tool:        "reset_seat",
			Args:        map[string]any{"seat_id": "seat_1"},
			Differ:      map[string]any{"seat_id": "seat_2"},
			DifferField: "seat_id",
			Failing:     map[string]any{"seat_id": "seat_none"},
			FailCode:    vocab.CodeNotFound,
			Effects: func(t testing.TB, h *toolkit.Harness, op *vocab.Operation) int {
				return h.Count(t, `SELECT count(*) FROM seat_resets WHERE operation_id = $1`, op.OperationID)
			},
		},
	}
}

// refundCase checks refund_order against the test Stripe, which counts
// refunds by our downstream key.
func refundCase(srv *stripetest.Server) *toolkit.Case {
	return &toolkit.Case{
		Tool:        "refund_order",
		Args:        map[string]any{"order_id": "ord_1", "amount_cents": 100},
		Differ:      map[string]any{"order_id": "ord_1", "amount_cents": 200},
		DifferField: "amount_cents",
		Failing:     map[string]any{"order_id": "ord_declined", "amount_cents": 100},
		FailCode:    vocab.CodeCardDeclined,
		// Refunds where they land: at the test Stripe, by the operation
		// their metadata names, and the refund row.
		Effects: func(t testing.TB, h *toolkit.Harness, op *vocab.Operation) int {
			atStripe := srv.RefundsByMetadata(refunds.MetadataOperationID)[op.OperationID]
			rows := h.Count(t, `SELECT count(*) FROM refunds WHERE operation_id = $1`, op.OperationID)
			require.Equal(t, atStripe, rows, "refunds at Stripe and refund rows agree")
			return atStripe
		},
	}
}

// testStripe starts the counting test Stripe with the seed's charges.
func testStripe(t *testing.T) (*stripetest.Server, *refunds.Client, func(cfg *config.Config)) {
	srv, ts := stripetest.Start(t, nil)
	srv.AddCharge("ch_1", 1_000_000, "usd")
	srv.AddCharge("ch_declined", 5000, "usd")
	srv.SetChargeError("ch_declined", http.StatusPaymentRequired, "card_error", "card_declined")
	client, err := refunds.NewClient(&refunds.Config{APIKey: stripetest.TestAPIKey, BaseURL: ts.URL})
	require.NoError(t, err)
	return srv, client, func(cfg *config.Config) { cfg.StripeAPIKey, cfg.StripeAPIBase = stripetest.TestAPIKey, ts.URL }
}

func TestToolsOnSQLite(t *testing.T) {
	t.Parallel()
	srv, stripe, configure := testStripe(t)
	h := toolkit.SQLite(t, nil, &toolkit.Options{Seed: seedFile(), Build: build(stripe), Configure: configure})
	for _, c := range append(inTxCases(), refundCase(srv)) {
		t.Run(c.Tool, func(t *testing.T) { toolkit.Check(t, h, c) })
	}
	t.Run("ResetSeatSaysWhenNothingChanged", func(t *testing.T) { resetSeatNoOp(t, h) })
}

func TestToolsOnPostgres(t *testing.T) {
	t.Parallel()
	srv, stripe, configure := testStripe(t)
	h := toolkit.Postgres(t, nil, &toolkit.Options{Seed: seedFile(), Build: build(stripe), Configure: configure})
	for _, c := range append(inTxCases(), refundCase(srv)) {
		t.Run(c.Tool, func(t *testing.T) { toolkit.Check(t, h, c) })
	}
	t.Run("ResetSeatSaysWhenNothingChanged", func(t *testing.T) { resetSeatNoOp(t, h) })
}

// resetSeatNoOp: freeing a seat that has no user succeeds and says that
// nothing changed.
func resetSeatNoOp(t *testing.T, h *toolkit.Harness) {
	result := func(key, seat string) map[string]any {
		h.Call(t, "reset_seat", key, map[string]any{"seat_id": seat})
		op := h.Await(t, "reset_seat", key)
		require.Equal(t, vocab.StatusSucceeded, op.Status)
		var out map[string]any
		require.NoError(t, json.Unmarshal(op.Result, &out))
		return out
	}
	require.Equal(t, map[string]any{"seat_id": "seat_busy", "status": "reset", "changed": true}, result("seat-busy-0001", "seat_busy"))
	require.Equal(t, map[string]any{"seat_id": "seat_busy", "status": "already_free", "changed": false}, result("seat-busy-0002", "seat_busy"))
	require.Equal(t, map[string]any{"seat_id": "seat_free", "status": "already_free", "changed": false}, result("seat-free-0001", "seat_free"))
}
